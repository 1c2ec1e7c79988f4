"""Option values checked where they are parsed, shared by the CLI (as argparse types) and the
pytest plugin: each takes the option's text and returns its value, or raises `BadOption`
whose message names the value and says what to pass instead.

    >>> positive_int("0")
    Traceback (most recent call last):
    BadOption: '0' is not a positive integer (pass 1 or more)
"""
from __future__ import annotations

import argparse
import math
import os


class BadOption(argparse.ArgumentTypeError):
    """An option value that cannot be used; argparse prints it as `argument --x: <message>`."""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise BadOption(f"{text!r} is not an integer (pass 1 or more)") from None
    if value < 1:
        raise BadOption(f"{text!r} is not a positive integer (pass 1 or more)")
    return value


# Below a second every case would time out on the round trip to its worker alone.
MIN_SECONDS = 1.0
# A case (or a reduction) that runs a day is a hang; longer limits only overflow the clocks
# they are added to (select() takes at most about 8 days, 1e308 seconds from now is inf).
MAX_SECONDS = 86400.0


def positive_seconds(text: str) -> float:
    """A finite number of seconds, at least MIN_SECONDS (0, nan and inf would time out or never),
    at most MAX_SECONDS."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise BadOption(f"{_short(text)} is not a number of seconds (e.g. 120)") from None
    if not math.isfinite(value) or value < MIN_SECONDS:
        raise BadOption(f"{_short(text)} must be a finite number of seconds, at least {MIN_SECONDS:g} (e.g. 120)")
    return _at_most_a_day(text, value)


def _at_most_a_day(text: str, value: float) -> float:
    if value > MAX_SECONDS:
        raise BadOption(f"{_short(text)} is over a day; pass at most {MAX_SECONDS:.0f} seconds")
    return value


def route_list(text: str) -> list:
    """Comma-separated, non-empty, every name a registered route."""
    from torchsim_diff.routes import route_names
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        raise BadOption(f"{text!r} names no route; pass e.g. eager,inductor (see `torchsim-diff routes`)")
    known = route_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BadOption(f"unknown route {unknown[0]!r}; known routes: {', '.join(known)}")
    return list(dict.fromkeys(names))


def fuzz_dtype(text: str) -> str:
    from torchsim_diff.generate.strategies import FLOAT_DTYPES, INT_DTYPES
    if text not in FLOAT_DTYPES + INT_DTYPES:
        raise BadOption(f"dtype={text!r} is not supported; use one of {', '.join(FLOAT_DTYPES + INT_DTYPES)}")
    return text


def name_list(text: str) -> list:
    """Comma-separated names, at least one (an empty list would silently mean 'all')."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        raise BadOption(f"{text!r} names nothing; pass one or more comma-separated names")
    return names


def dtype_list(text: str) -> list:
    """Comma-separated, non-empty, every one a dtype the generator supports."""
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    if not names:
        raise BadOption(f"{text!r} names no dtype; pass e.g. float32,float16")
    return [fuzz_dtype(n) for n in dict.fromkeys(names)]


def out_folder(text: str) -> str:
    """A folder that exists or can be created, and that we may write into."""
    if not text:
        raise BadOption("an empty folder name; pass a path such as reports/run1")
    _check_name_length(text)
    if os.path.exists(text) and not os.path.isdir(text):
        raise BadOption(f"{text!r} is a file, not a folder; pass a folder path")
    parent = os.path.abspath(text)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise BadOption(f"{text!r} cannot be created: {parent!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise BadOption(f"{_short(text)} is not writable (no write permission on {parent!r}); pass another folder")
    return text


# The deepest path a run makes below its folder (artifacts/<route>/<case id>/kernels/<launch>/
# buffers/...) is well under this many bytes; what is left of PATH_MAX must hold the folder.
DEEPEST_INSIDE = 512


def _check_name_length(text: str) -> None:
    """A folder name the file system takes: each name at most NAME_MAX bytes, the whole path,
    with what is written inside, at most PATH_MAX."""
    path = os.path.abspath(text)
    existing = path
    while not os.path.isdir(existing):
        existing = os.path.dirname(existing)
    name_max, path_max = _limit(existing, "PC_NAME_MAX", 255), _limit(existing, "PC_PATH_MAX", 4096)
    longest = max(path.split(os.sep), key=lambda name: len(os.fsencode(name)))
    if len(os.fsencode(longest)) > name_max:
        raise BadOption(f"{_short(text)} holds a name of {len(longest)} characters; the file system takes at most "
                        f"{name_max} bytes per name: pass a shorter path")
    if len(os.fsencode(path)) + DEEPEST_INSIDE > path_max:
        raise BadOption(f"{_short(text)} is a path of {len(path)} characters; with what is written inside it, it "
                        f"would pass the file system's {path_max} bytes per path: pass a shorter path")


def _limit(folder: str, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


def non_negative_seconds(text: str) -> float:
    """A finite number of seconds, 0 or more (nan would never end, inf never stop), at most MAX_SECONDS."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise BadOption(f"{_short(text)} is not a number of seconds (e.g. 60)") from None
    if not math.isfinite(value) or value < 0:
        raise BadOption(f"{_short(text)} must be a finite number of seconds, 0 or more (e.g. 60)")
    return _at_most_a_day(text, value)


def capped_int(cap: int, what: str):
    """positive_int with an upper bound: `what` names the unit in the message."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > cap:
            raise BadOption(f"{_short(text)} is over the cap of {cap} {what}; pass 1 to {cap}")
        return value
    return parse


# Runs of one case: each costs a full route run, and 100 already shows any nondeterminism
# a campaign can afford to look for.
MAX_REPEAT = 100
# Nodes per graph: graphs shrink and read well small; a few hundred nodes take minutes to draw.
MAX_NODES = 100
repeat_count = capped_int(MAX_REPEAT, "runs per case")
node_count = capped_int(MAX_NODES, "nodes per graph")


def job_count(text: str) -> int:
    """Cases checked in parallel, each in its own route worker: at most one per core here
    (more only queue on the cores, each worker with a compiler's memory)."""
    return capped_int(os.cpu_count() or 1, "jobs (one per core here)")(text)


def output_file(text: str) -> str:
    """A file to write: not a folder, in a folder that exists or can be created."""
    if not text:
        raise BadOption("an empty file name; pass a path such as reduced.json")
    if os.path.isdir(text):
        raise BadOption(f"{text!r} is a folder, not a file; pass a file path such as "
                        f"{os.path.join(text, 'reduced.json')!r}")
    if os.path.lexists(text) and not os.path.isfile(text):
        raise BadOption(f"{text!r} is not a regular file; pass a file path")
    out_folder(os.path.dirname(text) or ".")
    return text


def existing_paths(paths, what: str) -> None:
    """Raise BadOption for the first of `paths` that does not exist."""
    for path in paths:
        if not os.path.exists(path):
            raise BadOption(f"{path}: no such {what}")


def _short(text, limit: int = 40) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."
