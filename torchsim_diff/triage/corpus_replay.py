"""Replaying saved cases: seed entries must pass, known bugs must still fail the same way."""
from __future__ import annotations

import dataclasses

from torchsim_diff.case.graph import Case
from torchsim_diff.buckets.corpus import KNOWN, Entry
from torchsim_diff.results.kinds import Status


@dataclasses.dataclass
class ReplayOutcome:
    entry: Entry
    route: str
    expected: str            # "pass" or "fail in bucket B"
    got: str
    ok: bool
    verdict: object = None

    def row(self) -> dict:
        return {"entry": self.entry.name, "route": self.route, "expected": self.expected,
                "got": self.got, "ok": "yes" if self.ok else "NO"}


def routes_for(entry: Entry, routes: list) -> list:
    """A known bug replays on its own route only; a seed entry on every route asked for."""
    if entry.kind == KNOWN:
        return [entry.route] if entry.route in routes else []
    return list(routes)


def replay_entry(checker, entry: Entry, route: str, known: set = frozenset()) -> ReplayOutcome:
    """Replay one entry; a seed failing in one of the `known` buckets counts as expected."""
    verdict = checker.check(entry.case, route)
    got = verdict.status.value if not verdict.failed else f"fail in bucket {verdict.bucket} ({verdict.kind.value})"
    if entry.kind == KNOWN:
        expected = f"fail in bucket {entry.bucket}"
        ok = verdict.failed and verdict.bucket == entry.bucket
    else:
        expected = "pass"
        ok = verdict.status in (Status.PASS, Status.UNSUPPORTED)
        if verdict.failed and verdict.bucket in known:
            ok, got = True, f"known bug {verdict.bucket} ({verdict.kind.value})"
    return ReplayOutcome(entry, route, expected, got, ok, verdict)


# -- re-signing a known entry with its cause ---------------------------------------------------
def resign(refiner, entry: Entry, *, simplify: bool = False) -> tuple:
    """(the entry's JSON with its raw bucket and signature, as its case is checked now, and the
    cause signature of its minimal case; what happened). The JSON is None when the entry no
    longer fails as its kind on its route (it stops reproducing: replay says so too) or could
    not be reduced. refiner: a triage.refine.ReduceThenBucket; each entry is reduced afresh.
    simplify: the entry keeps the minimal case itself (fewer nodes, simpler values: what its
    bundle shows a maintainer) when that fails as its kind too."""
    refiner.by_raw.clear()          # entries sharing a raw signature each get their own cause
    verdict = refiner.checker.check(entry.case, entry.route, timeout_s=entry.raw.get("timeout_s"))
    if not verdict.failed or verdict.kind.value != entry.failure_kind:
        return None, f"does not fail as {entry.failure_kind} any more: {verdict.status.value} {verdict.kind}"
    if not _same_failure(entry, verdict):
        return None, f"fails differently now: {verdict.message.splitlines()[0] if verdict.message else verdict.signature}"
    raw_signature, raw_bucket = verdict.signature, verdict.bucket
    fields = refiner.refine(verdict)
    if not verdict.refined:
        return None, "not reduced: it did not fail again when reduced"
    simplified = None
    reduced = verdict.record().with_fields(**fields).reduced_case
    if simplify and reduced and reduced != entry.case.to_dict():
        minimal = refiner.checker.check(Case.from_dict(reduced), entry.route, timeout_s=entry.raw.get("timeout_s"))
        if minimal.failed and minimal.kind.value == entry.failure_kind:
            simplified, raw_signature, raw_bucket = reduced, minimal.signature, minimal.bucket
    data = {}
    for key, value in entry.raw.items():
        if key != "cause":
            data[key] = value
        if key == "signature":
            data["cause"] = verdict.refined
    data.update(bucket=raw_bucket, signature=raw_signature, cause=verdict.refined)
    if simplified:
        data["case"] = simplified
    changed = "unchanged" if data == entry.raw else "re-signed"
    return data, f"{changed}: {verdict.refined}"


def _same_failure(entry: Entry, verdict) -> bool:
    """The verdict is the failure the entry recorded: the same raw signature, or for an error
    whose raw signature changed only because messages are normalised differently now, the same
    first message line once normalised."""
    from torchsim_diff.buckets.signatures import normalise
    if verdict.signature == entry.fields.signature or verdict.kind.value_failure:
        return verdict.signature == entry.fields.signature
    recorded = (entry.fields.message or "").splitlines()[:1]
    return bool(recorded) and normalise(recorded[0]) == normalise(verdict.message.splitlines()[0] if verdict.message else "")
