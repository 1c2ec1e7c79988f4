"""Where each bucket of a run stands: the one answer the terminal, the Buckets table and the
bucket pages give.

    known        its failure's minimal case has a known bug's cause signature: the cause
                 (corpora/known/<cause>) and that cause's upstream status
    NEW          first seen in this run, and its self-check reproduced it
    unconfirmed  first seen in this run, and its self-check did not reproduce it (why)
    seen before  the bucket history holds it from an earlier run
    not reduced  a failure a campaign's budget left unreduced (Record.unreduced): its raw
                 bucket says nothing of the cause

The bucket history also says when a bucket was first seen (a time; the case id is apart).

    >>> Standing(new={"8aee4e4867"}).status("8aee4e4867", known=False)
    'NEW'
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Standing:
    new: frozenset = frozenset()
    unconfirmed: dict = dataclasses.field(default_factory=dict)   # bucket -> why its self-check failed
    causes: dict = dataclasses.field(default_factory=dict)        # cause bucket -> buckets.causes.Cause
    first_seen: dict = dataclasses.field(default_factory=dict)    # bucket -> when the history first saw it

    def __post_init__(self):
        object.__setattr__(self, "new", frozenset(self.new))

    @classmethod
    def of_run(cls, new=(), unconfirmed=None, *, known_folder: str | None = None,
               history: dict | None = None) -> "Standing":
        """A run's standing: its NEW and unconfirmed buckets, the causes of the known-bug
        folder, and the history's rows (buckets.bucket_history.BucketStore.buckets)."""
        return cls(frozenset(new), dict(unconfirmed or {}), causes_by_bucket(known_folder) if known_folder else {},
                   {bucket: row.get("first_seen") for bucket, row in (history or {}).items() if row.get("first_seen")})

    def status(self, bucket: str, known: bool) -> str:
        if known:
            cause = self.causes.get(bucket)
            return f"known: {cause.name} ({cause_status(cause)})" if cause else "known"
        if bucket in self.new:
            return "NEW"
        if bucket in self.unconfirmed:
            return f"unconfirmed: {self.unconfirmed[bucket]}"
        return "seen before" if bucket in self.first_seen else "-"

    def of_record(self, record) -> str:
        """The status of `record`'s bucket, as far as that one failure tells it."""
        return "not reduced" if record.unreduced else self.status(record.bucket, record.known)

    def upstream(self, bucket: str) -> str | None:
        """The upstream thread of a known bucket's cause, if it has one (a web address: the
        ledger is data, and no other scheme is linked)."""
        cause = self.causes.get(bucket)
        link = cause.upstream if cause else ""
        return link if link.startswith(("https://", "http://")) else None


def cause_status(cause) -> str:
    """A cause's upstream status as `causes` prints it: new, reported, fixed in <version>."""
    return cause.status + (f" in {cause.fixed_in}" if cause.fixed_in else "")


def causes_by_bucket(known_folder: str) -> dict:
    """cause bucket -> buckets.causes.Cause, for every case of every readable cause under
    `known_folder` (a corrupt cause is left out here: `causes` names it)."""
    from torchsim_diff.buckets.causes import read_causes
    from torchsim_diff.buckets.signatures import bucket_of
    causes, _problems = read_causes(known_folder)
    return {bucket_of(entry.cause): cause for cause in causes for entry in cause.entries if entry.cause}
