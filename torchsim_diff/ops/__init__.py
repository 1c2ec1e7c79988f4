"""Op registry: every op the generator can put in a graph, one `OpSpec` each.

An op spec says how to draw a node (operands and attributes, through a `GraphBuilder`
from `torchsim_diff.generate.strategies`) and how to write it as Python; shapes and dtypes of
results are not written by hand but inferred by running the emitted code on meta
tensors. Adding an op is one `register(OpSpec(...))` call in the family module, which
names the judge's rounding rule for it (`rounding`, one of the judge's RULES; no default,
so that a new op cannot silently get no rounding allowance: tests/test_op_entry.py checks
the rule against the torch functions the op calls). Its edges (`edges`: where its semantics
change regime, `torchsim_diff.ops.edges`) are declared in the same module, at its end, through
`declare_edges` (tests/test_op_edges.py checks every op has them or says why it has none).

    >>> from torchsim_diff.ops import get_op
    >>> get_op("add").emit(["x0", "x1"], {})
    'torch.add(x0, x1)'
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from torchsim_diff.ops.rule_names import RULES
from torchsim_diff.ops.edges import check_edges

FAMILIES = ("pointwise", "reduction", "normalization", "matmul", "view", "indexing", "inplace")


class UnknownOp(ValueError):
    """An op name that is not registered."""


class DuplicateOp(ValueError):
    """Two specs registered under one name."""


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One op.

    name: registry name, also recorded in the case JSON.
    family: one of FAMILIES (fuzz suites are split by family).
    emit: (argument expressions, attrs) -> Python expression using `torch`.
    build: (builder) -> (argument refs, attrs): draws operands and attributes.
    rounding: the judge's rule for the op's result, a name in torchsim_diff.ops.rule_names.RULES
        ("exact", "pointwise", "reduction", "decision", ...): how much rounding it may carry.
    dtypes: "float" (float cases only), "any" (also integer cases), "int" (integer cases only).
    mutates: True when the node writes into its first argument (an input or a view of one).
    result_domain: value domain of the result ("real", "positive", ...), so downstream
        domain-restricted ops (log, sqrt) may consume it.
    signature: attribute name -> `attrs.Attr`, the type each attribute may hold; a case
        file's node is checked against it before its program is written.
    kernel: the op whose computation this one is (std: var's, then a sqrt; hardtanh: clamp's;
        mul_mixed_float: torch.mul), None for its own: a bug seen through either op is one bug,
        and buckets name it by the kernel (buckets.signatures.op_key).
    """

    name: str
    family: str
    emit: Callable[[list, dict], str]
    build: Callable
    rounding: str
    dtypes: str = "float"
    mutates: bool = False
    result_domain: str = "real"
    signature: dict = dataclasses.field(default_factory=dict)
    edges: object = None
    kernel: str | None = None

    def supports(self, dtype: str) -> bool:
        is_float = dtype.startswith(("float", "bfloat"))
        return self.dtypes == "any" or (self.dtypes == "float") == is_float


_REGISTRY: dict = {}


def register(spec: OpSpec) -> OpSpec:
    if spec.name in _REGISTRY:
        raise DuplicateOp(f"op {spec.name!r} is registered twice")
    if spec.family not in FAMILIES:
        raise ValueError(f"op {spec.name!r}: family={spec.family!r} is not one of {FAMILIES}")
    if spec.rounding not in RULES:
        raise ValueError(f"op {spec.name!r}: rounding={spec.rounding!r} is not one of the judge's rules "
                         f"{tuple(RULES)}")
    if spec.edges is not None:
        check_edges(spec.name, spec.edges)
    _REGISTRY[spec.name] = spec
    return spec


def declare_edges(edges_by_op: dict) -> None:
    """Give registered ops their edges (op name -> edges, as OpSpec.edges takes them).

    Family modules declare them after all their builds, in one table with a comment naming what
    was read. (The argument schedule names its slots by the function that draws and the line within
    it, so moving the edges into the register calls would no longer change the cases a seed gives.)"""
    for name, edges in edges_by_op.items():
        spec = _REGISTRY.get(name)
        if spec is None:
            raise UnknownOp(f"edges for op {name!r}, which is not registered")
        if spec.edges is not None:
            raise ValueError(f"op {name!r}: its edges are declared twice")
        check_edges(name, edges)
        _REGISTRY[name] = dataclasses.replace(spec, edges=edges)


_LOADED = False


def _load_families() -> None:
    # Registry order is listing order; which op a node gets is the coverage schedule's choice.
    import importlib
    for family in ("pointwise", "bitwise", "conversions", "reductions", "scans", "normalization", "matmul",
                   "convolution", "views", "shapes", "indexing", "scatter", "inplace"):
        importlib.import_module(f"torchsim_diff.ops.{family}")


def all_ops() -> dict:
    """name -> OpSpec for every registered op (every family loaded, even when one family
    module was imported first and its ops alone are registered so far)."""
    global _LOADED
    if not _LOADED:
        _load_families()
        _LOADED = True
    return dict(_REGISTRY)


def get_op(name: str) -> OpSpec:
    ops = all_ops()
    if name not in ops:
        raise UnknownOp(f"unknown op {name!r}; known ops: {', '.join(sorted(ops))}")
    return ops[name]


def ops_in(families=None, names=None, dtype: str = "float32") -> list:
    """Registered ops filtered by family names, op names and dtype support."""
    chosen = []
    for spec in all_ops().values():
        if families and spec.family not in families:
            continue
        if names and spec.name not in names:
            continue
        if spec.supports(dtype):
            chosen.append(spec)
    return chosen


def call(fn: str, args, **kwargs) -> str:
    """Render `fn(arg, ..., key=value)` with Python literals for attributes."""
    parts = list(args) + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{fn}({', '.join(parts)})"
