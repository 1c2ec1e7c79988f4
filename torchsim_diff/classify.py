"""Failure signatures and buckets: one bug, one bucket.

A signature is route + kind + the diverging op (value failures) or a normalised message
(errors): numbers, addresses, paths, sizes and generated names are stripped, so the same
bug hit with other shapes lands in the same bucket, and two different messages do not.
Its hash is the bucket. Each bucket raises its own exception type, so Hypothesis keeps
one minimal example per bug.
"""
from __future__ import annotations

import hashlib
import re

from torchsim_diff.kinds import Kind

VALUE_KINDS = {Kind.WRONG_VALUES, Kind.NONFINITE_MISMATCH, Kind.GUARD_VIOLATION,
               Kind.SHAPE_MISMATCH, Kind.DTYPE_MISMATCH, Kind.NONDETERMINISTIC}
_PATTERNS = [
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.\-+@]+)+/?"), "<path>"),
    # Inductor's generated kernel names spell out the fused ops: one bug, many names.
    (re.compile(r"\b(?:triton|cpp|pytorchsim_triton_compiler|triton_npu)_(?:poi|per|red|tem|for|fused)\w*"), "<kernel>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<addr>"),
    # MLIR attribute dictionaries carry the op's operand values (keepdim = true/false, ...).
    (re.compile(r"<\{[^{}]*\}>"), "<attrs>"),
    (re.compile(r"\b[A-Za-z_][A-Za-z_]*?_?\d+[A-Za-z_\d]*\b"), lambda m: re.sub(r"\d+", "#", m.group(0))),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"), "#"),
    (re.compile(r"\[[#, ]*\]|\([#, ]*\)"), "<dims>"),
    (re.compile(r"'[^']{40,}'"), "'<text>'"),
    (re.compile(r"\s+"), " "),
]
MESSAGE_LINES = 2


class Finding(AssertionError):
    """Base of the per-bucket exception types a fuzz test raises for a failing case."""


_FINDING_TYPES: dict = {}


def normalise(message: str) -> str:
    """The stable part of a failure message (see module docstring)."""
    lines = [ln.strip() for ln in message.split("--- traceback tail ---")[0].splitlines() if ln.strip()]
    text = " | ".join(lines[:MESSAGE_LINES])
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text.strip()[:300]


def signature(route: str, kind: Kind | str, message: str, op: str | None = None, where: str | None = None) -> str:
    kind = Kind(kind)
    if kind in VALUE_KINDS:
        place = "output" if where and where.startswith("output") else "input"
        return f"{route}|{kind.value}|{op or '?'}|{place}"
    return f"{route}|{kind.value}|{normalise(message)}"


def bucket_of(signature_text: str) -> str:
    return hashlib.sha1(signature_text.encode()).hexdigest()[:10]


def finding_type(kind: Kind | str, bucket: str) -> type:
    """The exception type for one bucket (created once, then reused)."""
    name = f"{Kind(kind).value.title().replace('_', '')}_{bucket}"
    if name not in _FINDING_TYPES:
        _FINDING_TYPES[name] = type(name, (Finding,), {"__module__": __name__})
    return _FINDING_TYPES[name]
