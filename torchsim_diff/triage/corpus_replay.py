"""Replaying saved cases: seed entries must pass, known bugs must still fail the same way."""
from __future__ import annotations

import dataclasses

from torchsim_diff.triage.corpus import KNOWN, Entry
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
