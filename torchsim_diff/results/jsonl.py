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

from torchsim_diff import files


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
        record = stored_record(record, os.path.dirname(os.path.abspath(self.path)))
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


# Fields every record has had since the first version and that the tables rely on.
REQUIRED = ("case_id", "route", "status", "kind", "bucket", "ops", "case")


def _text(v) -> bool:
    return isinstance(v, str)


def _maybe(test):
    return lambda v: v is None or test(v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _texts(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _figures(v) -> bool:
    """An op's own figures (op_errors values): an object whose error figures are numbers."""
    return isinstance(v, dict) and all(_maybe(_number)(v.get(k)) for k in NUMBER_FIELDS if k in v)


def _case(v) -> bool:
    """What readers take from a recorded case without validating it: its dtype, its nodes'
    ops, its inputs' shapes (graph.case_size) and its value tails."""
    if not (isinstance(v, dict) and isinstance(v.get("dtype"), str) and isinstance(v.get("nodes"), list)
            and isinstance(v.get("inputs"), list) and isinstance(v.get("values", {}), dict)):
        return False
    return (all(isinstance(n, dict) and isinstance(n.get("op"), str) for n in v["nodes"])
            and all(isinstance(i, dict) and isinstance(i.get("shape"), list)
                    and all(_number(d) and isinstance(d, int) for d in i["shape"]) for i in v["inputs"])
            and _maybe(_texts)(v.get("values", {}).get("tails")))


NUMBER_FIELDS = ("n_nodes", "max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed",
                 "t_case", "t_harness", "t_start", "t_diagnose")
# field -> (test, what it must be): every field a reader of records takes, checked on read, so
# that a line of the wrong shape is skipped (and counted) instead of crashing a table.
FIELD_TYPES = {
    "case_id": (_text, "text"), "route": (_text, "text"), "status": (_text, "text"),
    "kind": (_maybe(_text), "text or null"), "bucket": (_maybe(_text), "text or null"),
    "op": (_maybe(_text), "text or null"), "first_op": (_maybe(_text), "text or null"),
    "stage": (_maybe(_text), "text or null"), "message": (_maybe(_text), "text or null"),
    "note": (_maybe(_text), "text or null"), "upstream": (_maybe(_text), "text or null"),
    "project": (_maybe(_text), "text or null"),
    "ops": (_texts, "a list of op names"), "layouts": (_texts, "a list of layout classes"),
    "dtypes": (_texts, "a list of dtype names"), "trigger": (_maybe(_texts), "a list of names or null"),
    "case": (_maybe(_case), "a case object or null"), "reduced_case": (_maybe(_case), "a case object or null"),
    "op_errors": (_maybe(lambda v: isinstance(v, dict) and all(_figures(f) for f in v.values())),
                  "an object of per-op figures or null"),
    "second_size": (_maybe(lambda v: isinstance(v, dict)), "an object or null"),
    "dynamic": (_maybe(lambda v: isinstance(v, bool)), "true, false or null"),
    "known": (lambda v: isinstance(v, bool), "true or false"),
    "artifacts": (_maybe(_text), "a folder name or null"),
    "reduced_artifacts": (_maybe(_text), "a folder name or null"),
    **{name: (_maybe(_number), "a number or null") for name in NUMBER_FIELDS},
}


def record_problem(record, required=REQUIRED) -> str | None:
    """Why `record` (parsed JSON) is no record readers can use, or None; the reason names the
    first field of the wrong type, so the skip log counts lines by field."""
    if not isinstance(record, dict) or any(key not in record for key in required):
        return "not a record (JSON without the record fields)"
    for name, (test, what) in FIELD_TYPES.items():
        if name in record and not test(record[name]):
            return f"a record whose {name} is not {what}"
    return None


def read_records(path: str, log: ReadLog | None = None):
    """Records of a results.jsonl; lines that are not records are counted in `log`, by reason.

    The file must be a regular file within files.RESULTS_FILE's cap (else it is skipped whole,
    and counted); a line over files.RESULTS_LINE's cap is skipped, and so is a line whose
    fields have the wrong types (record_problem). Artifact folders come back absolute, resolved
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
                log.refused.setdefault(record.get("bucket"), f"{path}: {exc}")


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
    except RecursionError:
        return None, f"JSON nested deeper than {files.MAX_JSON_DEPTH} levels"
    if files.depth_over(record, files.MAX_JSON_DEPTH):
        return None, f"JSON nested deeper than {files.MAX_JSON_DEPTH} levels"
    why = record_problem(record)
    return (None, why) if why else (record, None)


def read_all(files) -> tuple:
    """(records of every file, ReadLog)."""
    log = ReadLog()
    return [r for f in files for r in read_records(f, log)], log


# -- artifact folders -------------------------------------------------------------------------
# Record fields naming a folder of the route's files, which bundles copy (repro.write_bundle).
ARTIFACT_FIELDS = ("artifacts", "reduced_artifacts")
ARTIFACTS_DIR = "artifacts"        # RUN/artifacts/<route>/<case id>: check.Checker's layout


class UnsafeArtifacts(ValueError):
    """A record whose artifact folder lies outside its run folder: the message says which."""


def stored_record(record: dict, run_dir: str) -> dict:
    """`record` as results.jsonl stores it: artifact folders relative to the run folder (the
    results file's folder), so a run folder can move. A folder outside it (a reduction cached
    by an earlier run) is not this run's to name and is stored as null."""
    changed = {}
    for key in ARTIFACT_FIELDS:
        value = record.get(key)
        if isinstance(value, str) and value:
            relative = os.path.relpath(os.path.abspath(value), run_dir)
            changed[key] = None if _leaves(relative) else relative
    return {**record, **changed} if changed else record


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


def resolved_artifacts(record: dict, run_dir: str) -> dict:
    """`record` with its artifact folders absolute (artifact_folder). A reduction's folder
    outside the run (an older record's reduction cached by an earlier run) is dropped; the
    case's own folder outside it refuses the record: UnsafeArtifacts."""
    if not any(record.get(key) for key in ARTIFACT_FIELDS):
        return record
    resolved = {"artifacts": artifact_folder(record.get("artifacts"), run_dir)}
    try:
        resolved["reduced_artifacts"] = artifact_folder(record.get("reduced_artifacts"), run_dir)
    except UnsafeArtifacts:
        resolved["reduced_artifacts"] = None
    return {**record, **{k: v for k, v in resolved.items() if k in record}}


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
