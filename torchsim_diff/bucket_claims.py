"""Which fuzz item raises a bucket: the first one to fail in it. The others record and go on.

A pytest fuzz item ends at its first raised failure (Hypothesis shrinks it, the item fails).
One bug that every item meets, such as a wrong result for the simplest case that each item
tries first, would end every item after a case or two: one bug as dozens of failed items,
and a campaign whose workers run out of items and idle. So a bucket is claimed by the first
item that fails in it, across xdist workers (one SQLite file in the run's report folder).
The claiming item keeps raising it, because Hypothesis replays and shrinks it there; every
other item records the failure (its record is written as usual) and draws its next case.

    >>> claims = BucketClaims("reports/run/claims.sqlite")
    >>> claims.held_by("a1b2c3d4e5", "fuzz/test_fuzz.py::test_fuzz[relu]")
    True

The same claims say which process localises a bucket's divergent kernel (check.Checker):
the first to meet it, not the first in each of 16 workers.
"""
from __future__ import annotations

import os
import sqlite3

LOCK_WAIT_S = 60.0


class BucketClaims:
    """bucket -> whoever claimed it first (a fuzz item, a checker), shared by the processes of one run."""

    def __init__(self, path: str):
        self.path = path
        self._owners: dict = {}

    def held_by(self, bucket: str, claimant: str) -> bool:
        """Whether `claimant` holds `bucket`: it claimed it, now or earlier. Where the claims
        cannot be stored, every claimant holds it (the behaviour without claims)."""
        if bucket not in self._owners:
            try:
                self._owners[bucket] = self._claim(bucket, claimant)
            except (OSError, sqlite3.Error):
                return True
        return self._owners[bucket] == claimant

    def _claim(self, bucket: str, claimant: str) -> str:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS claims (bucket TEXT PRIMARY KEY, item TEXT NOT NULL)")
                db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?)", (bucket, claimant))
                return db.execute("SELECT item FROM claims WHERE bucket = ?", (bucket,)).fetchone()[0]
        finally:
            db.close()
