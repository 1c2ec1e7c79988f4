"""The oracle: float64 truth, eager baseline, and the rule that judges a route.

Truth is the program run in float64 (integer cases: exact). Baseline is eager in the
case's dtype. A route's element passes when its distance to the truth is within

    allowed = atol + rtol * |truth| + margin * (max(eager_err, eager_err_max) + sensitivity)

where eager_err is eager's own distance to the truth at that element and eager_err_max
its largest over the tensor (reductions legitimately differ in summation order, and
eager's error shows where cancellation makes that visible); sensitivity is how far the
float64 result moves (at most, over the tensor) when every input element is perturbed by
up to one ulp of the case dtype (an ill-conditioned output, such as layer_norm over a constant row, may differ
that much whatever the compiler does, even where eager happens to be exact); and
(rtol, atol) is the per-dtype floor from torch.testing's defaults. So a compiled result is wrong only when
it is further from float64 than eager is, by a margin: the rule PyTorch's own
compiler tests apply (torch._dynamo.utils.same with an fp64 reference: multiplier 2,
3 for float16/bfloat16), doubled for tensors of at most 10 elements, where eager's
error is a single sample (a product of 800 terms legitimately lands 2.5x further).
Non-finite positions must agree with eager or with the correctly rounded truth.
Integer and boolean results must equal eager's or the truth's exactly.

Inputs are compared as whole storages: elements outside a view (guards), elements of
read-only inputs, and elements an in-place op left alone must be bit-for-bit unchanged.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from torchsim_diff import layout
from torchsim_diff.kinds import Kind

# (rtol, atol) per dtype: torch.testing.assert_close's defaults.
TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
}
MARGIN = 2.0                   # float32, float64: torch._dynamo.utils.same's multiplier
LOW_PRECISION_MARGIN = 3.0     # float16, bfloat16: same's multiplier for them
FEW_ELEMENTS = 10              # a tensor this small gives eager's error one or two samples,
FEW_ELEMENTS_FACTOR = 2.0      # so the margin doubles (a 2.5x unlucky product is not a bug)
MANTISSA_BITS = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23, torch.float64: 52}


@dataclasses.dataclass
class ErrorStats:
    """Error figures of one route against the truth (and eager's, for the ratio)."""

    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: float = 0.0
    eager_abs_err: float = 0.0
    atol_needed: float = 0.0     # smallest atol passing allclose(route, truth) at the dtype's rtol
    rtol_needed: float = 0.0     # smallest rtol passing it at the dtype's atol

    @property
    def err_ratio(self) -> float | None:
        if self.max_abs_err == 0.0:
            return 0.0
        if self.eager_abs_err == 0.0:
            return None
        return self.max_abs_err / self.eager_abs_err

    def merge(self, other: "ErrorStats") -> None:
        self.max_abs_err = max(self.max_abs_err, other.max_abs_err)
        self.max_rel_err = max(self.max_rel_err, other.max_rel_err)
        self.max_ulp = max(self.max_ulp, other.max_ulp)
        self.eager_abs_err = max(self.eager_abs_err, other.eager_abs_err)
        self.atol_needed = max(self.atol_needed, other.atol_needed)
        self.rtol_needed = max(self.rtol_needed, other.rtol_needed)


@dataclasses.dataclass
class Mismatch:
    """Why a route's result is wrong: the first failing item, described."""

    kind: Kind
    where: str          # "output 0" or "input x2"
    message: str
    op: str | None = None


@dataclasses.dataclass
class Reference:
    """Eager (case dtype) and truth (float64) results of one case, plus initial storages."""

    outputs: list
    truth_outputs: list
    storages: list
    truth_storages: list
    initial_storages: list
    covered: list
    output_sensitivity: list
    storage_sensitivity: list


def run_program(program, inputs):
    outputs = program(*inputs)
    return tuple(outputs), [layout.storage_of(t).clone() for t in inputs]


def reference(case, program) -> Reference:
    """Run `program` eagerly in the case dtype and in float64. Exceptions propagate:
    eager rejecting a case means the case is invalid (a generator bug)."""
    data = case.to_dict()
    inputs = layout.materialize_all(data)
    initial = [layout.storage_of(t).clone() for t in inputs]
    outputs, storages = run_program(program, inputs)
    covered = [layout.covered_mask(i["shape"], i["layout"]["strides"], i["layout"]["offset"],
                                   i["layout"]["storage_size"]) for i in case.inputs]
    if case.dtype.startswith(("float", "bfloat")):
        truth_outputs, truth_storages = run_program(program, layout.materialize_all(data, torch.float64))
        out_sens, storage_sens = _sensitivity(case, program, truth_outputs, truth_storages)
    else:
        truth_outputs, truth_storages = outputs, storages
        out_sens = [torch.zeros(o.shape, dtype=torch.float64) for o in outputs]
        storage_sens = [torch.zeros(s.shape, dtype=torch.float64) for s in storages]
    return Reference([o.detach().clone() for o in outputs], [o.detach() for o in truth_outputs],
                     storages, truth_storages, initial, covered, out_sens, storage_sens)


def _sensitivity(case, program, truth_outputs, truth_storages):
    """|f(x + one-ulp noise) - f(x)| in float64, per output element and storage element.

    Inputs are perturbed as dense copies, so elements that share storage (broadcast,
    overlapping views) are perturbed independently: the inputs' values are only known
    to the dtype's precision, wherever they came from.
    """
    dtype = layout.dtype_of(case.dtype)
    eps = torch.finfo(dtype).eps
    gen = torch.Generator().manual_seed(int(case.values.get("seed", 0)) + 7)
    views = layout.materialize_all(case.to_dict(), torch.float64)
    dense = []
    for view in views:
        copy = view.detach().clone()
        if copy.dtype == torch.float64:
            noise = torch.rand(copy.shape, generator=gen, dtype=torch.float64) * 2 - 1
            copy = copy * (1 + eps * noise)
        dense.append(copy)
    outputs = program(*dense)
    out_sens = [_distance(o, t) for o, t in zip(outputs, truth_outputs)]
    storage_sens = []
    for view, final, truth in zip(views, dense, truth_storages):
        moved = layout.storage_of(view).clone()
        if final.dtype == torch.float64 and not layout.is_overlapping(list(view.shape), list(view.stride())):
            moved.as_strided(view.shape, view.stride(), view.storage_offset()).copy_(final)
        storage_sens.append(_distance(moved, truth))
    return out_sens, storage_sens


def _distance(a, b):
    if not (a.dtype.is_floating_point and b.dtype.is_floating_point) or a.shape != b.shape:
        return torch.zeros(b.shape, dtype=torch.float64)
    return (a.double() - b.double()).abs().nan_to_num(nan=math.inf)


def judge(case, ref: Reference, outputs, storages) -> tuple:
    """(Mismatch or None, ErrorStats) for a route's outputs and final input storages."""
    stats = ErrorStats()
    if len(outputs) != len(ref.outputs):
        return Mismatch(Kind.SHAPE_MISMATCH, "outputs",
                        f"route returned {len(outputs)} outputs, eager {len(ref.outputs)}"), stats
    producers = {n["id"]: n["op"] for n in case.nodes}
    for i, (got, want, truth) in enumerate(zip(outputs, ref.outputs, ref.truth_outputs)):
        op = producers.get(case.outputs[i])
        found = _check_tensor(got, want, truth, f"output {i}", op, stats, ref.output_sensitivity[i])
        if found:
            return found, stats
    for i, spec in enumerate(case.inputs):
        found = _check_storage(case, i, spec, ref, storages[i], stats)
        if found:
            return found, stats
    return None, stats


def _check_tensor(got, want, truth, where, op, stats, sensitivity=None):
    if list(got.shape) != list(want.shape):
        return Mismatch(Kind.SHAPE_MISMATCH, where, f"{where}: shape {list(got.shape)} != eager's {list(want.shape)}", op)
    if got.dtype != want.dtype:
        return Mismatch(Kind.DTYPE_MISMATCH, where, f"{where}: dtype {got.dtype} != eager's {want.dtype}", op)
    failure = compare_values(got, want, truth, where, sensitivity)
    if isinstance(failure, ErrorStats):
        stats.merge(failure)
        return None
    return Mismatch(failure[0], where, failure[1], op)


def compare_values(got, want, truth, where: str = "tensor", sensitivity=None):
    """ErrorStats when `got` passes against eager `want` and float64 `truth`, else
    (Kind, message) describing the mismatch the torch.testing way. `sensitivity` is the
    per-element conditioning allowance (see the module docstring); None means zero."""
    if not got.dtype.is_floating_point:
        return _compare_exact(got, want, truth, where)
    rtol, atol = TOLERANCES[got.dtype]
    g, e, t = got.double(), want.double(), truth.double()
    rounded = truth.to(got.dtype).double()
    finite = torch.isfinite(g) & torch.isfinite(e) & torch.isfinite(t)
    bad_nonfinite = (~_same_class(g, e)) & (~_same_class(g, rounded))
    if bad_nonfinite.any():
        return Kind.NONFINITE_MISMATCH, _mismatch_message(where, bad_nonfinite, g, e, "non-finite pattern differs")
    err = torch.where(finite, (g - t).abs(), torch.zeros_like(t))
    eager_err = torch.where(finite, (e - t).abs(), torch.zeros_like(t))
    eager_max = float(eager_err.max()) if eager_err.numel() else 0.0
    sens = torch.zeros_like(t) if sensitivity is None else sensitivity.double()
    if sens.numel():
        sens = torch.full_like(sens, float(sens.max()))
    allowed = atol + rtol * t.abs().nan_to_num(0.0) + margin(got.dtype, t.numel()) * (
        torch.clamp(eager_err, min=eager_max) + sens)
    wrong = finite & (err > allowed)
    if wrong.any():
        return Kind.WRONG_VALUES, _mismatch_message(where, wrong, g, t, "values differ", err, allowed)
    return _stats(err, eager_err, t, got.dtype, (rtol, atol))


def margin(dtype: torch.dtype, numel: int) -> float:
    """How many times eager's own error a route may be off (see the module docstring)."""
    base = LOW_PRECISION_MARGIN if dtype in (torch.float16, torch.bfloat16) else MARGIN
    return base * (FEW_ELEMENTS_FACTOR if numel <= FEW_ELEMENTS else 1.0)


def _compare_exact(got, want, truth, where):
    wrong = (got != want) & (got != truth.to(got.dtype))
    if wrong.any():
        return Kind.WRONG_VALUES, _mismatch_message(where, wrong, got, want, "exact values differ")
    return ErrorStats()


def _same_class(a, b):
    """Elementwise: both finite, or both the same non-finite value (NaN, +Inf, -Inf)."""
    both_finite = torch.isfinite(a) & torch.isfinite(b)
    both_nan = torch.isnan(a) & torch.isnan(b)
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    return both_finite | both_nan | same_inf


def _stats(err, eager_err, t, dtype, tolerance) -> ErrorStats:
    if err.numel() == 0:
        return ErrorStats()
    rtol, atol = tolerance
    magnitude = t.abs().nan_to_num(0.0)
    rel = torch.where(magnitude > atol, err / magnitude.clamp(min=atol), torch.zeros_like(err))
    atol_needed = (err - rtol * magnitude).clamp(min=0.0)
    rtol_needed = torch.where(magnitude > 0, (err - atol).clamp(min=0.0) / magnitude.clamp(min=1e-300),
                              torch.where(err > atol, torch.full_like(err, math.inf), torch.zeros_like(err)))
    return ErrorStats(float(err.max()), float(rel.max()), float((err / ulp(t, dtype)).max()),
                      float(eager_err.max()), float(atol_needed.max()), float(rtol_needed.max()))


def ulp(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Unit in the last place of `dtype` at the magnitude of each element of float64 `t`."""
    info = torch.finfo(dtype)
    bits = MANTISSA_BITS[dtype]
    magnitude = t.abs().nan_to_num(0.0, posinf=info.max, neginf=info.max).clamp(min=info.smallest_normal)
    exponent = torch.floor(torch.log2(magnitude))
    return torch.pow(2.0, exponent - bits)


def _mismatch_message(where, wrong, got, ref, what, err=None, allowed=None) -> str:
    total, count = wrong.numel(), int(wrong.sum())
    lines = [f"{where}: {what}", f"Mismatched elements: {count} / {total} ({100.0 * count / max(total, 1):.1f}%)"]
    if err is not None:
        masked = torch.where(wrong, err, torch.full_like(err, -1.0))
        flat = int(masked.reshape(-1).argmax())
        index = _unravel(flat, wrong.shape)
        lines.append(f"Greatest absolute difference: {float(err.reshape(-1)[flat]):.6g} at index {index} "
                     f"(up to {float(allowed.reshape(-1)[flat]):.3g} allowed); "
                     f"got {float(got.reshape(-1)[flat]):.6g}, expected {float(ref.reshape(-1)[flat]):.6g}")
    else:
        flat = int(wrong.reshape(-1).nonzero()[0])
        lines.append(f"First mismatch at index {_unravel(flat, wrong.shape)}: "
                     f"got {got.reshape(-1)[flat].item()!r}, expected {ref.reshape(-1)[flat].item()!r}")
    return "\n".join(lines)


def _unravel(flat: int, shape) -> tuple:
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat //= max(size, 1)
    return tuple(reversed(index))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise bit-for-bit equality (NaN equals the same NaN, -0.0 differs from 0.0)."""
    if a.dtype.is_floating_point:
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.view(as_int) == b.view(as_int)
    return a == b


def _check_storage(case, i, spec, ref: Reference, got, stats):
    where = f"input {spec['name']}"
    init, want, truth = ref.initial_storages[i], ref.storages[i], ref.truth_storages[i]
    if got.shape != init.shape or got.dtype != init.dtype:
        return Mismatch(Kind.SHAPE_MISMATCH, where, f"{where}: storage came back as {got.dtype}{list(got.shape)}")
    covered = ref.covered[i]
    guard_changed = ~covered & ~same_bits(got, init)
    if guard_changed.any():
        positions = guard_changed.nonzero().reshape(-1)[:8].tolist()
        return Mismatch(Kind.GUARD_VIOLATION, where,
                        f"{where}: route wrote {int(guard_changed.sum())} storage elements outside the view "
                        f"(storage positions {positions}, view offset {spec['layout']['offset']}, "
                        f"strides {spec['layout']['strides']})", _writer(case, spec["name"]))
    if not spec.get("mutated"):
        changed = covered & ~same_bits(got, init)
        if changed.any():
            return Mismatch(Kind.GUARD_VIOLATION, where,
                            f"{where}: route changed {int(changed.sum())} elements of a read-only input")
        return None
    return _check_mutated(case, spec, where, got[covered], want[covered], truth[covered],
                          same_bits(want, init)[covered], stats, ref.storage_sensitivity[i][covered])


def _check_mutated(case, spec, where, got, want, truth, untouched, stats, sensitivity):
    op = _writer(case, spec["name"])
    failure = compare_values(got, want, truth, where, sensitivity)
    if isinstance(failure, ErrorStats):
        stats.merge(failure)
        return None
    kind, message = failure
    strict = compare_values(got[~untouched], want[~untouched], truth[~untouched], where, sensitivity[~untouched])
    if isinstance(strict, ErrorStats):
        count = int((~same_bits(got, want) & untouched).sum())
        return Mismatch(Kind.GUARD_VIOLATION, where,
                        f"{where}: route changed {count} elements the in-place op must leave alone\n{message}", op)
    return Mismatch(kind, where, message, op)


def _writer(case, name: str):
    """The last op that writes into input `name` (the diverging op of a storage mismatch)."""
    ops = [n["op"] for n in case.nodes if n["args"] and n["args"][0] == name and n["op"].endswith("_")]
    return ops[-1] if ops else None


def finite_or_none(x: float | None):
    return None if x is None or not math.isfinite(x) else x
