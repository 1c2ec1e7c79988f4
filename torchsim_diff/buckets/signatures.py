"""Failure signatures and buckets: one bug, one bucket.

A signature is route + kind + the diverging op (value failures) or a normalised message
(errors): numbers, addresses, paths, sizes and generated names are stripped, so the same
bug hit with other shapes lands in the same bucket, and two different messages do not.
Its hash is the bucket. Each bucket raises its own exception type, so Hypothesis keeps
one minimal example per bug.
"""
from __future__ import annotations

import ast
import hashlib
import re

from torchsim_diff.results.kinds import Kind

_PATTERNS = [
    # torch words an out-of-range index differently per op (embedding: "index out of range in
    # self", gather/scatter: "index -5 is out of bounds for dimension 1 with size 9", index_copy_,
    # take_along_dim's "INDICES element is out of DATA bounds"): one symptom.
    (re.compile(r"(?:IndexError|RuntimeError): [^|\n]*?\b(?:index|INDICES)\b[^|\n]*?"
                r"\bout of (?:range|bounds|DATA bounds)\b[^|\n]*"), "index out of bounds"),
    # A run folder named relative to where the run started (reports/run1/artifacts/...): a
    # word path of two or more separators, or one that names a file by its extension.
    (re.compile(r"(?<![\w.\-+@/])[\w.\-+@]+(?:/[\w.\-+@]+){2,}/?"
                r"|(?<![\w.\-+@/])[\w\-+@]+/[\w.\-+@/]*\.(?:py|cpp|json|ll|mlir|s|o|elf|so|txt)\b"),
     "<path>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.\-+@]+)+/?"), "<path>"),
    # Dynamo names each compiled frame __compiled_fn_<counter>_<random uuid>.
    (re.compile(r"__compiled_fn_\w+"), "__compiled_fn_<n>"),
    # Random ids (uuid4 hex, temp-file suffixes): hex runs of 6+ holding a digit and a letter.
    (re.compile(r"(?<![A-Za-z0-9])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}(?:-[0-9a-f]{4,})*(?![A-Za-z0-9])"),
     "<id>"),
    (re.compile(r"\btmp[a-z0-9_]{6,}\b"), "tmp<id>"),
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
    text = " | ".join([unwrap_nested(ln) for ln in lines[:1]] + lines[1:MESSAGE_LINES])
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text.strip()[:300]


_WRAPPED = re.compile(r"(\w+Error)\((.*)\)$", re.S)


def unwrap_nested(line: str) -> str:
    """`X: E(repr(E(repr(error))))` -> `X: E(repr(error))`. Triton's interpreter re-raises an
    error as InterpreterError(repr(error)), once more per level of kernel nesting, and each
    level escapes the text again: one bug, one message."""
    head, sep, expr = line.partition(": ")
    while (wrapped := _WRAPPED.match(expr)):
        try:
            inner = ast.literal_eval(wrapped.group(2))
        except (ValueError, SyntaxError):
            break
        if not (isinstance(inner, str) and inner.startswith(wrapped.group(1) + "(")):
            break
        expr = inner
    return head + sep + expr


def signature(route: str, kind: Kind | str, message: str, op: str | None = None, where=None) -> str:
    """where: the judge's Where (None: not a value failure's)."""
    kind = Kind(kind)
    if kind.value_failure:
        place = "output" if where is not None and where.place == "output" else "input"
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


# -- signatures from the minimal case ------------------------------------------------------
# A value failure's bucket: route + kind + the first divergent op + the trigger, the layout
# or dtype features without which the failure vanishes. The reducer keeps only route, kind
# and place (reduction_key), so one root cause seen through many output ops reduces to one
# minimal case, and the trigger keeps two bugs on one op apart.
# A wrong value and a NaN where the truth is finite are one symptom for the reducer: an op
# such as log or sqrt only turns a wrong input into a NaN, and keeping the kind would keep it
# (Kind.reduces_as).


def reduction_key(verdict) -> str | None:
    """What the reducer keeps while shrinking a failing verdict's case."""
    if not verdict.failed:
        return None
    kind = Kind(verdict.kind)
    if kind.value_failure:
        place = "output" if verdict.where is not None and verdict.where.place == "output" else "input"
        return f"{verdict.route}|{kind.reduces_as.value}|{place}"
    return verdict.signature


# Families whose ops are variants of one kernel (mm/bmm/matmul/addmm; the in-place writes): a
# bug in that kernel shows through whichever variant the minimal case kept, so the family names it.
# An op that is another's computation (OpSpec.kernel: std is var's) is named by that op.
KERNEL_FAMILIES = ("matmul", "inplace")


def op_key(op: str | None) -> str:
    """The first divergent op as the bucket names it (its family for KERNEL_FAMILIES, its
    kernel's name for an op that declares one)."""
    from torchsim_diff.ops import UnknownOp, get_op
    try:
        spec = get_op(op) if op else None
    except UnknownOp:
        spec = None
    if spec is None:
        return op or "?"
    return f"{spec.family}:*" if spec.family in KERNEL_FAMILIES else (spec.kernel or op)


def refined_signature(route: str, kind: Kind | str, first_op: str | None, trigger) -> str:
    """route|kind|first divergent op|trigger features ('any' when no single feature is needed)."""
    return f"{route}|{Kind(kind).value}|{op_key(first_op)}|{'+'.join(sorted(trigger)) or 'any'}"


def rank_buckets(signatures: dict) -> list:
    """Buckets ordered distinct-first: the most frequent, then each time the one farthest
    (Jaccard distance over signature parts) from those already ranked, ties by count.
    `signatures`: bucket -> (signature text, failure count)."""
    parts = {b: set(sig.replace("+", "|").split("|")) for b, (sig, _n) in signatures.items()}
    todo = sorted(signatures, key=lambda b: (-signatures[b][1], b))
    ranked = todo[:1]
    todo = todo[1:]
    while todo:
        best = max(todo, key=lambda b: (min(_jaccard(parts[b], parts[r]) for r in ranked), signatures[b][1]))
        ranked.append(best)
        todo.remove(best)
    return ranked


def record_signature(record) -> str:
    """A results record's (results.record.Record) signature parts for rank_buckets: route, kind,
    first divergent op (else the failing op) and trigger for value failures, the normalised
    message otherwise."""
    if record.kind in Kind.values_where("value_failure"):
        op = op_key(record.first_op or record.op)
        return f"{record.route}|{record.kind}|{op}|{'+'.join(record.trigger or []) or 'any'}"
    return f"{record.route}|{record.kind}|{normalise(record.message or '')}"


def ranked_buckets(records) -> list:
    """The buckets of `records` (failing ones with a bucket) ordered distinct-first."""
    signatures: dict = {}
    for r in records:
        if r.bucket:
            text, count = signatures.get(r.bucket, (record_signature(r), 0))
            signatures[r.bucket] = (text, count + 1)
    return rank_buckets(signatures) if signatures else []


def _jaccard(a: set, b: set) -> float:
    return 1.0 - len(a & b) / max(len(a | b), 1)


# -- cause signatures: what a known bug is matched by ---------------------------------------------
# A reduced failure's signature names its cause: route|kind|what|trigger, where `what` is the
# first divergent op (ANY_OP when a neutral op in its place fails the same way: the trigger is
# the cause, seen through whichever op read it), the normalised message of an error, or the
# ops of a hang's minimal case; and `trigger` the features without which it vanishes (layout,
# dtype, the value classes NaN/Inf/subnormal/negative (values or integer attributes), the
# symptoms of a write), 'any' when none. The
# trigger part is always there, so a raw signature (route|kind|op|place or route|kind|message)
# is never a cause signature: nothing is known before it is reduced.
ANY_OP = "*"
VALUE_CLASSES = ("nan", "inf", "subnormal", "negative")


def with_trigger_or_any(signature_text: str, trigger) -> str:
    """An error's cause signature: its minimal case's signature and its trigger ('any' when none)."""
    return f"{signature_text}|{'+'.join(sorted(trigger)) or 'any'}"


def hang_signature(route: str, case) -> str:
    """route|timeout|the minimal case's ops|the shape and layout features it holds. A hang is
    not ablated (each try costs a timeout), so what its minimal case still holds names it."""
    ops = ",".join(sorted({op_key(n["op"]) for n in case.nodes})) or "no-op"
    return f"{route}|{Kind.TIMEOUT.value}|{ops}|{'+'.join(sorted(hang_features(case))) or 'any'}"


_STRIDED_CLASSES = {"transposed", "sliced", "channels_last"}


def hang_features(case) -> set:
    """The features a hang's minimal case holds, in the ablation's words: 0d (a 0-d input),
    strided, broadcast, offset, inout, and a half-precision dtype."""
    found = set()
    for spec in case.inputs:
        classes = set(spec["layout"].get("classes", []))
        if not spec["shape"]:
            found.add("0d")
        if classes & _STRIDED_CLASSES:
            found.add("strided")
        found.update(classes & {"broadcast", "offset"})
        if spec.get("mutated"):
            found.add("inout")
    if case.dtype in ("float16", "bfloat16"):
        found.add(case.dtype)
    return found


def on_route(signature_text: str, route: str) -> str:
    """The same signature on another route (a planted route compared with a real route's entries)."""
    return f"{route}|{signature_text.split('|', 1)[1]}"
