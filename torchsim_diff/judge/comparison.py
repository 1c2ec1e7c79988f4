"""The judge's comparison: one tolerance table, a result compared element by element against
float64 truth and eager, and the mismatch message.

It takes the allowances of rounding_rules and carried_rounding.

    found, stats = compare(route_out, eager_out, truth_out, where=Where.output(0),
                           carried=allowance.outputs[0], sensitivity=allowance.sensitivity[0],
                           unstable=allowance.unstable[0], overflow=allowance.overflow[0])
    if found: print(found.message); found.kind   # "wrong_values", "nonfinite_mismatch", ...

where `allowance = carried(program, inputs_f64, torch.float32)` (carried_rounding), once per
case. The rule (docs/oracle.md, "The oracle rule"): a float element passes when

    |route - truth| <= atol + rtol*|truth| + margin * (max(eager_err, eager_err_max) + sensitivity) + carried

`carried` is the rounding a dtype computation may legitimately make at every node, carried
to the outputs (carried_rounding); `sensitivity` is the same for the inputs' own precision
(max over the tensor). A boolean or integer element is judged only where `unstable` does not
mark it (a decision rounding may flip); such elements are counted (`Stats.unstable`), never
failed. A non-finite element passes, whatever its sign or NaN-ness, where the truth plus what
is allowed reaches the dtype's max, or where `overflow` marks it (a node feeding it works at
the dtype's overflow scale): there the element may be any value and is not judged. So may an
element whose carried allowance is infinite: a flipped decision sends it to or from a
non-finite value (1/x of a zero whose sign is unspecified: +Inf or -Inf, carried_rounding).
"""
from __future__ import annotations

import dataclasses
import math

import torch

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


@dataclasses.dataclass(frozen=True)
class Where:
    """Where a failure is seen: output `key` of the program (its position), input `key` (its
    name: the storage an in-place op wrote), or a lone node. Only messages render it, as
    "output 0" or "input x1"; code reads `place` and `key`."""

    place: str
    key: int | str | None = None

    @classmethod
    def output(cls, position: int) -> "Where":
        return cls("output", position)

    @classmethod
    def input(cls, name: str) -> "Where":
        return cls("input", name)

    def __str__(self) -> str:
        return self.place if self.key is None else f"{self.place} {self.key}"


@dataclasses.dataclass
class Mismatch:
    """Why a result is wrong: `kind` is one of the failure kinds' names (a case's verdict holds
    the `Kind` itself, a str too), `where` the output or input, and `op` the op that wrote
    it, where the caller knows the graph (the oracle does; a tensor alone does not)."""

    kind: str
    where: Where
    message: str
    op: str | None = None


@dataclasses.dataclass
class Stats:
    """Error figures of one route against the truth (and eager's, for the ratio)."""

    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp: float | None = None  # against the truth, ulp floored at the dtype's smallest normal;
                                  # None where nothing floating was compared (integers, booleans)
    eager_abs_err: float = 0.0
    atol_needed: float = 0.0     # smallest atol passing allclose(route, truth) at the dtype's rtol
    rtol_needed: float = 0.0     # smallest rtol passing it at the dtype's atol
    eager_atol_needed: float = 0.0   # the same atol for eager's result: what the inputs' conditioning asks
    discrete: int = 0            # integer and boolean elements compared
    unstable: int = 0            # ... of which rounding may flip the decision (not judged)
    carried_ulp: float = 0.0     # largest carried allowance, in ulps of the truth's largest magnitude
    carried_by_op: dict = dataclasses.field(default_factory=dict)   # op -> ulps it adds (Carried.by_op)
    output_ulp: float = 0.0      # one ulp at the truth's scale (scale_ulp): the floor of err_over_eager

    @property
    def err_ratio(self) -> float | None:
        if self.max_abs_err == 0.0:
            return 0.0
        if self.eager_abs_err == 0.0:
            return None
        return self.max_abs_err / self.eager_abs_err

    @property
    def err_over_eager(self) -> float:
        """The error over eager's, eager's floored at one ulp of the output's scale: a route one
        ulp off where eager happens to round exactly is one ulp off, not infinitely worse."""
        floor = max(self.eager_abs_err, self.output_ulp)
        return self.max_abs_err / floor if floor > 0.0 else 0.0

    def merge(self, other: "Stats") -> None:
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.name in ("discrete", "unstable"):
                setattr(self, field.name, mine + theirs)
            elif field.name == "carried_by_op":
                self.carried_by_op = {op: max(mine.get(op, 0.0), theirs.get(op, 0.0)) for op in {*mine, *theirs}}
            elif mine is None or theirs is None:
                setattr(self, field.name, theirs if mine is None else mine)
            else:
                setattr(self, field.name, max(mine, theirs))


def margin(dtype: torch.dtype, numel: int) -> float:
    """How many times eager's own error (plus the allowances) a route may be off."""
    base = LOW_PRECISION_MARGIN if dtype in (torch.float16, torch.bfloat16) else MARGIN
    return base * (FEW_ELEMENTS_FACTOR if numel <= FEW_ELEMENTS else 1.0)


def ulp(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Unit in the last place of `dtype` at the magnitude of each element of float64 `t`,
    floored at the ulp of the smallest normal (values near zero do not inflate ULP figures)."""
    info = torch.finfo(dtype)
    magnitude = t.abs().nan_to_num(0.0, posinf=info.max, neginf=info.max).clamp(min=info.smallest_normal)
    return torch.pow(2.0, torch.floor(torch.log2(magnitude)) - MANTISSA_BITS[dtype])


def scale_ulp(t: torch.Tensor, dtype: torch.dtype) -> float:
    """The ulp at the largest finite magnitude of `t`, floored at the magnitude below which
    the rule's atol outweighs its rtol: the unit of allowance figures, so that outputs near
    zero (cancellation, a variance of equal values) do not make them meaningless."""
    rtol, atol = TOLERANCES[dtype]
    finite = t[torch.isfinite(t)].abs()
    largest = finite.max() if finite.numel() else torch.zeros((), dtype=torch.float64)
    return float(ulp(largest.clamp(min=atol / rtol), dtype))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise bit-for-bit equality (NaN equals the same NaN, -0.0 differs from 0.0)."""
    if a.dtype.is_floating_point:
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.view(as_int) == b.view(as_int)
    return a == b


# -- the comparison ---------------------------------------------------------------------------

def compare(got, eager, truth, *, where: Where = Where.output(0), carried=None, sensitivity=None, unstable=None,
            overflow=None):
    """(Mismatch or None, Stats) for `got` against `eager` (case dtype) and float64 `truth`.

    carried: per-element rounding allowance (float64, broadcastable) or None for zero;
    sensitivity: the inputs' conditioning allowance, of which the tensor's max is used;
    unstable: bool mask of discrete elements not to judge (None: judge all);
    overflow: bool mask of elements fed by a node at the dtype's overflow scale (Carried.overflow),
    where any value passes (None: none).
    """
    if list(got.shape) != list(eager.shape):
        return Mismatch("shape_mismatch", where, f"{where}: shape {list(got.shape)} != eager's {list(eager.shape)}"), Stats()
    if got.dtype != eager.dtype:
        return Mismatch("dtype_mismatch", where, f"{where}: dtype {got.dtype} != eager's {eager.dtype}"), Stats()
    if not got.dtype.is_floating_point:
        return _compare_exact(got, eager, truth, where, unstable)
    return _compare_float(got, eager, truth, where, carried, sensitivity, overflow)


def allowed_error(eager, truth, *, carried=None, sensitivity=None) -> torch.Tensor:
    """The largest |route - truth| each element may have (see the module docstring)."""
    rtol, atol = TOLERANCES[eager.dtype]
    e, t = eager.double(), truth.double()
    finite = torch.isfinite(e) & torch.isfinite(t)
    eager_err = torch.where(finite, (e - t).abs(), torch.zeros_like(t))
    floor = float(eager_err.max()) if eager_err.numel() else 0.0
    sens = 0.0 if sensitivity is None or sensitivity.numel() == 0 else float(sensitivity.max())
    extra = torch.zeros_like(t) if carried is None else carried.double().expand_as(t)
    return atol + rtol * t.abs().nan_to_num(0.0) + margin(eager.dtype, t.numel()) * (
        torch.clamp(eager_err, min=floor) + sens) + extra


def _compare_float(got, eager, truth, where, carried, sensitivity, overflow):
    g, e, t = got.double(), eager.double(), truth.double()
    rounded = truth.to(got.dtype).double()
    allowed = allowed_error(eager, truth, carried=carried, sensitivity=sensitivity)
    fed = _any_value_passes(t, carried, overflow)
    excused = (~torch.isfinite(g) & _may_be_nonfinite(t, allowed, got.dtype, overflow)) | fed
    bad_nonfinite = ~_same_class(g, e) & ~_same_class(g, rounded) & ~excused
    if bad_nonfinite.any():
        return Mismatch("nonfinite_mismatch", where,
                        message(where, "non-finite pattern differs", bad_nonfinite, g, e)), Stats()
    finite = torch.isfinite(g) & torch.isfinite(e) & torch.isfinite(t)
    err = torch.where(finite, (g - t).abs(), torch.zeros_like(t))
    stats = _stats(err, torch.where(finite, (e - t).abs(), torch.zeros_like(t)), t, got.dtype, carried)
    wrong = finite & (err > allowed) & ~fed
    if wrong.any():
        return Mismatch("wrong_values", where, message(where, "values differ", wrong, g, t, err, allowed)), stats
    return None, stats


def _any_value_passes(t, carried, overflow) -> torch.Tensor:
    """Elements not judged: fed by a node at the dtype's overflow scale (`overflow`), or moved
    without bound by a flipped decision (an infinite `carried` allowance: its truth may be
    +Inf where the flipped run's is -Inf, or finite where it is non-finite)."""
    anything = torch.zeros(t.shape, dtype=torch.bool) if overflow is None else overflow.expand_as(t)
    if carried is not None:
        anything = anything | torch.isinf(carried.double()).expand_as(t)
    return anything


def _may_be_nonfinite(t, allowed, dtype, overflow) -> torch.Tensor:
    """Where a non-finite value passes whatever its sign or NaN-ness: the finite truth plus
    what is allowed reaches the dtype's max (float64 itself overflows the dtype, or the
    value's rounding may), or a node feeding it works at the overflow scale (`overflow`).
    Partial sums then overflow in some orders, and which of +Inf, -Inf or NaN comes out
    depends on the order."""
    near_max = torch.isfinite(t) & (t.abs() + allowed >= torch.finfo(dtype).max)
    return near_max if overflow is None else near_max | overflow.expand_as(t)


def _compare_exact(got, eager, truth, where, unstable):
    wrong = (got != eager) & (got != truth.to(got.dtype))
    skipped = torch.zeros_like(wrong) if unstable is None else unstable.expand_as(wrong)
    stats = Stats(discrete=wrong.numel(), unstable=int(skipped.sum()))
    wrong = wrong & ~skipped
    if wrong.any():
        what = "exact values differ" + (f" ({stats.unstable} unstable elements not judged)" if stats.unstable else "")
        return Mismatch("wrong_values", where, message(where, what, wrong, got, eager)), stats
    return None, stats


def _same_class(a, b):
    """Elementwise: both finite, or both the same non-finite value (NaN, +Inf, -Inf)."""
    both_finite = torch.isfinite(a) & torch.isfinite(b)
    both_nan = torch.isnan(a) & torch.isnan(b)
    same_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    return both_finite | both_nan | same_inf


def _stats(err, eager_err, t, dtype, carried) -> Stats:
    if err.numel() == 0:
        return Stats(max_ulp=0.0)
    rtol, atol = TOLERANCES[dtype]
    magnitude = t.abs().nan_to_num(0.0)
    rel = torch.where(magnitude > atol, err / magnitude.clamp(min=atol), torch.zeros_like(err))
    atol_needed = (err - rtol * magnitude).clamp(min=0.0)
    eager_atol_needed = (eager_err - rtol * magnitude).clamp(min=0.0)
    rtol_needed = torch.where(magnitude > 0, (err - atol).clamp(min=0.0) / magnitude.clamp(min=1e-300),
                              torch.where(err > atol, torch.full_like(err, math.inf), torch.zeros_like(err)))
    spacing = ulp(t, dtype)
    carried_ulp = 0.0 if carried is None else float(carried.double().max() / scale_ulp(t, dtype))
    return Stats(float(err.max()), float(rel.max()), float((err / spacing).max()), float(eager_err.max()),
                 float(atol_needed.max()), float(rtol_needed.max()), float(eager_atol_needed.max()),
                 carried_ulp=carried_ulp, output_ulp=scale_ulp(t, dtype))


def message(where, what, wrong, got, ref, err=None, allowed=None) -> str:
    """The mismatch message, torch.testing's way: count, share and the worst element."""
    total, count = wrong.numel(), int(wrong.sum())
    lines = [f"{where}: {what}", f"Mismatched elements: {count} / {total} ({100.0 * count / max(total, 1):.1f}%)"]
    if err is not None:
        masked = torch.where(wrong, err, torch.full_like(err, -1.0))
        flat = int(masked.reshape(-1).argmax())
        lines.append(f"Greatest absolute difference: {float(err.reshape(-1)[flat]):.6g} at index "
                     f"{unravel(flat, wrong.shape)} (up to {float(allowed.reshape(-1)[flat]):.3g} allowed); "
                     f"got {float(got.reshape(-1)[flat]):.6g}, expected {float(ref.reshape(-1)[flat]):.6g}")
    else:
        flat = int(wrong.reshape(-1).nonzero()[0])
        lines.append(f"First mismatch at index {unravel(flat, wrong.shape)}: "
                     f"got {got.reshape(-1)[flat].item()!r}, expected {ref.reshape(-1)[flat].item()!r}")
    return "\n".join(lines)


def unravel(flat: int, shape) -> tuple:
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat //= max(size, 1)
    return tuple(reversed(index))
