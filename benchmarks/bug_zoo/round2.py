"""Bug zoo, round 2: planted bugs of classes the first zoo lacks, each needing its own trigger.

argument-dependent: an attribute value changes what one op computes (correction, shifts,
    include_self, clamp bounds);
value-dependent: only some input values go wrong (negatives, exact negative integers, NaN,
    subnormals);
operand-form-dependent: only how the operands come (a 0-d divisor, a broadcasting left
    operand, mixed dtypes);
view-dependent: only how a view is taken or written (a step slice, a slice of a strided
    tensor, an in-place write through a strided view).

Each route runs the case's program eagerly with one fault, like benchmarks/bug_zoo/planted.py;
`trigger_cases()` gives each a small case that fails there and passes on eager,
`near_miss_cases()` one that has the bug's op but not its trigger.
"""
from __future__ import annotations

import torch

from benchmarks.bug_zoo.planted import _as_contiguous_read, _OpFault, _Planted, _strided
from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case

GETITEM = torch.Tensor.__getitem__


def _mode(name: str, faults: dict) -> type:
    return type(name, (_OpFault,), {"faults": faults})


# -- argument-dependent ----------------------------------------------------------------------
def _var_correction_ignored(func, x, *args, correction=None, **kw):
    return func(x, *args, correction=1 if correction == 0 else correction, **kw)


class VarCorrectionIgnored(_Planted):
    """correction=0 is computed as correction=1 (the unbiased estimate is always taken)."""

    bug_class = "argument"
    name = "zoo-var-correction-ignored"
    mode = _mode("VarCorrection", {torch.var: _var_correction_ignored, torch.std: _var_correction_ignored})


def _roll_shift_saturated(func, x, shifts, dims=None, **kw):
    shifts = list(shifts) if isinstance(shifts, (list, tuple)) else [shifts]
    dims = list(dims) if isinstance(dims, (list, tuple)) else [dims]
    if dims == [None]:
        return func(x, shifts=shifts, dims=None, **kw)
    sizes = [x.shape[d] for d in dims]
    clamped = [max(-(n - 1), min(n - 1, s)) if n > 1 else s for s, n in zip(shifts, sizes)]
    return func(x, shifts=tuple(clamped), dims=tuple(dims), **kw)


class RollShiftSaturated(_Planted):
    """A shift of at least the dimension's size is clamped to size - 1, not taken modulo."""

    bug_class = "argument"
    name = "zoo-roll-shift-saturated"
    mode = _mode("RollSaturated", {torch.roll: _roll_shift_saturated})


def _scatter_reduce_self_included(func, *args, **kw):
    return func(*args, **{**kw, "include_self": True})


class ScatterIncludeSelfIgnored(_Planted):
    """include_self=False is ignored: the destination's own values join every reduction."""

    bug_class = "argument"
    name = "zoo-scatter-include-self-ignored"
    mode = _mode("ScatterSelf", {torch.scatter_reduce: _scatter_reduce_self_included})


def _clamp_bounds_swapped_order(func, x, *args, min=None, max=None, **kw):
    if args or min is None or max is None or isinstance(min, torch.Tensor) or min <= max:
        return func(x, *args, min=min, max=max, **kw)
    return func(func(x, max=max), min=min)


class ClampCrossedBounds(_Planted):
    """Bounds are applied max first, then min: with min > max the result is min, not max."""

    bug_class = "argument"
    name = "zoo-clamp-crossed-bounds"
    mode = _mode("ClampCrossed", {torch.clamp: _clamp_bounds_swapped_order})


# -- value-dependent ---------------------------------------------------------------------------
def _atan2_without_quadrant(func, y, x, **kw):
    return torch.atan(torch.div(y, x))


class Atan2NegativeX(_Planted):
    """atan2 is computed as atan(y / x): off by pi wherever x is negative."""

    bug_class = "value"
    name = "zoo-atan2-negative-x"
    mode = _mode("Atan2Quadrant", {torch.atan2: _atan2_without_quadrant})


def _erf_of_magnitude(func, x, **kw):
    return func(x.abs(), **kw)


class ErfSignLost(_Planted):
    """erf's sign is not restored after its approximation of |x|: negative inputs give erf(|x|)."""

    bug_class = "value"
    name = "zoo-erf-sign-lost"
    mode = _mode("ErfAbs", {torch.erf: _erf_of_magnitude})


def _pow_integer_path_unsigned(func, x, y, **kw):
    if isinstance(y, torch.Tensor) and y.is_floating_point():
        integral = (y == torch.round(y)) & (y < 0) & torch.isfinite(y)
        y = torch.where(integral, -y, y)
    return func(x, y, **kw)


class PowNegativeIntegerExponent(_Planted):
    """An exponent that is an exact negative integer takes the repeated-multiply path, which drops its sign."""

    bug_class = "value"
    name = "zoo-pow-negative-integer-exponent"
    mode = _mode("PowIntPath", {torch.pow: _pow_integer_path_unsigned})


def _relu_nan_to_zero(func, x, **kw):
    if not x.is_floating_point():
        return func(x, **kw)
    return torch.where(torch.isnan(x), torch.zeros_like(x), func(x, **kw))


class ReluNanToZero(_Planted):
    """relu is lowered to fmax(x, 0), which returns 0 for NaN (eager keeps the NaN)."""

    bug_class = "value"
    name = "zoo-relu-nan-to-zero"
    mode = _mode("ReluFmax", {torch.relu: _relu_nan_to_zero})


def _log_flushing_subnormals(func, x, **kw):
    if not x.is_floating_point():
        return func(x, **kw)
    return func(torch.where(x.abs() < torch.finfo(x.dtype).tiny, torch.zeros_like(x), x), **kw)


class LogSubnormalFlushed(_Planted):
    """Subnormal inputs are flushed to zero first (DAZ): -inf instead of a finite log."""

    bug_class = "value"
    name = "zoo-log-subnormal-flushed"
    mode = _mode("LogDaz", {torch.log: _log_flushing_subnormals})


# -- operand-form-dependent ------------------------------------------------------------------
def _div_scalar_path_swapped(func, a, b, **kw):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and b.dim() == 0 and a.dim() > 0:
        return func(b, a, **kw)
    return func(a, b, **kw)


class Div0dDivisorSwapped(_Planted):
    """A 0-d divisor of a tensor takes the scalar path, which divides the scalar by the tensor."""

    bug_class = "operand-form"
    name = "zoo-div-0d-divisor-swapped"
    mode = _mode("DivScalar", {torch.div: _div_scalar_path_swapped})


def _sub_broadcast_moved_right(func, a, b, **kw):
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return func(a, b, **kw)
    out = torch.broadcast_shapes(a.shape, b.shape)
    if a.shape != out and b.shape == out:
        return func(b, a, **kw)
    return func(a, b, **kw)


class SubLeftBroadcastSwapped(_Planted):
    """A left operand that broadcasts against the right is moved to the right, as if sub commuted."""

    bug_class = "operand-form"
    name = "zoo-sub-left-broadcast-swapped"
    mode = _mode("SubBroadcast", {torch.sub: _sub_broadcast_moved_right})


def _add_promoted_to_int(func, a, b, **kw):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_floating_point() \
            and not b.is_floating_point() and b.dtype != torch.bool:
        return func(a.to(b.dtype), b, **kw).to(a.dtype)
    return func(a, b, **kw)


class AddPromotedToInt(_Planted):
    """float + int is computed in the integer operand's dtype (the float is truncated)."""

    bug_class = "operand-form"
    name = "zoo-add-promoted-to-int"
    mode = _mode("AddInt", {torch.add: _add_promoted_to_int})


def _mul_in_narrower_float(func, a, b, **kw):
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.is_floating_point() \
            and b.is_floating_point() and a.dtype != b.dtype:
        narrow = min((a.dtype, b.dtype), key=lambda d: torch.finfo(d).bits)
        wide = torch.promote_types(a.dtype, b.dtype)
        return func(a.to(narrow), b.to(narrow), **kw).to(wide)
    return func(a, b, **kw)


class MulMixedNarrowed(_Planted):
    """Mixed float operands are multiplied in the narrower dtype, then widened."""

    bug_class = "operand-form"
    name = "zoo-mul-mixed-narrowed"
    mode = _mode("MulNarrow", {torch.mul: _mul_in_narrower_float})


# -- view-dependent ----------------------------------------------------------------------------
def _steps(index) -> list:
    parts = index if isinstance(index, tuple) else (index,)
    return [p.step if isinstance(p, slice) and p.step and p.step > 1 else 1 for p in parts]


def _step_slice_unit_stride(func, x, index):
    out = func(x, index)
    steps = _steps(index)
    if all(s == 1 for s in steps) or len(steps) > out.dim():
        return out
    strides = [st // s if s > 1 else st for st, s in zip(out.stride(), steps + [1] * (out.dim() - len(steps)))]
    return out.as_strided(out.shape, strides, out.storage_offset())


class StepSliceUnitStride(_Planted):
    """A step slice keeps its base's stride: it reads `length` neighbours, not every step-th."""

    bug_class = "view"
    name = "zoo-step-slice-unit-stride"
    mode = _mode("StepSlice", {GETITEM: _step_slice_unit_stride})


def _slice_of_strided_as_contiguous(func, x, index):
    return func(_as_contiguous_read(x) if _strided(x) else x, index)


class SliceOfStridedView(_Planted):
    """A slice of a strided tensor is taken with strides from its shape, as if it were contiguous."""

    bug_class = "view"
    name = "zoo-slice-of-strided-view"
    mode = _mode("SliceStrided", {GETITEM: _slice_of_strided_as_contiguous})


def _write_to_temporary(func, x, *args, **kw):
    if _strided(x):
        return func(x.clone(), *args, **kw)
    return func(x, *args, **kw)


INPLACE = (torch.Tensor.add_, torch.Tensor.mul_, torch.Tensor.copy_, torch.Tensor.masked_fill_)


class InplaceStridedViewLost(_Planted):
    """An in-place write into a non-contiguous view goes to a temporary never copied back."""

    bug_class = "view"
    name = "zoo-inplace-strided-view-lost"
    mode = _mode("InplaceLost", {op: _write_to_temporary for op in INPLACE})


ROUND2 = (VarCorrectionIgnored, RollShiftSaturated, ScatterIncludeSelfIgnored, ClampCrossedBounds,
          Atan2NegativeX, ErfSignLost, PowNegativeIntegerExponent, ReluNanToZero, LogSubnormalFlushed,
          Div0dDivisorSwapped, SubLeftBroadcastSwapped, AddPromotedToInt, MulMixedNarrowed,
          StepSliceUnitStride, SliceOfStridedView, InplaceStridedViewLost)


# -- trigger cases -----------------------------------------------------------------------------
def _input(name: str, data: list, shape=None, strides=None, offset: int = 0, dtype: str = "float32",
           domain: str = "real", mutated: bool = False) -> dict:
    """An input holding `data` as its whole storage, viewed with `shape`, `strides`, `offset`."""
    shape = [len(data)] if shape is None else list(shape)
    strides = layout.contiguous_strides(shape) if strides is None else list(strides)
    storage = torch.tensor(data, dtype=layout.dtype_of(dtype))
    classes = layout.layout_classes(shape, strides, offset, len(data), mutated)
    return {"name": name, "shape": shape, "dtype": dtype, "domain": {"kind": domain},
            "layout": {"classes": classes, "strides": strides, "offset": offset, "storage_size": len(data)},
            "mutated": mutated, "data": values.encode(storage)}


def _case(nodes: list, inputs: list, outputs: list) -> Case:
    return Case.from_dict({"schema": 1, "dtype": "float32", "inputs": inputs, "nodes": nodes,
                           "outputs": outputs, "values": {"seed": 0}})


def _one_node(op: str, inputs: list, attrs: dict) -> Case:
    return _case([{"id": "v0", "op": op, "args": [i["name"] for i in inputs], "attrs": attrs}], inputs, ["v0"])


def _grid(rows: int, cols: int, start: float = 1.0) -> list:
    return [start + 0.25 * k for k in range(rows * cols)]


def _slice(step: int) -> dict:
    return {"dim": 1, "start": 0, "stop": None, "step": step}


def _triggers() -> dict:
    matrix = _input("x0", _grid(3, 4), [3, 4])
    transposed = _input("x0", _grid(4, 3), [3, 4], [1, 3])
    index = _input("x1", [0, 0, 1, 1], [1, 4], dtype="int64", domain="index")
    return {
        VarCorrectionIgnored: _one_node("var", [_input("x0", [1.0, 2.0, 4.0, 7.0])],
                                        {"correction": 0, "keepdim": False}),
        RollShiftSaturated: _one_node("roll", [_input("x0", [1.0, 2.0, 3.0, 4.0])], {"shifts": [4], "dims": [0]}),
        ScatterIncludeSelfIgnored: _one_node("scatter_reduce", [matrix, index, _input("x2", [0.5] * 4, [1, 4])],
                                             {"dim": 0, "reduce": "sum", "include_self": False}),
        ClampCrossedBounds: _one_node("clamp", [_input("x0", [-1.0, 0.5, 1.5, 2.0])], {"min": 1.0, "max": -0.5}),
        Atan2NegativeX: _one_node("atan2", [_input("x0", [1.0, -1.0, 0.5, 2.0]),
                                            _input("x1", [-1.0, -2.0, -0.5, -1.5])], {}),
        ErfSignLost: _one_node("erf", [_input("x0", [-1.0, 0.5, -0.25, 2.0])], {}),
        PowNegativeIntegerExponent: _one_node("pow", [_input("x0", [0.5, 1.25, 2.0, 0.75], domain="positive"),
                                                      _input("x1", [-1.0, 0.5, -1.0, 1.0], domain="small")], {}),
        ReluNanToZero: _one_node("relu", [_input("x0", [float("nan"), -1.0, 0.5, float("nan")])], {}),
        LogSubnormalFlushed: _one_node("log", [_input("x0", [1e-40, 2e-39, 1.0, 0.5], domain="positive")], {}),
        Div0dDivisorSwapped: _one_node("div", [_input("x0", [1.0, 2.0, 4.0, -0.5]),
                                               _input("x1", [2.0], [], [], domain="nonzero")], {}),
        SubLeftBroadcastSwapped: _one_node("sub", [_input("x0", [1.0, 2.0, 3.0], [3, 1]), matrix | {"name": "x1"}], {}),
        AddPromotedToInt: _one_node("add_int_tensor", [_input("x0", [0.5, 1.75, -1.5, 2.25]),
                                                       _input("x1", [1, 2, 3, 4], dtype="int32")], {}),
        MulMixedNarrowed: _one_node("mul_mixed_float", [_input("x0", [1.0001, 1.0003, 0.3333, 1.2345]),
                                                        _input("x1", [1.0009765625, 3.0, 1.5, 0.7001953125],
                                                               dtype="float16")], {}),
        StepSliceUnitStride: _one_node("slice", [matrix], _slice(2)),
        SliceOfStridedView: _one_node("slice", [transposed], _slice(1) | {"start": 1}),
        InplaceStridedViewLost: _case([{"id": "v0", "op": "add_", "args": ["x0", "x1"],
                                        "attrs": {"view": {"kind": "slice", **_slice(2)}}}],
                                      [_input("x0", _grid(3, 4), [3, 4], mutated=True), _input("x1", [0.5])], []),
    }


def trigger_cases() -> dict:
    """route name -> a small case that fails on that route (and passes on eager)."""
    return {cls.name: case for cls, case in _triggers().items()}


def _near_misses() -> dict:
    positive = _input("x0", [0.5, 1.25, 2.0, 0.75], domain="positive")
    matrix = _input("x0", _grid(3, 4), [3, 4])
    index = _input("x1", [0, 0, 1, 1], [1, 4], dtype="int64", domain="index")
    same = _input("x1", [-1.0, 2.0, 0.5, 1.0])
    return {
        VarCorrectionIgnored: _one_node("var", [_input("x0", [1.0, 2.0, 4.0, 7.0])],
                                        {"correction": 1, "keepdim": False}),
        RollShiftSaturated: _one_node("roll", [_input("x0", [1.0, 2.0, 3.0, 4.0])], {"shifts": [-3], "dims": [0]}),
        ScatterIncludeSelfIgnored: _one_node("scatter_reduce", [matrix, index, _input("x2", [0.5] * 4, [1, 4])],
                                             {"dim": 0, "reduce": "sum", "include_self": True}),
        ClampCrossedBounds: _one_node("clamp", [_input("x0", [-1.0, 0.5, 1.5, 2.0])], {"min": -0.5, "max": 1.0}),
        Atan2NegativeX: _one_node("atan2", [_input("x0", [1.0, -1.0, 0.5, 2.0]), positive | {"name": "x1"}], {}),
        ErfSignLost: _one_node("erf", [positive], {}),
        PowNegativeIntegerExponent: _one_node("pow", [positive, _input("x1", [-0.5, 0.25, -0.75, 1.0],
                                                                       domain="small")], {}),
        ReluNanToZero: _one_node("relu", [_input("x0", [-1.5, -1.0, 0.5, 2.0])], {}),
        LogSubnormalFlushed: _one_node("log", [positive], {}),
        Div0dDivisorSwapped: _one_node("div", [_input("x0", [1.0, 2.0, 4.0, -0.5]),
                                               _input("x1", [2.0, 0.5, -1.0, 1.5], domain="nonzero")], {}),
        SubLeftBroadcastSwapped: _one_node("sub", [_input("x0", [1.0, 2.0, 3.0, 4.0]), same], {}),
        AddPromotedToInt: _one_node("add_int_tensor", [_input("x0", [1.0, -2.0, 3.0, 0.0]),
                                                       _input("x1", [1, 2, 3, 4], dtype="int32")], {}),
        MulMixedNarrowed: _one_node("mul", [positive, same], {}),
        StepSliceUnitStride: _one_node("slice", [matrix], _slice(1) | {"start": 1}),
        SliceOfStridedView: _one_node("slice", [matrix], _slice(2)),
        InplaceStridedViewLost: _case([{"id": "v0", "op": "add_", "args": ["x0", "x1"],
                                        "attrs": {"view": {"kind": "narrow", "dim": 0, "start": 1, "length": 2}}}],
                                      [_input("x0", _grid(3, 4), [3, 4], mutated=True), same], []),
    }


def near_miss_cases() -> dict:
    """route name -> a case with the bug's op but without its trigger (passes on that route)."""
    return {cls.name: case for cls, case in _near_misses().items()}
