"""Reading the files a user names: one rule for every reader.

Files are data. Whatever reads one (a case file or corpus entry, a results file, a kernel
capture's launch.json, a bucket history) goes through this module, so every reader gets
the same rule: the path must name a regular file (a FIFO would block the reader forever,
a device such as /dev/zero never ends, a folder is no file) no larger than the cap of its
kind. A file that breaks the rule raises `UnreadableFile`, whose message starts with the
path, says what was wrong and names the cap:

    >>> read_json("/dev/zero", CASE_FILE)
    Traceback (most recent call last):
    UnreadableFile: /dev/zero: cannot read: a character device, not a regular file; pass a case file

The file is opened without blocking (a FIFO is refused at once, not waited on) and checked
on the descriptor it was opened as, so a symlink is judged by what it points at.

What the tool writes whole (a report page, a bundle's files) goes through `replace_text`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
import stat

MiB = 1 << 20
GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Cap:
    """A kind of file and the most bytes one may hold."""

    what: str
    max_bytes: int
    plural: str = ""

    def text(self) -> str:
        return f"the {_size(self.max_bytes)} cap on {self.plural or self.what + 's'}"


# Case files hold a few kB; explicit data of the largest storages the validator admits
# would be larger, but no case the generator or the reducer writes comes near this.
CASE_FILE = Cap("case file", 64 * MiB)
# A long campaign writes a few kB per record; 4 GiB is about a million records.
RESULTS_FILE = Cap("results file", 4 * GiB)
RESULTS_LINE = Cap("results line", 16 * MiB)
LAUNCH_FILE = Cap("launch.json file", 16 * MiB)
KERNEL_SOURCE = Cap("kernel source", 16 * MiB)
CAPTURE_INDEX = Cap("capture index", 16 * MiB)
KERNEL_BUFFER = Cap("captured kernel buffer", 4 * GiB)
BUCKET_HISTORY = Cap("bucket history", 4 * GiB, "bucket histories")
LEGACY_HISTORY = Cap("JSON bucket history", 256 * MiB, "JSON bucket histories")
# Deeper JSON than this is no record the tool wrote (a case is about 5 levels deep); it is
# refused before Python's own recursion limit turns it into a crash somewhere later.
MAX_JSON_DEPTH = 64

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(ValueError):
    """A file that breaks the rule; `reason` is the message without the path."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: cannot read: {reason}")
        self.path, self.reason = path, reason


def _size(n: int) -> str:
    if n >= GiB and n % GiB == 0:
        return f"{n // GiB} GiB"
    if n >= MiB:
        return f"{n / MiB:.0f} MiB" if n % MiB == 0 else f"{n / MiB:.1f} MiB"
    return f"{n} bytes"


def _not_regular(mode: int, cap: Cap) -> str | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return f"{kind}, not a regular file; pass a {cap.what}"


def _breaks(info: os.stat_result, cap: Cap) -> str | None:
    """Why a file of this stat breaks the rule for `cap`, or None."""
    return _not_regular(info.st_mode, cap) or (_over(info.st_size, cap) if info.st_size > cap.max_bytes else None)


def _over(size: int, cap: Cap) -> str:
    return f"{_size(size) if size < cap.max_bytes * 2 else 'more than ' + _size(cap.max_bytes)} " \
           f"is over {cap.text()}"


def open_regular(path: str, cap: Cap):
    """A binary file object for `path`, once it is known to be a regular file within `cap`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableFile(path, _os_reason(exc)) from None
    try:
        why = _breaks(os.fstat(fd), cap)
        if why:
            raise UnreadableFile(path, why)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_regular(path: str, cap: Cap) -> bool:
    """For files opened by others (SQLite): False when absent, True when a regular file
    within `cap`; raises UnreadableFile otherwise."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise UnreadableFile(path, "a symlink to nothing; remove it or pass another path") from None
        return False
    except OSError as exc:
        raise UnreadableFile(path, _os_reason(exc)) from None
    why = _breaks(info, cap)
    if why:
        raise UnreadableFile(path, why)
    return True


def read_bytes(path: str, cap: Cap) -> bytes:
    """The whole file; a file that grows past `cap` while read (or lies about its size, as
    files under /proc do) is refused too."""
    with open_regular(path, cap) as handle:
        try:
            data = handle.read(cap.max_bytes + 1)
        except OSError as exc:
            raise UnreadableFile(path, _os_reason(exc)) from None
    if len(data) > cap.max_bytes:
        raise UnreadableFile(path, _over(len(data), cap))
    return data


def read_text(path: str, cap: Cap) -> str:
    try:
        return read_bytes(path, cap).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"not UTF-8 text (byte {exc.start})") from None


def read_json(path: str, cap: Cap):
    """The JSON value of the file; malformed or too deeply nested JSON is UnreadableFile."""
    return parse_json(read_text(path, cap), path)


def parse_json(text: str, path: str):
    """`text` as JSON, refused (UnreadableFile naming `path`) when malformed or nested deeper
    than MAX_JSON_DEPTH."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreadableFile(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError:      # an integer past Python's 4,300-digit conversion limit
        raise UnreadableFile(path, "not valid JSON (a number too long to read)") from None
    except RecursionError:
        raise UnreadableFile(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if depth_over(value, MAX_JSON_DEPTH):
        raise UnreadableFile(path, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def depth_over(value, limit: int) -> bool:
    """Whether `value` (parsed JSON) nests lists and objects more than `limit` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def replace_text(path: str, text: str) -> None:
    """Write `path` whole through a temporary file beside it and a rename: a reader never sees
    half a file, and a symbolic link at `path` is replaced, never followed (nor one at the
    temporary name: O_NOFOLLOW). Text no encoding can hold (a lone surrogate from a record)
    is written as its escape."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)              # a full disk leaves no half page behind
        raise


def _os_reason(exc: OSError) -> str:
    if exc.errno == errno.ENOENT:
        return "no such file"
    if exc.errno == errno.ELOOP:
        return "a loop of symlinks"
    return exc.strerror or str(exc)
