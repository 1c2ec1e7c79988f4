"""Reductions shared by the processes of one run: a failure one xdist worker reduced is not
reduced again by the next worker that meets it (without it, each worker that met a known bug
reduced it again: 12-56 s a reduction in the README's fuzz pass at 12 nodes).

Keyed as a refiner keys its own reductions within a process (triage.refine.raw_key): the raw
signature with the dtype, layout classes and value classes of the failing case. One SQLite file
in the run's report folder; where it cannot be read or written, each process reduces for itself
(the behaviour without it), and the run goes on.

    >>> shared = SharedReductions("reports/run/reductions.sqlite")
    >>> shared.put(key, entry)            # entry: triage.refine's reduction entry (JSON data)
    >>> shared.get(key)
    {...}
"""
from __future__ import annotations

import json
import os
import sqlite3

LOCK_WAIT_S = 60.0


class SharedReductions:
    """raw_key -> reduction entry (results.record.reduction_entry), one SQLite file per run."""

    def __init__(self, path: str):
        self.path = path

    def get(self, key: str) -> dict | None:
        try:
            row = self._query("SELECT entry FROM reductions WHERE key = ?", (key,))
            return json.loads(row[0]) if row else None
        except (OSError, sqlite3.Error, ValueError):
            return None

    def put(self, key: str, entry: dict) -> None:
        try:
            self._query("INSERT OR REPLACE INTO reductions VALUES (?, ?)", (key, json.dumps(entry, sort_keys=True)))
        except (OSError, sqlite3.Error, TypeError, ValueError):
            pass            # not shared: the other processes reduce it for themselves

    def _query(self, sql: str, parameters: tuple):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS reductions (key TEXT PRIMARY KEY, entry TEXT NOT NULL)")
                return db.execute(sql, parameters).fetchone()
        finally:
            db.close()
