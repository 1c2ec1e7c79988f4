"""Which known cause a failure is: "known: CAUSE (project, status, upstream)" or "new".

    >>> ledger = CauseLedger.read("corpora/known")
    >>> identity = ledger.identify(ReduceThenBucket.of_checker(checker), verdict)
    >>> identity.text()
    'known: inductor-float-floor-divide-as-floor-of-quotient (pytorch, reported, https://github.com/pytorch/pytorch/issues/188048)'

A failure is identified by the cause signature of its own minimal case (the refiner reduces
it: first divergent op, kind and trigger, or an error's normalised message), looked up among
the cause signatures of the ledger's entries, as a campaign marks known bugs. The raw bucket
of the failure as found says nothing of the cause and is never matched.
"""
from __future__ import annotations

import dataclasses

from torchsim_diff.buckets.causes import Cause, read_causes
from torchsim_diff.buckets.signatures import bucket_of

NEW = "new"


@dataclasses.dataclass(frozen=True)
class Identity:
    """What a failure is: the ledger causes whose entries have its signature (one, or several
    when the signature does not tell them apart), new (none), or not known either way
    (`unidentified`: why)."""
    signature: str | None = None     # the failure's cause signature (its minimal case's)
    causes: tuple = ()               # (Cause, name of the entry with that signature), ...
    unidentified: str = ""

    def text(self) -> str:
        if self.unidentified:
            return f"not identified: {self.unidentified}"
        if not self.causes:
            return NEW
        named = " or ".join(_named(cause) for cause, _entry in self.causes)
        return f"known: {named}" if len(self.causes) == 1 else f"known, one of: {named} (their entries share this signature)"

    def fields(self) -> dict:
        """The columns a replay row gives it."""
        return {"cause": self.text(), "cause signature": self.signature or "-",
                "matched entry": ", ".join(entry for _cause, entry in self.causes) or "-"}


def _named(cause: Cause) -> str:
    where = ", ".join(part for part in (cause.project, cause.status, cause.upstream) if part)
    return f"{cause.name} ({where})"


class CauseLedger:
    """The ledger's entries by the bucket of their cause signature."""

    def __init__(self, causes: list, problems: list = ()):
        self.problems = list(problems)     # the corrupt causes left out, one line each
        self.by_bucket: dict = {}
        for cause in causes:
            for entry in cause.entries:
                if not entry.cause:       # not re-signed (its route could not run): matches nothing
                    continue
                matches = self.by_bucket.setdefault(bucket_of(entry.cause), [])
                if all(known is not cause for known, _entry in matches):
                    matches.append((cause, entry.name))

    @classmethod
    def read(cls, folder: str) -> "CauseLedger":
        """The ledger under `folder`; a corrupt cause is left out and named in `problems`."""
        return cls(*read_causes(folder))

    def ambiguous(self) -> list:
        """The matches of the signatures that more than one cause's entries hold."""
        return [matches for matches in self.by_bucket.values() if len(matches) > 1]

    def identify(self, refiner, verdict) -> Identity:
        """The identity of a failing verdict; refiner: a triage.refine.ReduceThenBucket, which
        reduces the failure (or reuses its reduction) and sets verdict.refined."""
        if not verdict.failed:
            return Identity(unidentified="it did not fail")
        if not verdict.kind.reducible:
            return Identity(unidentified=f"a {verdict.kind.value} failure is not reduced, so it has no cause signature")
        if not verdict.refined:
            error = refiner.refine(verdict).get("reduce_error")
            if not verdict.refined:
                return Identity(unidentified=f"not reduced: {error or 'its reduction gave no signature'}")
        return self.match(verdict.refined)

    def match(self, signature: str) -> Identity:
        return Identity(signature=signature, causes=tuple(self.by_bucket.get(bucket_of(signature), ())))
