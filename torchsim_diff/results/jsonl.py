"""results.jsonl: one record per (case, route), appended as it is made, so a killed run
loses nothing already written.

A record is one `write` of one whole line to a file opened for appending, so concurrent
writers never interleave inside a line. A killed writer can still leave a torn last line;
the next writer settles it before appending (settle_tail), so the torn text never swallows
a new record: a last line that is a whole record without its newline (an edited or
concatenated file) gets its newline, and torn text is moved to `<file>.torn` and cut, never
deleted. A results file that is a symbolic link is refused: records are written only into
the run folder itself. Readers skip what they cannot
read and say how many lines and why. Lines are results.record.Record objects as JSON
(Record.to_dict / Record.from_dict, which checks each field's type).
"""
from __future__ import annotations

import collections
import errno
import json
import os
import sys

from torchsim_diff import files
from torchsim_diff.results.record import BadRecord, Record


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
        if os.path.islink(path):
            raise StorageError(f"cannot write results to {path}: it is a symbolic link (records go only into "
                               f"the run folder itself); nothing was saved")
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
            settled = settle_tail(self._fd, path)
        except OSError as exc:
            raise StorageError(f"cannot write results to {path}: {_reason(exc)}; nothing was saved") from None
        if settled:
            self._warn(settled)

    def write(self, record: Record) -> None:
        record = stored_record(record, os.path.dirname(os.path.abspath(self.path)))
        line = (json.dumps(record.to_dict(), sort_keys=False) + "\n").encode("utf-8")
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


TORN_SUFFIX = ".torn"


def settle_tail(fd: int, path: str) -> str:
    """Make an open results file end in a newline before records are appended; what was done
    ('' when it already did). A last line that parses as a record keeps its bytes and gets its
    newline; torn text is appended to `path` + TORN_SUFFIX, then cut from the file."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return ""
    start = _last_line_start(fd, size)
    tail = os.pread(fd, size - start, start)
    record, _why = _parse(tail)
    if record is not None:
        os.write(fd, b"\n")
        return f"{path}: its last record had no newline; kept, with one added, before appending"
    with open(path + TORN_SUFFIX, "ab") as aside:
        aside.write(tail + b"\n")
    os.ftruncate(fd, start)
    return (f"{path}: moved {len(tail)} bytes of a torn last record (a killed writer) to "
            f"{os.path.basename(path) + TORN_SUFFIX} before appending")


def _last_line_start(fd: int, size: int) -> int:
    """The offset just after the last newline of a file of `size` bytes (0 when it has none)."""
    keep, step = size, 1 << 16
    while keep > 0:
        start = max(keep - step, 0)
        newline = os.pread(fd, keep - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        keep = start
    return 0


def cut_torn_tail(fd: int) -> int:
    """Truncate an open file back to just after its last newline; the bytes dropped."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return 0
    keep = _last_line_start(fd, size)
    os.ftruncate(fd, keep)
    return size - keep


class ReadLog:
    """What readers skipped, by reason; `summary()` is one line (or '' when nothing was skipped)."""

    def __init__(self):
        self.skipped: collections.Counter = collections.Counter()
        self.files: set = set()
        self.refused: dict = {}     # bucket -> why its record was refused (unsafe artifacts)

    def skip(self, path: str, reason: str) -> None:
        self.skipped[reason] += 1
        self.files.add(path)

    def summary(self) -> str:
        if not self.skipped:
            return ""
        total = sum(self.skipped.values())
        reasons = ", ".join(f"{n} {why}" for why, n in self.skipped.most_common())
        return f"skipped {total} unreadable line(s) in {', '.join(sorted(self.files))}: {reasons}"


def read_records(path: str, log: ReadLog | None = None):
    """Records of a results.jsonl; lines that are not records are counted in `log`, by reason.

    The file must be a regular file within files.RESULTS_FILE's cap (else it is skipped whole,
    and counted); a line over files.RESULTS_LINE's cap is skipped, and so is a line whose
    fields have the wrong types (Record.from_dict), or of a newer schema. Artifact folders come back absolute, resolved
    inside the run folder (the file's folder); a record whose own folder lies outside it is
    skipped too, its reason kept in `log.refused` under its bucket."""
    log = log if log is not None else ReadLog()
    try:
        handle = files.open_regular(path, files.RESULTS_FILE)
    except files.UnreadableFile as exc:
        log.skip(path, f"unreadable file ({exc.reason})")
        return
    run_dir = os.path.dirname(os.path.abspath(path))
    with handle:
        for raw in _lines(handle):
            if raw is None:
                log.skip(path, f"a line over {files.RESULTS_LINE.text()}")
                continue
            record, why = _parse(raw)
            if why:
                log.skip(path, why)
                continue
            if record is None:
                continue
            try:
                yield resolved_artifacts(record, run_dir)
            except UnsafeArtifacts as exc:
                log.skip(path, "a record whose artifacts lie outside its run folder")
                log.refused.setdefault(record.bucket, f"{path}: {exc}")


def _lines(handle):
    """Lines of `handle`, None for each line over the line cap (read past, never held whole)."""
    limit = files.RESULTS_LINE.max_bytes
    while True:
        raw = handle.readline(limit + 1)
        if not raw:
            return
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(limit)
            yield None
        else:
            yield raw


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
    except ValueError:      # an integer past Python's 4,300-digit conversion limit
        return None, "a number too long to read"
    except RecursionError:
        return None, f"JSON nested deeper than {files.MAX_JSON_DEPTH} levels"
    if files.depth_over(record, files.MAX_JSON_DEPTH):
        return None, f"JSON nested deeper than {files.MAX_JSON_DEPTH} levels"
    try:
        return Record.from_dict(record), None
    except BadRecord as exc:
        return None, exc.reason


def stream_records(paths, log: ReadLog):
    """Records of every file in turn, one at a time (read_records): a caller that keeps only
    what it needs of each holds no more than that, however large the files."""
    for path in paths:
        yield from read_records(path, log)


def read_all(files) -> tuple:
    """(records of every file, ReadLog): all of them held at once (stream_records does not)."""
    log = ReadLog()
    return list(stream_records(files, log)), log


# -- artifact folders -------------------------------------------------------------------------
# ARTIFACT_FIELDS (results.record): record fields naming a folder of the route's files, which
# bundles copy (report.bundles.write_bundle).
ARTIFACTS_DIR = "artifacts"        # RUN/artifacts/<route>/<case id>: check.Checker's layout


class UnsafeArtifacts(ValueError):
    """A record whose artifact folder lies outside its run folder: the message says which."""


def stored_record(record: Record, run_dir: str) -> Record:
    """`record` as results.jsonl stores it: artifact folders relative to the run folder (the
    results file's folder), so a run folder can move. A folder outside it (a reduction cached
    by an earlier run) is not this run's to name and is stored as null."""
    changed = {}
    for key, value in record.artifact_folders().items():
        if isinstance(value, str) and value:
            relative = os.path.relpath(os.path.abspath(value), run_dir)
            changed[key] = None if _leaves(relative) else relative
    return record.with_fields(**changed) if changed else record


def artifact_folder(value, run_dir: str) -> str | None:
    """The folder an artifact field of a record from RUN/results*.jsonl names, resolved and
    absolute: relative to the run folder (as written now), absolute inside it, or relative to
    where the campaign ran (records written before artifacts were stored relative). It must lie
    in RUN/artifacts/, where the checker puts every case's files: UnsafeArtifacts when the
    folder exists elsewhere (an absolute path, `..` or a symlink out of it); None when there is
    none, or it is gone (a folder that does not exist cannot leak anything)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise UnsafeArtifacts(f"artifact folder {value!r} is not a folder name")
    root = os.path.realpath(os.path.join(run_dir, ARTIFACTS_DIR))
    joined = os.path.realpath(os.path.join(run_dir, value))
    if os.path.isdir(joined):
        if _inside(joined, root) and joined != root:
            return joined
        raise UnsafeArtifacts(f"artifact folder {value!r} lies outside its run folder's {ARTIFACTS_DIR}/ "
                              f"({os.path.join(run_dir, ARTIFACTS_DIR)}); only files the run wrote go into a bundle")
    if not os.path.isabs(value) and os.path.isdir(value):
        legacy = os.path.realpath(value)
        if _inside(legacy, root) and legacy != root:
            return legacy
    return None


def resolved_artifacts(record: Record, run_dir: str) -> Record:
    """`record` with its artifact folders absolute (artifact_folder). A reduction's folder
    outside the run (an older record's reduction cached by an earlier run) is dropped; the
    case's own folder outside it refuses the record: UnsafeArtifacts."""
    present = record.artifact_folders()
    if not any(present.values()):
        return record
    artifacts = artifact_folder(record.artifacts, run_dir)
    try:
        reduced = artifact_folder(record.reduced_artifacts, run_dir)
    except UnsafeArtifacts:
        reduced = None
    resolved = dict(artifacts=artifacts, reduced_artifacts=reduced)
    return record.with_fields(**{k: v for k, v in resolved.items() if k in present})


def run_folder_of(value: str) -> str | None:
    """The run folder of an absolute artifact folder RUN/artifacts/<route>/<case> (as the
    bucket history keeps them), or None when the path has no artifacts/ component."""
    parts = os.path.abspath(value).split(os.sep)
    if ARTIFACTS_DIR not in parts[:-1]:
        return None
    last = len(parts) - 1 - parts[::-1].index(ARTIFACTS_DIR)
    return os.sep.join(parts[:last]) or os.sep


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _leaves(relative: str) -> bool:
    return relative == os.pardir or relative.startswith(os.pardir + os.sep)


def find_results(paths) -> list:
    """Every results*.jsonl under the given files or folders, each file once however many of
    the paths name it (`table RUN RUN/results.jsonl` reads its records once)."""
    found = {}
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                for f in sorted(files):
                    if f.startswith("results") and f.endswith(".jsonl"):
                        found.setdefault(os.path.realpath(os.path.join(root, f)), os.path.join(root, f))
        elif os.path.exists(path):
            found.setdefault(os.path.realpath(path), path)
    return sorted(found.values())


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _stderr(line: str) -> None:
    sys.stderr.write(f"torchsim-diff: warning: {line}\n")
