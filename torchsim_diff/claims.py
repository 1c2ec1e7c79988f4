"""Which fuzz item raises a bucket: the first one to fail in it. The others record and go on.

A pytest fuzz item ends at its first raised failure (Hypothesis shrinks it, the item fails).
One bug that every item meets, such as a wrong result for the simplest case that each item
tries first, would end every item after a case or two: one bug as dozens of failed items,
and a campaign whose workers run out of items and idle. So a bucket is claimed by the first
item that fails in it, across xdist workers (one SQLite file in the run's report folder).
The claiming item keeps raising it, because Hypothesis replays and shrinks it there; every
other item records the failure (its record is written as usual) and draws its next case.

    >>> claims = BucketClaims("reports/run/claims.sqlite")
    >>> claims.raise_here("a1b2c3d4e5", "fuzz/test_fuzz.py::test_fuzz[relu]")
    True
"""
from __future__ import annotations

import os
import sqlite3

LOCK_WAIT_S = 60.0


class BucketClaims:
    """bucket -> the item that claimed it, shared by the processes of one run."""

    def __init__(self, path: str):
        self.path = path
        self._owners: dict = {}

    def raise_here(self, bucket: str, item: str) -> bool:
        """Whether `item` raises a failure in `bucket`: it claimed the bucket, now or earlier.
        Where the claims cannot be stored, every item raises (the behaviour without claims)."""
        if bucket not in self._owners:
            try:
                self._owners[bucket] = self._claim(bucket, item)
            except (OSError, sqlite3.Error):
                return True
        return self._owners[bucket] == item

    def _claim(self, bucket: str, item: str) -> str:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS claims (bucket TEXT PRIMARY KEY, item TEXT NOT NULL)")
                db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?)", (bucket, item))
                return db.execute("SELECT item FROM claims WHERE bucket = ?", (bucket,)).fetchone()[0]
        finally:
            db.close()
