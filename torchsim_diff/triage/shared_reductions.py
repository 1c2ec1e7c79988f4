"""Reductions shared by the processes of a run, and by the runs of one report folder: a failure
one xdist worker reduced is not reduced again by the next worker that meets it (without it, each
worker that met a known bug reduced it again: 12-56 s a reduction in the README's fuzz pass at
12 nodes), nor by the next campaign on this machine. A 10-minute campaign on 2 cores reduces
about 7 failures in its closing share and meets far more, nearly all of them known bugs met
again; what an earlier run reduced is decided at once.

Keyed as a refiner keys its own reductions within a process (triage.refine.raw_key): the raw
signature with the dtype, layout classes and value classes of the failing case, within a scope
(code_scope): the versions of torch, Triton and Python and the text of torchsim-diff's own
code, so that no reduction made by other code or another compiler is ever reused. One SQLite
file beside the bucket history; where it cannot be read or written, each process reduces for
itself (the behaviour without it), and the run goes on.

    >>> shared = SharedReductions("reports/reductions.sqlite", code_scope())
    >>> shared.put(key, entry)            # entry: triage.refine's reduction entry (JSON data)
    >>> shared.get(key)
    {...}
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import sys

LOCK_WAIT_S = 60.0


@functools.lru_cache(maxsize=1)
def code_scope() -> str:
    """What a reduction depends on besides its case: torch's, Triton's and Python's versions and
    the text of every module of torchsim-diff (a reducer or judge changed by a line reduces
    differently), as one hash."""
    from importlib import metadata
    digest = hashlib.sha256(sys.version.encode())
    for dist in ("torch", "triton"):
        try:
            digest.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{dist}=none".encode())
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            with open(os.path.join(folder, name), "rb") as handle:
                digest.update(os.path.relpath(os.path.join(folder, name), package).encode() + handle.read())
    return digest.hexdigest()[:16]


class SharedReductions:
    """raw_key -> reduction entry (results.record.reduction_entry) within a scope (code_scope),
    one SQLite file."""

    def __init__(self, path: str, scope: str = ""):
        self.path, self.scope = path, scope

    def get(self, key: str) -> dict | None:
        try:
            row = self._query("SELECT entry FROM reductions WHERE scope = ? AND key = ?", (self.scope, key))
            return json.loads(row[0]) if row else None
        except (OSError, sqlite3.Error, ValueError):
            return None

    def put(self, key: str, entry: dict) -> None:
        try:
            self._query("INSERT OR REPLACE INTO reductions VALUES (?, ?, ?)",
                        (self.scope, key, json.dumps(entry, sort_keys=True)))
        except (OSError, sqlite3.Error, TypeError, ValueError):
            pass            # not shared: the other processes reduce it for themselves

    def _query(self, sql: str, parameters: tuple):
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        db = sqlite3.connect(self.path, timeout=LOCK_WAIT_S)
        try:
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS reductions (scope TEXT NOT NULL, key TEXT NOT NULL, "
                           "entry TEXT NOT NULL, PRIMARY KEY (scope, key))")
                return db.execute(sql, parameters).fetchone()
        finally:
            db.close()
