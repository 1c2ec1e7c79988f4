"""A kernel's TTIR reduced at IR level, with triton-adapter-opt as the oracle.

An adapter bug ships the kernel as it reached the adapter, and a kernel Inductor wrote can be
hundreds of lines for a defect of three. The reducer first drops source locations (`loc(...)`
and the `#loc` table), then delta-debugs the statements of the kernel's body (an op, or an op
with its regions) with delta: a statement goes when the adapter still fails the same
way without it. Removing a producer whose result is still used makes the text invalid, which
is another failure, so the statement stays; passes repeat while one removes something, since
dropping a consumer frees its producers. The same failure is the same first error or
assertion line (names and numbers aside), or the same Triton ops left unconverted.
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile

from torchsim_diff.delta import needed_parts

RUN_TIMEOUT_S = 30
MAX_PASSES = 4


def adapter_failure(ttir: str, tool: str, passes: tuple) -> str | None:
    """How triton-adapter-opt fails on `ttir` (a normalised line), None where it converts it."""
    with tempfile.NamedTemporaryFile("w", suffix=".ttir", delete=False) as handle:
        handle.write(ttir)
    try:
        done = subprocess.run([tool, handle.name, *passes], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "timeout"
    finally:
        os.unlink(handle.name)
    if done.returncode:
        why = [line for line in done.stderr.splitlines() if "error:" in line or "Assertion" in line]
        return _normalised(why[0] if why else f"exit {done.returncode}")
    left = set(re.findall(r'^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?"?(tt\.\w+)', done.stdout, re.M)) - {"tt.reduce.return"}
    return "left unconverted: " + ", ".join(sorted(left)) if left else None


def _normalised(line: str) -> str:
    line = line.split("error:", 1)[1] if "error:" in line else line
    return re.sub(r"\d+", "N", re.sub(r"%[\w#]+", "%", line)).strip()


def reduce_ttir(ttir: str, tool: str, passes: tuple) -> str:
    """The smallest text found that fails as `ttir` does (`ttir` itself when it does not fail)."""
    failure = adapter_failure(ttir, tool, passes)
    if failure is None:
        return ttir
    same = lambda text: adapter_failure(text, tool, passes) == failure   # noqa: E731
    bare = without_locations(ttir)
    text = bare if same(bare) else ttir
    for _ in range(MAX_PASSES):
        head, statements, tail = split_body(text)
        kept = needed_parts(list(range(len(statements))),
                            lambda dropped: same(head + "".join(s for k, s in enumerate(statements)
                                                                if k not in dropped) + tail))
        if len(kept) == len(statements):
            break
        text = head + "".join(statements[k] for k in kept) + tail
    return text


def without_locations(ttir: str) -> str:
    """`ttir` without its `#locN = ...` table and the ` loc(...)` of every op and argument."""
    lines = [line for line in ttir.splitlines(keepends=True) if not line.startswith("#loc")]
    text, out, at = "".join(lines), [], 0
    while True:
        start = text.find(" loc(", at)
        if start < 0:
            return "".join(out) + text[at:]
        out.append(text[at:start])
        depth, end = 0, start + len(" loc")
        while end < len(text):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            end += 1
            if depth == 0:
                break
        at = end


def split_body(ttir: str) -> tuple:
    """(the text up to the kernel's first statement, its statements but the return, the rest).
    A statement is an op line with the lines of any region it opens (braces balanced)."""
    lines = ttir.splitlines(keepends=True)
    start = next((k for k, line in enumerate(lines) if line.lstrip().startswith("tt.func")), None)
    if start is None:
        return ttir, [], ""
    statements, k = [], start + 1
    while k < len(lines) and not lines[k].lstrip().startswith(("tt.return", "}")):
        depth, block = 0, ""
        while k < len(lines):
            block += lines[k]
            depth += _balance(lines[k])
            k += 1
            if depth <= 0:
                break
        statements.append(block)
    return "".join(lines[:start + 1]), statements, "".join(lines[k:])


def _balance(line: str) -> int:
    """Braces opened minus closed on a line, outside quoted text."""
    unquoted = re.sub(r'"[^"]*"', "", line)
    return unquoted.count("{") - unquoted.count("}")
