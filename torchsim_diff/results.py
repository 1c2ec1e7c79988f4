"""results.jsonl: one record per (case, route), appended as it is made, so a killed run
loses nothing already written.

A record is one `write` of one whole line to a file opened for appending, so concurrent
writers never interleave inside a line. A killed writer can still leave a torn last line;
the next writer cuts it back to the last newline (saying how many bytes it dropped) before
appending, so the torn text never swallows a new record. Readers skip what they cannot
read and say how many lines and why.
"""
from __future__ import annotations

import collections
import errno
import json
import os
import sys


class StorageError(BaseException):
    """Results or history could not be written (full disk, read-only folder).

    A BaseException, like KeyboardInterrupt: it must end the run at once, not be taken
    for a failing example that Hypothesis replays (and writes again)."""


class ResultsWriter:
    """Appends records to `path` (created with its folder), one JSON object per line."""

    def __init__(self, path: str, *, warn=None):
        self.path = path
        self.written = 0
        self._warn = warn or _stderr
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            dropped = cut_torn_tail(self._fd)
        except OSError as exc:
            raise StorageError(f"cannot write results to {path}: {_reason(exc)}; nothing was saved") from None
        if dropped:
            self._warn(f"{path}: dropped {dropped} bytes of a torn last record (a killed writer) before appending")

    def write(self, record: dict) -> None:
        line = (json.dumps(record, sort_keys=False) + "\n").encode("utf-8")
        try:
            done = os.write(self._fd, line)
            if done != len(line):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            self._fail(exc)
        self.written += 1

    def _fail(self, exc: OSError):
        try:
            cut_torn_tail(self._fd)
        except OSError:
            pass
        raise StorageError(f"cannot write results to {self.path}: {_reason(exc)}; the {self.written} records "
                           f"before it are saved there") from None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def cut_torn_tail(fd: int) -> int:
    """Truncate an open file back to just after its last newline; the bytes dropped."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    keep, step = size, 1 << 16
    while keep > 0:
        start = max(keep - step, 0)
        newline = os.pread(fd, keep - start, start).rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            break
        keep = start
    os.ftruncate(fd, keep)
    return size - keep


class ReadLog:
    """What readers skipped, by reason; `summary()` is one line (or '' when nothing was skipped)."""

    def __init__(self):
        self.skipped: collections.Counter = collections.Counter()
        self.files: set = set()

    def skip(self, path: str, reason: str) -> None:
        self.skipped[reason] += 1
        self.files.add(path)

    def summary(self) -> str:
        if not self.skipped:
            return ""
        total = sum(self.skipped.values())
        reasons = ", ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        return f"skipped {total} unreadable line(s) in {', '.join(sorted(self.files))}: {reasons}"


# Fields every record has had since the first version and that the tables rely on.
REQUIRED = ("case_id", "route", "status", "kind", "bucket", "ops", "case")


def read_records(path: str, log: ReadLog | None = None):
    """Records of a results.jsonl; lines that are not records are counted in `log`, by reason."""
    log = log if log is not None else ReadLog()
    try:
        handle = open(path, "rb")
    except OSError as exc:
        log.skip(path, f"unreadable file ({_reason(exc)})")
        return
    with handle:
        for raw in handle:
            record, why = _parse(raw)
            if why:
                log.skip(path, why)
            elif record is not None:
                yield record


def _parse(raw: bytes):
    """(record, None), (None, reason) or (None, None) for a blank line."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    if not text:
        return None, None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None, "not JSON (a torn or foreign line)"
    if not isinstance(record, dict) or any(key not in record for key in REQUIRED):
        return None, "not a record (JSON without the record fields)"
    return record, None


def read_all(files) -> tuple:
    """(records of every file, ReadLog)."""
    log = ReadLog()
    return [r for f in files for r in read_records(f, log)], log


def find_results(paths) -> list:
    """Every results*.jsonl under the given files or folders."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                found += [os.path.join(root, f) for f in sorted(files)
                          if f.startswith("results") and f.endswith(".jsonl")]
        elif os.path.exists(path):
            found.append(path)
    return sorted(found)


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _stderr(line: str) -> None:
    sys.stderr.write(f"torchsim-diff: warning: {line}\n")
