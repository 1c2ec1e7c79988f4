"""Buckets that persist across runs: each keeps its smallest case, first sighting and count,
so a second campaign can say which of its findings are new.

The store is one SQLite file (default reports/buckets.sqlite) in WAL mode; every `add` is
one transaction, so campaigns sharing a history never lose each other's updates. A history
kept by earlier versions as JSON (buckets.json beside the SQLite file, or the path given
when it ends in .json) is imported once. The file is verified before it is trusted
(buckets.history_file): a file the tool did not make is refused, never renamed; a damaged one
is set aside with a one-line warning naming where it went, never overwritten; a command that
only reads opens it read-only. A row whose cells are not of their column's type is left out
(counted in `left_out`, warned of once).

    >>> store = BucketStore("reports/buckets.sqlite")
    >>> store.add(record)          # True when the bucket was never seen before
"""
from __future__ import annotations

import json
import os
import sqlite3
import sys
import time

from torchsim_diff import files
from torchsim_diff.case.graph import case_size
from torchsim_diff.results.jsonl import StorageError
from torchsim_diff.results.kinds import Status
from torchsim_diff.results.record import HISTORY_REQUIRED, BadRecord, Record
from torchsim_diff.buckets.history_file import open_history, set_aside

DEFAULT_PATH = os.path.join("reports", "buckets.sqlite")
LEGACY_SUFFIX = ".json"


def legacy_path(path: str) -> str:
    """The JSON history of earlier versions that a history path imports."""
    return os.path.splitext(store_path(path))[0] + LEGACY_SUFFIX


def store_path(path: str) -> str:
    """The SQLite file for a history path: a legacy `.json` path maps to its `.sqlite` sibling."""
    return os.path.splitext(path)[0] + ".sqlite" if path.endswith(LEGACY_SUFFIX) else path


class BucketStore:
    """Bucket history in SQLite; `new` holds the buckets this process saw first. read_only:
    for commands that only read it (buckets.history_file): nothing is written, and a missing or
    damaged file reads as empty."""

    def __init__(self, path: str = DEFAULT_PATH, *, read_only: bool = False):
        self.path = store_path(path)
        self.read_only = read_only
        self.new: set = set()
        self.left_out = 0          # rows whose cells are not of their column's type
        self._db = open_history(self.path, read_only=read_only)
        self._import_legacy(legacy_path(self.path))

    # -- opening ---------------------------------------------------------------------------
    def _import_legacy(self, legacy: str) -> None:
        """Fold a JSON history of earlier versions in, once (remembered in the `imported` table);
        a reader folds it into its copy in memory only where there is no SQLite file."""
        if not os.path.exists(legacy) or (self.read_only and os.path.exists(self.path)):
            return
        key = os.path.abspath(legacy)
        if self._imported(key):
            return
        try:
            entries = files.read_json(legacy, files.LEGACY_HISTORY)
        except files.UnreadableFile as exc:
            if not os.path.isfile(legacy):
                raise StorageError(f"bucket history {exc}") from None
            set_aside(legacy, exc.reason, keep=self.read_only)
            return
        if not isinstance(entries, dict) or not isinstance(entries.get("buckets"), dict):
            raise StorageError(f"bucket history {legacy} is no JSON history torchsim-diff made (no 'buckets' object); "
                               f"it is left as it is: pass another --buckets path")
        try:
            rows = [_legacy_row(bucket, entry) for bucket, entry in entries["buckets"].items()]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            set_aside(legacy, f"{type(exc).__name__}: {exc}", keep=self.read_only)
            return
        with self._transaction() as db:
            if self._imported(key):             # another campaign imported it meanwhile
                return
            db.executemany("INSERT OR IGNORE INTO buckets VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            db.execute("INSERT INTO imported VALUES (?, ?)", (key, time.strftime("%Y-%m-%d %H:%M:%S")))

    def _imported(self, key: str) -> bool:
        return self._db.execute("SELECT 1 FROM imported WHERE path = ?", (key,)).fetchone() is not None

    # -- updates ---------------------------------------------------------------------------
    def add(self, record: Record) -> bool:
        """Account for one failing record in one transaction; True when its bucket is new.
        The record is kept as its results.jsonl JSON (Record.to_dict). A new bucket stays
        unsettled until its self-check ends (settle or forget): one that a killed run left
        unsettled is new again to the next run, and checked again, never hidden as seen."""
        bucket = record.bucket
        if not bucket:
            return False
        size = list(case_size(record.case))
        # absolute, so that `export` finds them from any folder (results.run_folder_of)
        record = record.with_fields(**{key: os.path.abspath(value) for key, value in record.artifact_folders().items()
                                       if isinstance(value, str) and value})
        kept = json.dumps(record.to_dict())
        with self._transaction() as db:
            row = db.execute("SELECT size FROM buckets WHERE bucket = ?", (bucket,)).fetchone()
            if row is None:
                db.execute("INSERT INTO buckets VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)",
                           (bucket, record.route, record.kind, record.op,
                            _first_line(record.message), time.strftime("%Y-%m-%d %H:%M:%S"),
                            json.dumps(size), kept))
                db.execute("INSERT OR IGNORE INTO unsettled VALUES (?)", (bucket,))
                self.new.add(bucket)
                return True
            left = bucket not in self.new and db.execute(
                "SELECT 1 FROM unsettled WHERE bucket = ?", (bucket,)).fetchone() is not None
            kept_size = _loads(row[0])
            if not isinstance(kept_size, list) or size < kept_size:
                db.execute("UPDATE buckets SET count = count + 1, size = ?, record = ? WHERE bucket = ?",
                           (json.dumps(size), kept, bucket))
            else:
                db.execute("UPDATE buckets SET count = count + 1 WHERE bucket = ?", (bucket,))
        if left:            # an earlier run ended before its self-check settled this bucket
            self.new.add(bucket)
        return left

    def settle(self, bucket: str) -> None:
        """This run's new bucket was self-checked and confirmed (or reported unchecked): seen."""
        with self._transaction() as db:
            db.execute("DELETE FROM unsettled WHERE bucket = ?", (bucket,))

    def forget(self, bucket: str) -> None:
        """Take a bucket this run added back out (its self-check failed: triage.self_check),
        so that a later run meeting it is told it is new, and checks it again."""
        if bucket in self.new:
            with self._transaction() as db:
                db.execute("DELETE FROM buckets WHERE bucket = ?", (bucket,))
                db.execute("DELETE FROM unsettled WHERE bucket = ?", (bucket,))
            self.new.discard(bucket)

    def _transaction(self):
        return _Transaction(self._db, self.path)

    def save(self) -> None:
        """Nothing to do: every `add` is already committed (kept for callers of the JSON store)."""

    def close(self) -> None:
        self._db.close()

    # -- reading ---------------------------------------------------------------------------
    def smallest_record(self, bucket: str) -> Record | None:
        """The smallest record kept for `bucket`, None when the bucket has none (or its JSON text
        is damaged); BadRecord (its reason) when the kept JSON is no record a bundle can be made
        from (HISTORY_REQUIRED)."""
        row = self._db.execute("SELECT record FROM buckets WHERE bucket = ?", (bucket,)).fetchone()
        kept = _loads(row[0]) if row else None
        return None if kept is None else Record.from_dict(kept, required=HISTORY_REQUIRED)

    @property
    def buckets(self) -> dict:
        """bucket -> {route, kind, op, message, first_seen, count, size, case}; a row whose
        stored JSON is damaged shows size [0, 0, 0] and no case."""
        rows = self._db.execute("SELECT bucket, route, kind, op, message, first_seen, count, size, record "
                                "FROM buckets ORDER BY first_seen, bucket").fetchall()
        found = {}
        left_out = sum(1 for r in rows if not _cells_ok(r))
        if left_out and not self.left_out:
            sys.stderr.write(f"torchsim-diff: warning: bucket history {self.path}: {left_out} row(s) left out, "
                             f"their cells not of their column's type\n")
        self.left_out = left_out
        for r in filter(_cells_ok, rows):
            size = _loads(r[7])
            size = size if isinstance(size, list) and len(size) == 3 else [0, 0, 0]
            found[r[0]] = {"route": r[1], "kind": r[2], "op": r[3], "message": r[4], "first_seen": r[5],
                           "count": r[6], "size": size, "case": _kept_case(r[8])}
        return found


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error); write failures become StorageError."""

    def __init__(self, db: sqlite3.Connection, path: str):
        self.db, self.path = db, path

    def __enter__(self) -> sqlite3.Connection:
        self._run("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self._run("COMMIT")
        elif self.db.in_transaction:
            self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError):
            raise StorageError(f"cannot write bucket history {self.path}: {exc}") from None
        return False

    def _run(self, statement: str) -> None:
        try:
            self.db.execute(statement)
        except sqlite3.OperationalError as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise StorageError(f"cannot write bucket history {self.path}: {exc}") from None


# Each column's type as `buckets` reads it; SQLite keeps whatever a file's writer put there.
_CELL_TYPES = (str, (str, type(None)), (str, type(None)), (str, type(None)), (str, type(None)), (str, type(None)),
               int, str, str)


def _cells_ok(row: tuple) -> bool:
    return all(isinstance(cell, kind) and not isinstance(cell, bool) for cell, kind in zip(row, _CELL_TYPES))


def _loads(text):
    """Stored JSON text, None when it is not (the file is data too)."""
    try:
        return files.parse_json(text, "bucket history") if isinstance(text, (str, bytes)) else None
    except files.UnreadableFile:
        return None


def _kept_case(text):
    """The case of a kept record's JSON text (None when the text is no record)."""
    try:
        return Record.from_dict(_loads(text), required=HISTORY_REQUIRED).case
    except BadRecord:
        return None


def _first_line(message) -> str:
    return message.splitlines()[0][:200] if message else ""


def _legacy_row(bucket: str, row: dict) -> tuple:
    """A row of the SQLite table from an entry of the JSON history (same columns; its record
    when it kept one, else one made from the columns)."""
    record = row.get("record") or Record(bucket=bucket, route=row["route"], kind=row["kind"], op=row.get("op"),
                                         message=row.get("message", ""), case=row["case"],
                                         status=Status.FAIL.value).to_dict()
    return (bucket, row["route"], row["kind"], row.get("op"), row.get("message", ""),
            row.get("first_seen", ""), int(row["count"]), json.dumps(list(row["size"])), json.dumps(record))


def smallest_per_bucket(records) -> dict:
    """bucket -> its smallest failing record among `records` (results.record.Record)."""
    best: dict = {}
    for record in records:
        bucket = record.bucket
        if bucket and record.failed and isinstance(record.case, dict):
            if bucket not in best or case_size(record.case) < case_size(best[bucket].case):
                best[bucket] = record
    return best
