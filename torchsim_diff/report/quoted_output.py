"""What a run of repro.py printed, as a report quotes it: short, and free of this machine's paths.

A hang can print a million lines (a pass that loops, printing one diagnostic each time), and
the clue is which line repeats: a long output is quoted as its first lines, how many lines
were left out and the line most repeated among them, then its last lines. Paths of the
machine that wrote the bundle (the bundle's folder, the Python environment, the home and
temporary folders) mean nothing to a maintainer, and say where the reporter keeps things:
they are replaced by names in angle brackets.
"""
from __future__ import annotations

import collections
import os
import sys
import sysconfig
import tempfile

HEAD_LINES = 10
TAIL_LINES = 30


def summarised(text: str, head: int = HEAD_LINES, tail: int = TAIL_LINES) -> str:
    """`text` whole when it has at most head + tail lines, else its first `head` lines, a line
    that says how many were left out (and the one most repeated there), and its last `tail`."""
    lines = text.rstrip("\n").splitlines()
    if len(lines) <= head + tail:
        return "\n".join(lines)
    middle = lines[head:len(lines) - tail]
    line, count = collections.Counter(middle).most_common(1)[0]
    repeated = f"; the most repeated ({count} times): {line[:200]}" if count > 1 else ""
    return "\n".join(lines[:head] + [f"[... {len(middle)} lines left out{repeated} ...]"] + lines[-tail:])


def machine_paths(bundle: str | None = None) -> list:
    """(path, what it stands for) pairs, longest path first, for without_machine_paths."""
    pairs = [(sysconfig.get_path("purelib"), "<site-packages>"), (sys.prefix, "<python-env>"),
             (os.path.realpath(sys.prefix), "<python-env>"), (sys.base_prefix, "<python>"),
             (tempfile.gettempdir(), "<tmp>"), (os.path.expanduser("~"), "~"),
             (os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "<torchsim-diff>")]
    if bundle:
        pairs.append((os.path.abspath(bundle), "."))
    pairs = [(path.rstrip(os.sep), name) for path, name in pairs if path and len(path.rstrip(os.sep)) > 1]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def without_machine_paths(text: str, bundle: str | None = None) -> str:
    """`text` with the paths of machine_paths replaced by what they stand for; a file inside
    `bundle` by its name there (the maintainer runs repro.py in the bundle's folder)."""
    for path, name in machine_paths(bundle):
        inside = "" if name == "." else name + os.sep
        text = text.replace(path + os.sep, inside).replace(path, name)
    return text


# stdout lines that end a run with a verdict whose evidence is on stderr (a hang's or a crash's
# last diagnostics); other verdicts are the script's own comparison, and stderr holds warnings.
STDERR_VERDICTS = ("REPRODUCES: no result within", "REPRODUCES: killed by signal")


def quoted(status, out: str, err: str = "", bundle: str | None = None) -> str:
    """A run as a report quotes it: stdout, then stderr where the run ended without a verdict
    of its own or in a hang or crash, each summarised, then the exit status."""
    parts = [summarised(out)] if out.strip() else []
    verdict = any(word in out for word in ("REPRODUCES", "FIXED")) and not any(v in out for v in STDERR_VERDICTS)
    if err.strip() and not verdict:
        parts += ["[stderr]", summarised(err)]
    text = "\n".join(parts + [f"$ echo $?  # {status}"])
    return without_machine_paths(text, bundle)
