"""Edges of an op's semantics: where its result changes regime, declared in the op's family module
(`OpSpec.edges`, through `declare_edges`), and checked on the op's real operands in eager.

An edge is one of:
- `Value(operand, value)`: an element of the op's operand number `operand` (its position in the
  torch call, a Python number included) is in a value class of VALUE_CLASSES, judged with that
  operand's own dtype (its largest value, its subnormals, the point where exp overflows), or
  equals a number exactly (an op's own constant: hardswish's 3, lerp's 0.5).
- `ArgValue(attr, value)`: an attribute holds a value that takes its own path whatever the shapes
  (scatter_reduce's "prod", baddbmm's beta 0).
- `ArgShape(condition)`: the attributes against the operand shapes meet a named condition of
  ARG_CONDITIONS ("shift >= size" for roll, "correction >= count" for var).
- `Form(operand, form)`: an operand comes in a form of FORMS: a layout only some kernels read
  (stride 0, permuted), a 0-d tensor, a Python number, an integer dtype.

An op with none says why with `NoEdges(reason)`; tests/test_op_edges.py fails for an op that
declares neither.

    >>> met(Value(0, "nan"), [torch.tensor([1.0, float("nan")])], {})
    True
"""
from __future__ import annotations

import dataclasses
import math
from typing import Union

import torch


@dataclasses.dataclass(frozen=True)
class Value:
    """An element of operand `operand` in value class `value` (a VALUE_CLASSES name), or equal to
    the number `value`."""

    operand: int
    value: Union[str, float]

    @property
    def label(self) -> str:
        return f"x{self.operand}={self.value}"


@dataclasses.dataclass(frozen=True)
class ArgValue:
    """Attribute `attr` equal to `value`."""

    attr: str
    value: object

    @property
    def label(self) -> str:
        return f"{self.attr}={self.value!r}"


@dataclasses.dataclass(frozen=True)
class ArgShape:
    """The attributes against the operands' shapes meet ARG_CONDITIONS[condition]."""

    condition: str

    @property
    def label(self) -> str:
        return self.condition


@dataclasses.dataclass(frozen=True)
class Form:
    """Operand `operand` in form `form` (a FORMS name)."""

    operand: int
    form: str

    @property
    def label(self) -> str:
        return f"x{self.operand} {self.form}"


@dataclasses.dataclass(frozen=True)
class NoEdges:
    """An op whose semantics have no regime to change, and why."""

    reason: str


EDGE_TYPES = (Value, ArgValue, ArgShape, Form)


def values_of(operand: int, *classes) -> tuple:
    """One `Value` edge per value class (or exact number) of operand `operand`."""
    return tuple(Value(operand, c) for c in classes)


# -- value classes: element predicates, thresholds from the operand's own dtype ---------------
def _float_only(test):
    def check(t):
        return t.dtype.is_floating_point and bool(test(t, torch.finfo(t.dtype)).any())
    return check


def _int_extreme(t, which: str) -> bool:
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        return False
    return bool((t == getattr(torch.iinfo(t.dtype), which)).any())


def _all(t, wanted: bool) -> bool:
    return t.numel() > 0 and bool((t.bool() == wanted).all())


VALUE_CLASSES: dict = {
    "nan": _float_only(lambda t, f: t.isnan()),
    "inf": _float_only(lambda t, f: t == math.inf),
    "-inf": _float_only(lambda t, f: t == -math.inf),
    "+0": lambda t: bool(((t == 0) & ~t.signbit()).any()) if t.dtype.is_floating_point else bool((t == 0).any()),
    "-0": _float_only(lambda t, f: (t == 0) & t.signbit()),
    "subnormal": _float_only(lambda t, f: (t != 0) & (t.abs() < f.tiny)),
    "negative": lambda t: t.dtype != torch.bool and bool((t < 0).any()),
    # The dtype's largest finite magnitude, or an integer dtype's largest value.
    "max": lambda t: _int_extreme(t, "max") or _float_only(lambda t, f: t.abs() == f.max)(t),
    # An integer dtype's smallest value: its negation and absolute value wrap.
    "int min": lambda t: _int_extreme(t, "min"),
    # Where exp (and everything built on it) overflows or flushes in this dtype.
    "exp overflow": _float_only(lambda t, f: t > math.log(f.max)),
    "exp underflow": _float_only(lambda t, f: t < math.log(f.tiny)),
    "-exp overflow": _float_only(lambda t, f: t < -math.log(f.max)),        # exp(-x) overflows
    # Magnitudes where the dtype holds no fraction (floor, round, fmod are exact or saturate).
    "no fraction": _float_only(lambda t, f: t.isfinite() & (t.abs() >= 2.0 ** (-math.log2(f.eps)))),
    # Halfway between two integers: round's ties to even.
    "tie": _float_only(lambda t, f: t.isfinite() & ((t - t.floor()) == 0.5)),
    "all true": lambda t: _all(t, True),
    "all false": lambda t: _all(t, False),
    "duplicate": lambda t: t.numel() > t.unique().numel(),
}


# Classes no integer or boolean operand can hold: an integer case meets them only through an
# operand of another dtype.
FLOAT_ONLY_CLASSES = frozenset({"nan", "inf", "-inf", "-0", "subnormal", "exp overflow", "exp underflow",
                                "-exp overflow", "no fraction", "tie"})
# Classes no float operand can hold: a float case meets them only through an integer operand.
INT_ONLY_CLASSES = frozenset({"int min"})


def is_cell(edge, dtype: str) -> bool:
    """Whether `edge` is a cell of a case of `dtype` (a dtype name): an integer case holds none of
    the float-only value classes, and a float case none of the integer-only ones."""
    if not isinstance(edge, Value):
        return True
    return edge.value not in (FLOAT_ONLY_CLASSES if dtype.startswith("int") else INT_ONLY_CLASSES)


def _value_met(value, operand) -> bool:
    t = torch.as_tensor(operand)
    if isinstance(value, str):
        return VALUE_CLASSES[value](t)
    return t.dtype != torch.bool and bool((t == value).any())


# -- operand forms -------------------------------------------------------------------------
def _tensor(test):
    return lambda x: isinstance(x, torch.Tensor) and bool(test(x))


def _permuted(t) -> bool:
    strides = [s for s, n in zip(t.stride(), t.shape) if n > 1]
    return any(a < b for a, b in zip(strides, strides[1:]))


FORMS: dict = {
    "stride 0": _tensor(lambda t: any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))),
    "permuted": _tensor(_permuted),
    "non-contiguous": _tensor(lambda t: not t.is_contiguous()),
    "offset": _tensor(lambda t: t.storage_offset() > 0),
    "0-d": _tensor(lambda t: t.dim() == 0),
    "one element": _tensor(lambda t: t.numel() == 1),
    "size-1 dim": _tensor(lambda t: 1 in t.shape),
    "scalar": lambda x: isinstance(x, (int, float)),
    "int64": _tensor(lambda t: t.dtype == torch.int64),
    "int32": _tensor(lambda t: t.dtype == torch.int32),
    "float16": _tensor(lambda t: t.dtype == torch.float16),
    "float32": _tensor(lambda t: t.dtype == torch.float32),
}


# -- argument conditions: attributes against operand shapes -----------------------------------
def _dims(attrs: dict, x) -> list:
    """The dims an attribute names, normalized; all of them when it is left out."""
    rank = max(x.dim(), 1)
    dims = attrs.get("dim")
    if dims is None:
        return list(range(x.dim()))
    return [d % rank for d in (dims if isinstance(dims, list) else [dims])]


def _reduced(attrs: dict, x) -> int:
    return math.prod(x.shape[d] for d in _dims(attrs, x)) if x.dim() else 1


def _shape(x) -> list:
    return list(x.shape) if isinstance(x, torch.Tensor) else []


def _kernel(attrs: dict, ops) -> list:
    """A pooling window's kernel, or a convolution's from its weight."""
    return list(attrs["kernel"]) if "kernel" in attrs else list(ops[1].shape[2:])


def _index_at_end(index, size: int) -> bool:
    return bool((torch.as_tensor(index) == size - 1).any())


def _ceil_adds_window(attrs: dict, x) -> bool:
    sizes = x.shape[-len(attrs["kernel"]):]
    dilation = attrs.get("dilation", [1] * len(sizes))
    for n, k, s, p, d in zip(sizes, attrs["kernel"], attrs["stride"], attrs["padding"], dilation):
        span = n + 2 * p - d * (k - 1) - 1
        if attrs["ceil_mode"] and span % s:
            return True
    return False


def _interpolation(attrs: dict, x, test) -> bool:
    return any(test(out, n) for out, n in zip(attrs["size"], x.shape[2:]))


def _matmul_dims(ops) -> tuple:
    """(M, K, N) of a 2-d product; 1-d operands count as 1."""
    a, b = _shape(ops[-2]), _shape(ops[-1])
    m = a[-2] if len(a) >= 2 else 1
    n = b[-1] if len(b) >= 2 else 1
    return m, (a[-1] if a else 1), n


ARG_CONDITIONS: dict = {
    # reductions, scans, normalizations: the reduced extent
    "no dim": lambda a, ops: "dim" not in a,
    "dim of size 1": lambda a, ops: ops[0].dim() > 0 and any(ops[0].shape[d] == 1 for d in _dims(a, ops[0])),
    "negative dim": lambda a, ops: any(d < 0 for d in (a["dim"] if isinstance(a.get("dim"), list) else [a.get("dim", 0)])),
    "one element reduced": lambda a, ops: _reduced(a, ops[0]) == 1,
    "correction >= count": lambda a, ops: a["correction"] >= _reduced(a, ops[0]),
    "keepdim": lambda a, ops: bool(a.get("keepdim")),
    "k == size": lambda a, ops: a["k"] == ops[0].shape[a["dim"] % ops[0].dim()],
    "normalized over one element": lambda a, ops: math.prod(a["normalized_shape"]) == 1,
    "weight given": lambda a, ops: len(ops) > 1,
    "one group": lambda a, ops: a["num_groups"] == 1,
    "group per channel": lambda a, ops: a["num_groups"] == ops[0].shape[1],
    # clamps
    "min >= max": lambda a, ops: (a.get("min") is not None and a.get("max") is not None and a["min"] >= a["max"])
    or ("min_val" in a and a["min_val"] >= a["max_val"]),
    "min only": lambda a, ops: a.get("min") is not None and a.get("max") is None,
    "min > max elementwise": lambda a, ops: bool((torch.as_tensor(ops[1]) > torch.as_tensor(ops[2])).any()),
    "x at a bound": lambda a, ops: bool(((ops[0] == a["min_val"]) | (ops[0] == a["max_val"])).any()),
    "slope outside [0, 1]": lambda a, ops: not 0 <= a["negative_slope"] <= 1,
    "max only": lambda a, ops: a.get("min") is None and a.get("max") is not None,
    # moves
    "shift >= size": lambda a, ops: any(abs(s) >= ops[0].shape[d] for s, d in zip(a["shifts"], a["dims"])),
    "negative shift": lambda a, ops: any(s < 0 for s in a["shifts"]),
    "shift of whole turns": lambda a, ops: any(s and s % ops[0].shape[d] == 0 for s, d in zip(a["shifts"], a["dims"])),
    "diagonal past the size": lambda a, ops: a["diagonal"] >= ops[0].shape[-1] or -a["diagonal"] >= ops[0].shape[-2],
    "negative diagonal": lambda a, ops: a["diagonal"] < 0,
    "step past the end": lambda a, ops: a["step"] >= ops[0].shape[a["dim"]],
    "chunks > size": lambda a, ops: a["chunks"] > ops[0].shape[a["dim"]],
    "uneven chunks": lambda a, ops: ops[0].shape[a["dim"]] % a["chunks"] != 0,
    "one piece": lambda a, ops: len(a["sizes"]) == 1,
    "negative index": lambda a, ops: a["index"] < 0,
    "squeeze of a dim not 1": lambda a, ops: ops[0].shape[a["dim"]] != 1,
    "whole length": lambda a, ops: a["length"] == ops[0].shape[a["dim"]],
    "new leading dim": lambda a, ops: len(a["size"]) > ops[0].dim(),
    "more repeats than dims": lambda a, ops: len(a["repeats"]) > ops[0].dim(),
    "new last dim": lambda a, ops: a["dim"] in (-1, ops[0].dim()),
    "cat along the last dim": lambda a, ops: a["dim"] % ops[0].dim() == ops[0].dim() - 1,
    "zero pad": lambda a, ops: not any(a["pad"]),
    "negative pad": lambda a, ops: any(p < 0 for p in a["pad"]),
    "write through a view": lambda a, ops: bool(a.get("view")),
    # indexing: the last valid position is read or written
    "index at the end": lambda a, ops: _index_at_end(ops[1], ops[0].shape[a.get("dim", 0)] if ops[0].dim() else 1),
    "row at the end": lambda a, ops: _index_at_end(ops[0], ops[1].shape[0]),
    # windows: convolution and pooling
    "kernel 1": lambda a, ops: 1 in _kernel(a, ops),
    "stride > kernel": lambda a, ops: any(s > k for s, k in zip(a["stride"], _kernel(a, ops))),
    "grouped": lambda a, ops: a["groups"] > 1,
    "with bias": lambda a, ops: len(ops) == 3,
    "padding": lambda a, ops: any(a.get("padding", [])),
    "dilation": lambda a, ops: any(d > 1 for d in a.get("dilation", [])),
    "depthwise": lambda a, ops: a["groups"] > 1 and a["groups"] == ops[0].shape[1],
    "ceil adds a window": lambda a, ops: _ceil_adds_window(a, ops[0]),
    "output == input": lambda a, ops: list(a["output_size"]) == list(ops[0].shape[-2:]),
    "output divides input": lambda a, ops: all(n % o == 0 for o, n in zip(a["output_size"], ops[0].shape[-2:])),
    "window > 25 (fallback)": lambda a, ops: math.prod(-(-(n + o - 1) // o) for o, n in zip(a["output_size"],
                                                                                            ops[0].shape[-2:])) > 25,
    "downsampling": lambda a, ops: _interpolation(a, ops[0], lambda out, n: out < n),
    "integer upscale": lambda a, ops: _interpolation(a, ops[0], lambda out, n: out > n and out % n == 0),
    "same size": lambda a, ops: _interpolation(a, ops[0], lambda out, n: out == n),
    # products
    "K == 1": lambda a, ops: _matmul_dims(ops)[1] == 1,
    "M or N == 1": lambda a, ops: 1 in (_matmul_dims(ops)[0], _matmul_dims(ops)[2]),
    "1-d operand": lambda a, ops: any(isinstance(o, torch.Tensor) and o.dim() == 1 for o in ops),
    "batch broadcast": lambda a, ops: len({o.dim() for o in ops if isinstance(o, torch.Tensor)}) > 1,
}


_MISSING = object()


def met(edge, operands: list, attrs: dict) -> bool:
    """Whether `edge` holds for an op called with `operands` (tensors and Python numbers, in the
    torch call's order) and `attrs`."""
    if isinstance(edge, Value):
        return edge.operand < len(operands) and _value_met(edge.value, operands[edge.operand])
    if isinstance(edge, Form):
        return edge.operand < len(operands) and FORMS[edge.form](operands[edge.operand])
    if isinstance(edge, ArgValue):
        held = attrs.get(edge.attr, _MISSING)
        return held == edge.value and isinstance(held, bool) == isinstance(edge.value, bool)
    return ARG_CONDITIONS[edge.condition](attrs, operands)


def check_edges(name: str, edges) -> None:
    """Raise ValueError unless `edges` is NoEdges with a reason, or a non-empty tuple of edges
    naming known value classes, forms and conditions."""
    if isinstance(edges, NoEdges):
        if not edges.reason.strip():
            raise ValueError(f"op {name!r}: NoEdges needs a reason, e.g. NoEdges('a pure view computes no value')")
        return
    if not isinstance(edges, tuple) or not edges:
        raise ValueError(f"op {name!r}: edges={edges!r} must be a non-empty tuple of {[t.__name__ for t in EDGE_TYPES]}"
                         f" or NoEdges(reason)")
    for edge in edges:
        _check_edge(name, edge)
    labels = [edge.label for edge in edges]
    if len(set(labels)) != len(labels):
        raise ValueError(f"op {name!r}: an edge is declared twice: {sorted(labels)}")


def _check_edge(name: str, edge) -> None:
    if not isinstance(edge, EDGE_TYPES):
        raise ValueError(f"op {name!r}: edge {edge!r} is not one of {[t.__name__ for t in EDGE_TYPES]}")
    field, vocabulary = _VOCABULARIES.get(type(edge), (None, None))
    word = getattr(edge, field) if field else None
    if vocabulary is None or (isinstance(edge, Value) and isinstance(word, (int, float))):
        return
    if word not in vocabulary:
        raise ValueError(f"op {name!r}: {type(edge).__name__} {field}={word!r} is not one of {sorted(vocabulary)}")


# edge type -> (the field that names a word, the words it may name)
_VOCABULARIES = {Value: ("value", VALUE_CLASSES), Form: ("form", FORMS), ArgShape: ("condition", ARG_CONDITIONS)}
