"""Opening a bucket history's SQLite file: verified before it is trusted.

1. The path is a regular file within its cap (files.check_regular) that starts with SQLite's
   header, or is empty. Anything else (`--buckets` naming a results file, say) is no history
   torchsim-diff made: refused in one line, never renamed.
2. Its write-ahead log holds no frame SQLite would silently drop (buckets.wal_frames); one that
   does is warned of, and the file is copied aside with its log before SQLite reads it.
3. Its tables are those of SCHEMA (or some of them: earlier versions made fewer), with their
   columns; another application's file is refused in one line, never renamed.
4. `PRAGMA quick_check` passes. A damaged file is set aside with a one-line warning: moved
   aside, and a new history started, by a command that writes; copied (beside it, or to the
   temporary folder where its folder is read-only) and read as empty by one that reads.

A writer opens a folder's history alone, a reader beside other readers (flock on the folder):
two campaigns started at once on a new history would otherwise race SQLite's switch to WAL mode.
A file this process already holds a connection to is not opened again by a plain descriptor
(steps 1 and 2 are skipped: it was verified when first opened). Closing such a descriptor
drops every POSIX lock the process holds on the file, SQLite's among them; another process's
last connection then finds itself alone, checkpoints and deletes the log and its index under
this one, and the next campaign reads a malformed file.

A reader opens the file read-only (`mode=ro`): it never switches the journal, adds a table or
writes a byte. In a read-only folder, where SQLite cannot make the index a WAL-mode file
needs beside it, the reader opens a copy.

    >>> db = open_history("reports/buckets.sqlite", read_only=True)
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import weakref
from urllib.parse import quote

from torchsim_diff import files
from torchsim_diff.results.jsonl import StorageError
from torchsim_diff.buckets.wal_frames import dropped_frames

BUSY_TIMEOUT_S = 60.0
SQLITE_HEADER = b"SQLite format 3\x00"
SCHEMA = """
CREATE TABLE IF NOT EXISTS buckets (
    bucket TEXT PRIMARY KEY, route TEXT, kind TEXT, op TEXT, message TEXT, first_seen TEXT,
    count INTEGER NOT NULL, size TEXT NOT NULL, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS imported (path TEXT PRIMARY KEY, at TEXT);
CREATE TABLE IF NOT EXISTS unsettled (bucket TEXT PRIMARY KEY);
"""
COLUMNS = {"buckets": ("bucket", "route", "kind", "op", "message", "first_seen", "count", "size", "record"),
           "imported": ("path", "at"), "unsettled": ("bucket",)}
LOG_SUFFIXES = ("-wal", "-shm")


class Damaged(Exception):
    """The file is SQLite's and of our schema, but SQLite finds it damaged."""


class _Connection(sqlite3.Connection):
    """A connection to a history file, known to _OPEN until it is closed or collected."""
    file_key: tuple = ()

    def close(self) -> None:
        _OPEN.discard(self)
        super().close()


_OPEN: "weakref.WeakSet[_Connection]" = weakref.WeakSet()


def open_history(path: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection to the history at `path`, verified (module docstring); StorageError (one
    line) for a file that is not ours or cannot be opened. A writer's connection has SCHEMA
    and WAL mode; a reader's is empty (in memory) when there is no file or it is damaged."""
    with _opening(path, exclusive=not read_only):
        return _open_verified(path, read_only)


@contextlib.contextmanager
def _opening(path: str, *, exclusive: bool):
    """A writer opens a folder's history alone, a reader beside other readers: two campaigns that
    start at once on a new history otherwise race SQLite's switch to WAL mode ("database is
    locked", about one pair in nine) or check a file the other is still making ("malformed", then
    set aside with its buckets). The lock is flock on the folder: no file is added beside the
    history, and SQLite's own fcntl locks on it are left alone (closing a second descriptor of
    the history in this process would drop them)."""
    folder = os.path.dirname(os.path.abspath(path))
    if exclusive:
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            pass                    # _writable says why in one line
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield                       # no folder (a reader has nothing to open) or not ours to read
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        except OSError:
            pass                    # a file system without flock (some network ones): SQLite's locks alone
        yield
    finally:
        os.close(fd)                # and the lock with it


def _open_verified(path: str, read_only: bool) -> sqlite3.Connection:
    if not _held_here(path):
        if not _check_file(path):
            return scratch() if read_only else _writable(path)
        _check_log(path)
    try:
        db = _connect(path, read_only)
        has_buckets = _verify(db, path)
    except (Damaged, sqlite3.DatabaseError) as exc:
        if isinstance(exc, sqlite3.OperationalError):
            raise StorageError(f"cannot open bucket history {path}: {exc}") from None
        set_aside(path, str(exc), keep=read_only)
        return scratch() if read_only else _writable(path)
    if read_only:
        return db if has_buckets else scratch()
    return _with_schema(db, path)


def check_ours(path: str) -> None:
    """StorageError (one line) when the file at `path` is there and is no history torchsim-diff
    made (steps 1 and 3), so that a command refuses it before any work; damage is left to
    open_history, which sets the file aside."""
    if not _check_file(path):
        return
    try:
        db = _connect(path, read_only=True)
        _verify(db, path, quick=False)
        db.close()
    except (Damaged, sqlite3.DatabaseError):
        pass


def scratch() -> sqlite3.Connection:
    """An empty history in memory (what a reader sees where there is none)."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(SCHEMA)
    return db


def set_aside(path: str, why: str, *, keep: bool) -> str:
    """Warn in one line that `path` could not be read, and put it aside: moved (with its log)
    when `keep` is false, so that a new history starts; copied when true. Returns where."""
    stamp = f"unreadable-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if keep:
        target = _copy_aside(path, stamp)
        _warn(f"bucket history {path} could not be read ({why}); copied to {target}, read as empty "
              f"and left where it is")
        return target
    target = f"{path}.{stamp}"
    try:
        os.replace(path, target)
        for suffix in LOG_SUFFIXES:
            if os.path.exists(path + suffix):
                os.replace(path + suffix, target + suffix)
    except OSError as exc:
        raise StorageError(f"bucket history {path} could not be read ({why}) nor moved aside "
                           f"({exc.strerror or exc}); move it yourself or pass another --buckets path") from None
    _warn(f"bucket history {path} could not be read ({why}); moved aside to {target}, starting a new one")
    return target


def _held_here(path: str) -> bool:
    """Whether this process holds an open connection to the file at `path` (module docstring)."""
    key = _file_key(path)
    return key is not None and any(db.file_key == key for db in list(_OPEN))


def _file_key(path: str) -> tuple | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)


def _check_file(path: str) -> bool:
    """Whether a file is there (False: none); StorageError when it is no SQLite file."""
    try:
        if not files.check_regular(path, files.BUCKET_HISTORY):
            return False
        with files.open_regular(path, files.BUCKET_HISTORY) as handle:
            head = handle.read(len(SQLITE_HEADER))
    except files.UnreadableFile as exc:
        raise StorageError(f"bucket history {exc}") from None
    if head and head != SQLITE_HEADER:
        raise StorageError(f"bucket history {path} is no SQLite file, so no history torchsim-diff made; it is left "
                           f"as it is: pass another --buckets path")
    return True


def _check_log(path: str) -> None:
    """Frames of the write-ahead log SQLite would drop: warned of, the file copied aside with its log."""
    try:
        exists = files.check_regular(path + "-wal", files.BUCKET_HISTORY)
        dropped = dropped_frames(files.read_bytes(path + "-wal", files.BUCKET_HISTORY)) if exists else 0
    except files.UnreadableFile as exc:
        raise StorageError(f"bucket history's log {exc}") from None
    if dropped:
        target = _copy_aside(path, f"damaged-log-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
        _warn(f"bucket history {path}: its write-ahead log holds {dropped} frame(s) past a damaged one, which "
              f"SQLite drops (the buckets recorded last may be missing); copied with its log to {target}")


def _copy_aside(path: str, stamp: str) -> str:
    """Copy `path` and its log beside it, or to the temporary folder when its folder is read-only."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.access(folder, os.W_OK | os.X_OK):
        folder = tempfile.gettempdir()
    target = os.path.join(folder, f"{os.path.basename(path)}.{stamp}")
    try:
        shutil.copyfile(path, target)
        if os.path.exists(path + "-wal"):
            shutil.copyfile(path + "-wal", target + "-wal")
    except OSError as exc:
        raise StorageError(f"bucket history {path} cannot be copied aside: {exc.strerror or exc}") from None
    return target


def _connect(path: str, read_only: bool) -> sqlite3.Connection:
    if not read_only:
        return _held(_text_as_read(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                                   factory=_Connection)), path)
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    try:
        db = _held(_text_as_read(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                                 factory=_Connection)), path)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        if os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
            raise
    return _copy_opened(path)


def _copy_opened(path: str) -> sqlite3.Connection:
    """A connection to a copy of `path` (and its log) in a temporary folder, removed at exit."""
    folder = tempfile.mkdtemp(prefix="torchsim-diff-history-")
    atexit.register(shutil.rmtree, folder, True)
    copy = os.path.join(folder, os.path.basename(path))
    shutil.copyfile(path, copy)
    if os.path.exists(path + "-wal"):
        shutil.copyfile(path + "-wal", copy + "-wal")
    return _text_as_read(sqlite3.connect(copy, timeout=BUSY_TIMEOUT_S, isolation_level=None))


def _held(db: _Connection, path: str) -> _Connection:
    db.file_key = _file_key(path) or ()
    _OPEN.add(db)
    return db


def _text_as_read(db: sqlite3.Connection) -> sqlite3.Connection:
    """Text cells that are not UTF-8 (the file is data: anything may be in it) read with
    replacement characters instead of failing the query."""
    db.text_factory = lambda data: data.decode("utf-8", "replace")
    return db


def _verify(db: sqlite3.Connection, path: str, *, quick: bool = True) -> bool:
    """Our tables with our columns (StorageError otherwise), then quick_check unless not
    `quick` (Damaged); whether the buckets table is there yet."""
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    names = {name for name in names if not str(name).startswith("sqlite_")}
    foreign = sorted(str(name) for name in names if name not in COLUMNS or _columns(db, name) != COLUMNS[name])
    if foreign:
        db.close()
        raise StorageError(f"bucket history {path} is no history torchsim-diff made (its table(s) "
                           f"{', '.join(repr(n[:40]) for n in foreign[:3])} are not ours); it is left as it is: "
                           f"pass another --buckets path")
    check = db.execute("PRAGMA quick_check").fetchall() if quick else [("ok",)]
    if check != [("ok",)]:
        db.close()
        raise Damaged(f"quick_check: {str(check[0][0])[:120] if check else 'no answer'}")
    return "buckets" in names


def _columns(db: sqlite3.Connection, table: str) -> tuple:
    return tuple(row[1] for row in db.execute(f'PRAGMA table_info("{table}")'))    # a name of COLUMNS


def _writable(path: str) -> sqlite3.Connection:
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        db = _connect(path, read_only=False)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open bucket history {path}: {getattr(exc, 'strerror', None) or exc}") from None
    return _with_schema(db, path)


def _with_schema(db: sqlite3.Connection, path: str) -> sqlite3.Connection:
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.executescript(SCHEMA)
    except sqlite3.Error as exc:
        db.close()
        raise StorageError(f"cannot write bucket history {path}: {exc}") from None
    return db


def _warn(line: str) -> None:
    sys.stderr.write(f"torchsim-diff: warning: {line}\n")
