"""The judge: one tolerance table, the comparison of a result against float64 truth and
eager, the mismatch message, and the rounding allowance carried through a program.

Imports only the standard library and torch: a reproducer bundle copies this file verbatim
next to its repro.py. The whole public API:

    allowance = judge.carried(program, inputs_f64, torch.float32)   # once per case
    found, stats = judge.compare(route_out, eager_out, truth_out, where="output 0",
                                 carried=allowance.outputs[0], sensitivity=allowance.sensitivity[0],
                                 unstable=allowance.unstable[0], overflow=allowance.overflow[0])
    if found: print(found.message); found.kind   # "wrong_values", "nonfinite_mismatch", ...

`inputs_f64` are the program's inputs in float64 (never mutated here: each run gets
copies). The rule (README, "The oracle rule"): a float element passes when

    |route - truth| <= atol + rtol*|truth| + margin * (max(eager_err, eager_err_max) + sensitivity) + carried

`carried` is the rounding a dtype computation may legitimately make at every node (about
one ulp for pointwise ops, sqrt(n)+2 ulps of the magnitude for a reduction of length n, up
to n/2 where its addends are equal),
carried to the outputs by rerunning the program in float64 with each node's result moved
by its allowance (random signs, SAMPLES times) and summing the per-node movements.
`sensitivity` is the same for the inputs' own precision (max over the tensor). A boolean
or integer element computed from floats (comparisons, argmax/argmin, anything derived
from them) is judged only where that decision is stable: where the float64 margin of its
operands exceeds margin * their carried allowance (at least atol for a computed operand).
remainder and fmod jump by the divisor where their dividend may cross a multiple of it:
the jump is carried downstream like a flipped decision. Unstable elements are counted
(`Stats.unstable`), never failed. A non-finite element passes, whatever its sign or
NaN-ness, where the truth plus what is allowed reaches the dtype's max. Where a node feeding
an element passes through values that do (`Carried.overflow`, PASSES_THROUGH), partial sums
overflow in some orders and the element may be any value (x / Inf = 0, sign(NaN) = 0): it
is not judged, and a decision on it is unstable.
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch.overrides import TorchFunctionMode

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
SAMPLES = 2                    # random-sign reruns per rounding node
PROBES = 8                     # reruns with every rounding node moved at once (decisions)


@dataclasses.dataclass
class Mismatch:
    """Why a result is wrong: `kind` is one of the failure kinds' names."""

    kind: str
    where: str
    message: str


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
    discrete: int = 0            # integer and boolean elements compared
    unstable: int = 0            # ... of which rounding may flip the decision (not judged)
    carried_ulp: float = 0.0     # largest carried allowance, in ulps of the truth's largest magnitude
    carried_by_op: dict = dataclasses.field(default_factory=dict)   # op -> ulps it adds (Carried.by_op)

    @property
    def err_ratio(self) -> float | None:
        if self.max_abs_err == 0.0:
            return 0.0
        if self.eager_abs_err == 0.0:
            return None
        return self.max_abs_err / self.eager_abs_err

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

def compare(got, eager, truth, *, where: str = "output 0", carried=None, sensitivity=None, unstable=None,
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
    fed = torch.zeros(t.shape, dtype=torch.bool) if overflow is None else overflow.expand_as(t)
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
    rtol_needed = torch.where(magnitude > 0, (err - atol).clamp(min=0.0) / magnitude.clamp(min=1e-300),
                              torch.where(err > atol, torch.full_like(err, math.inf), torch.zeros_like(err)))
    spacing = ulp(t, dtype)
    carried_ulp = 0.0 if carried is None else float(carried.double().max() / scale_ulp(t, dtype))
    return Stats(float(err.max()), float(rel.max()), float((err / spacing).max()), float(eager_err.max()),
                 float(atol_needed.max()), float(rtol_needed.max()), carried_ulp=carried_ulp)


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


# -- rounding carried through the program ---------------------------------------------------

def _pointwise(func, args, kwargs, out, eps):
    return eps * out.abs()


def _reduced_length(x, out) -> int:
    return max(x.numel() // max(out.numel(), 1), 1)


def _dim_length(args, kwargs) -> int:
    x, dim = args[0], _dim_of(args, kwargs)
    return x.shape[dim] if x.dim() else 1


def _dim_of(args, kwargs):
    return kwargs["dim"] if "dim" in kwargs else args[1]


def _magnitude(func, args, kwargs):
    """The op applied to the magnitudes of its float operands: the scale its rounding has
    (sum|x| for a sum, |A||B| for a product of matrices, ...)."""
    plain = [a.abs() if isinstance(a, torch.Tensor) and a.dtype.is_floating_point else a for a in args]
    return func(*plain, **kwargs)


def _linear(length):
    """A sum of `length(args, kwargs, out)` products: sqrt(n)+2 eps of the magnitudes."""
    def rule(func, args, kwargs, out, eps):
        n = max(int(length(args, kwargs, out)), 1)
        return eps * (math.sqrt(n) + 2) * _magnitude(func, args, kwargs)
    return rule


def _sum_of(addends):
    """A sum in any order of the addends that `addends(args, kwargs)` lays out along the
    last dim, one row per result element: (growth + 2) eps of the magnitudes. For n
    independent roundings the growth is sqrt(n). Equal addends round alike (a broadcast
    operand summed in order adds one value to similar partial sums), so their errors add
    up: with d equally common values the growth is n / (2 sqrt(d)), n / 2 when all are equal
    (partial sums stay within the magnitude, eps is two unit roundoffs). d is counted as the
    inverse Simpson index, so that a few odd values among many equal ones do not count."""
    def rule(func, args, kwargs, out, eps):
        rows, result_shape = addends(args, kwargs)
        n = rows.shape[-1]
        if rows.numel() == 0 or n <= 1:
            return eps * 3 * _magnitude(func, args, kwargs)       # sqrt(1) + 2, as any sum
        growth = (n / (2 * torch.sqrt(_effective_distinct(rows)))).clamp(min=math.sqrt(n))
        return eps * (growth.reshape(result_shape) + 2) * _magnitude(func, args, kwargs)
    return rule


def _effective_distinct(rows):
    """Per row: n^2 / sum of the squared counts of its values (n distinct: n; all equal: 1)."""
    ordered = rows.sort(dim=-1).values
    starts = torch.zeros(ordered.shape, dtype=torch.long)
    starts[..., 1:] = (ordered[..., 1:] != ordered[..., :-1]).long()
    counts = torch.zeros(ordered.shape, dtype=torch.float64).scatter_add_(
        -1, starts.cumsum(dim=-1), torch.ones(ordered.shape, dtype=torch.float64))
    return rows.shape[-1] ** 2 / (counts * counts).sum(dim=-1)


def _reduced_rows(args, kwargs):
    """sum/mean: the addends of each result element in a row, and the result's shape with
    the reduced dims kept as 1 (broadcasts against the result, keepdim or not)."""
    x = args[0]
    dim = kwargs.get("dim", args[1] if len(args) > 1 and not isinstance(args[1], torch.dtype) else None)
    if x.dim() == 0:
        return x.reshape(1, 1), ()
    dims = range(x.dim()) if dim is None or dim == () or dim == [] else \
        [d % x.dim() for d in ((dim,) if isinstance(dim, int) else dim)]
    dims = sorted(set(dims))
    kept = [d for d in range(x.dim()) if d not in dims]
    rows = x.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], -1)
    shape = [1 if d in dims else x.shape[d] for d in range(x.dim())]
    return rows, (shape if kwargs.get("keepdim", False) else [x.shape[d] for d in kept])


def _running_rows(args, kwargs):
    """cumsum: each position's addends are its row's (at most the whole row, counted once)."""
    x = args[0]
    if x.dim() == 0:
        return x.reshape(1, 1), ()
    dim = _dim_of(args, kwargs) % x.dim()
    shape = list(x.shape)
    shape[dim] = 1
    return x.movedim(dim, -1), shape


def _product(length):
    def rule(func, args, kwargs, out, eps):
        return eps * (math.sqrt(max(int(length(args, kwargs, out)), 1)) + 1) * out.abs()
    return rule


def _var_allowance(args, kwargs, out, eps, variance):
    """A variance computed by two passes or by Welford's updates (not the one-pass sum of
    squares, whose n mean^2 / var cancellation no route uses): sqrt(n)+2 eps of the variance;
    Welford's first-order error from the running mean, eps |mean| sqrt(n var / kept) (Chan,
    Golub and LeVeque's bound in kappa, not kappa^2); and two passes' second-order one,
    n dm^2 / kept, where dm = n eps mean|x| bounds an ordered sum's error in the mean."""
    x = args[0]
    n = _reduced_length(x, out)
    dim, keepdim = kwargs.get("dim"), kwargs.get("keepdim", False)
    average = (lambda t: t.mean()) if dim is None and not keepdim else (lambda t: t.mean(dim=dim, keepdim=keepdim))
    mean, mean_error = average(x), eps * n * average(x.abs())
    kept = max(n - kwargs.get("correction", 1), 1)
    variance = variance.abs()
    running_mean = mean.abs() * torch.sqrt(variance * n / kept)
    return eps * (math.sqrt(n) + 2) * (variance + running_mean) + mean_error * mean_error * n / kept


def _var(func, args, kwargs, out, eps):
    return _var_allowance(args, kwargs, out, eps, out)


def _std(func, args, kwargs, out, eps):
    of_var = _var_allowance(args, kwargs, out, eps, out * out)
    return of_var / (out.abs() + of_var.sqrt()) + eps * out.abs()


def _log_sum(length):
    """log of a sum of exponentials: absolute error about (sqrt(n) + 2 + |result|) eps."""
    def rule(func, args, kwargs, out, eps):
        return eps * (math.sqrt(max(length(args, kwargs, out), 1)) + 2 + out.abs())
    return rule


def _softmax(func, args, kwargs, out, eps):
    x, dim = args[0], _dim_of(args, kwargs)
    if x.dim() == 0:
        return eps * out.abs()
    shifted = (x - x.amax(dim=dim, keepdim=True)).abs()
    return eps * (math.sqrt(x.shape[dim]) + 2 + shifted) * out.abs()


def _log_softmax(func, args, kwargs, out, eps):
    x, dim = args[0], _dim_of(args, kwargs)
    if x.dim() == 0:
        return eps * out.abs()
    shifted = x - x.amax(dim=dim, keepdim=True)
    return eps * (math.sqrt(x.shape[dim]) + shifted.abs() + (shifted - out).abs() + out.abs())


def _normalised(x, dims, eps_ln):
    """(mean|x| / spread, |x - mean| / spread) over `dims`: how a mean's rounding shows."""
    spread = torch.sqrt(x.var(dim=dims, correction=0, keepdim=True) + eps_ln)
    return x.abs().mean(dim=dims, keepdim=True) / spread, (x - x.mean(dim=dims, keepdim=True)).abs() / spread


def _layer_norm(func, args, kwargs, out, eps):
    x, shape = args[0], args[1]
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    offset, normalised = _normalised(x, dims, kwargs.get("eps", 1e-5))
    scale = 1.0 if weight is None else weight.abs()
    return eps * ((math.sqrt(math.prod(shape)) + 2) * (offset + normalised) * scale + out.abs())


def _group_norm(func, args, kwargs, out, eps):
    x, groups = args[0], args[1]
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    grouped = x.reshape(x.shape[0], groups, -1)
    offset, normalised = _normalised(grouped, (2,), kwargs.get("eps", args[4] if len(args) > 4 else 1e-5))
    scale = 1.0 if weight is None else float(weight.abs().max())
    term = ((offset + normalised) * scale).reshape(x.shape)
    return eps * ((math.sqrt(grouped.shape[2]) + 2) * term + out.abs())


def _rms_norm(func, args, kwargs, out, eps):
    return eps * (math.sqrt(math.prod(args[1])) + 3) * out.abs()


def _inner(i):
    return lambda args, kwargs, out: args[i].shape[-1] if args[i].dim() else 1


def _reduced(args, kwargs, out):
    return _reduced_length(args[0], out)


def _along(args, kwargs, out):
    return _dim_length(args, kwargs)


def _einsum_length(args, kwargs, out):
    operands = [a for a in args[1:] if isinstance(a, torch.Tensor)]
    return math.prod(a.numel() for a in operands) // max(out.numel(), 1) if operands else 1


def _window(args, kwargs, out):
    return max(_reduced_length(args[0], out), 4)


def _conv_window(args, kwargs, out):
    return args[1][0].numel()


# name -> local allowance (float64, broadcastable to the result) of one dtype computation;
# an op not listed rounds nothing (views, selections, max/min, sign, abs, neg, relu, where,
# clamps, pooling by max). Step functions (floor, round, casts) are decisions, below.
ROUNDING = {
    **{name: _pointwise for name in (
        "add", "sub", "mul", "div", "true_divide", "sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p",
        "tanh", "sigmoid", "gelu", "silu", "elu", "hardswish", "leaky_relu", "erf", "sin", "cos", "atan2", "pow",
        "addcmul", "addcdiv", "lerp")},
    "sum": _sum_of(_reduced_rows), "mean": _sum_of(_reduced_rows), "cumsum": _sum_of(_running_rows),
    "prod": _product(_reduced), "cumprod": _product(_along), "var": _var, "std": _std,
    "logsumexp": _log_sum(_reduced), "logcumsumexp": _log_sum(_along),
    "mm": _linear(_inner(0)), "bmm": _linear(_inner(0)), "matmul": _linear(_inner(0)), "linear": _linear(_inner(0)),
    "addmm": _linear(_inner(1)), "baddbmm": _linear(_inner(1)),
    "addbmm": _linear(lambda args, kwargs, out: args[1].shape[0] * args[1].shape[-1]),
    "einsum": _linear(_einsum_length), "conv1d": _linear(_conv_window), "conv2d": _linear(_conv_window),
    "avg_pool2d": _linear(_window), "adaptive_avg_pool2d": _linear(_window), "interpolate": _linear(_window),
    "softmax": _softmax, "log_softmax": _log_softmax, "layer_norm": _layer_norm, "group_norm": _group_norm,
    "rms_norm": _rms_norm,
}

def _sums(func, args, kwargs, out):
    return _magnitude(func, args, kwargs)


def _averages(length):
    return lambda func, args, kwargs, out: _magnitude(func, args, kwargs) * length(args, kwargs, out)


def _partial_products(func, args, kwargs, out):
    return func(args[0].abs().clamp(min=1.0), *args[1:], **kwargs)


def _squares_over(x, dims, keepdim):
    """The partial sums a mean and a variance over `dims` pass through: sum|x|, sum x^2."""
    a = x.abs()
    n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    return n * torch.maximum(a.mean(dim=dims, keepdim=keepdim), (a * a).mean(dim=dims, keepdim=keepdim))


def _variance_sums(func, args, kwargs, out):
    x, dim = args[0], kwargs.get("dim")
    dims = tuple(range(x.dim())) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    return _squares_over(x, dims, kwargs.get("keepdim", False))


def _norm_sums(func, args, kwargs, out):
    x = args[0]
    return _squares_over(x, tuple(range(x.dim() - len(args[1]), x.dim())), True)


def _group_sums(func, args, kwargs, out):
    x, groups = args[0], args[1]
    grouped = x.reshape(x.shape[0], groups, -1)
    return _squares_over(grouped, (2,), True).expand(grouped.shape).reshape(x.shape)


def _shifted(func, args, kwargs, out):
    x, dim = args[0], _dim_of(args, kwargs)
    return (x - x.amax(dim=dim, keepdim=True)).abs()


def _shifted_reduced(func, args, kwargs, out):
    x, dim = args[0], _dim_of(args, kwargs)
    return (x.amax(dim=dim, keepdim=True) - x).amax(dim=dim, keepdim=kwargs.get("keepdim", False))


def _fused(combine):
    """addcmul / addcdiv, input + value * (t1 op t2): a decomposition may form t1 op t2 or
    value * t1 first, and either may overflow where the result does not."""
    def rule(func, args, kwargs, out):
        t1, t2 = args[1], args[2]
        value = abs(float(kwargs.get("value", 1.0)))
        return torch.maximum(combine(t1, t2).abs(), value * t1.abs())
    return rule


# name -> the largest magnitude a dtype computation passes through on its way to each result
# element (partial sums and products, shifted exponents); an op not listed: its result.
PASSES_THROUGH = {
    **{name: _sums for name in ("sum", "cumsum", "mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "addbmm",
                                "einsum", "conv1d", "conv2d")},
    "mean": _averages(_reduced), "avg_pool2d": _averages(_window), "adaptive_avg_pool2d": _averages(_window),
    "interpolate": _averages(_window), "prod": _partial_products, "cumprod": _partial_products,
    "var": _variance_sums, "std": _variance_sums, "layer_norm": _norm_sums, "rms_norm": _norm_sums,
    "group_norm": _group_sums, "softmax": _shifted, "log_softmax": _shifted, "logcumsumexp": _shifted,
    "logsumexp": _shifted_reduced, "addcdiv": _fused(torch.div), "addcmul": _fused(torch.mul),
}
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
ARG_EXTREMES = {"argmax": 1.0, "argmin": -1.0}
STEPS = ("floor", "ceil", "round", "trunc", "to", "floor_divide")   # piecewise constant: a decision at each step
JUMPS = ("remainder", "fmod")       # continuous but for a jump by the divisor where x / y is whole


def op_name(func) -> str:
    """'add' for torch.add, Tensor.add_ and Tensor.__add__."""
    name = getattr(func, "__name__", str(func))
    return name.strip("_") if name.startswith("__") else name.rstrip("_")


@dataclasses.dataclass
class _Call:
    func: object
    name: str
    args: tuple
    kwargs: dict
    result: torch.Tensor     # the live result (an in-place op's result is its input)
    value: torch.Tensor      # a copy taken when the call returned


class _Run(TorchFunctionMode):
    """Records every tensor-returning call of one float64 run; `after(index, call)` may
    change a result in place (inject rounding, flip a decision)."""

    def __init__(self, after=None):
        super().__init__()
        self.calls: list = []
        self.after = after

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if isinstance(result, torch.Tensor):
            call = _Call(func, op_name(func), args, kwargs, result, result)
            if self.after is not None:
                self.after(len(self.calls), call)
            call.value = result.detach().clone()
            self.calls.append(call)
        return result


@dataclasses.dataclass
class Carried:
    """Allowances of one program, per output and per input's final state (float64 tensors
    of their shapes; zero for integer and boolean results)."""

    outputs: list
    inputs: list
    sensitivity: list            # the inputs' own precision, per output
    input_sensitivity: list      # ... per input's final state
    unstable: list               # per output: bool mask of unstable discrete elements, or None
    by_op: dict                  # op -> largest allowance it adds to an output, in ulps
    overflow: list = dataclasses.field(default_factory=list)        # per output: bool mask (_may_overflow)
    input_overflow: list = dataclasses.field(default_factory=list)  # ... per input's final state


def _delta(a, b) -> torch.Tensor:
    """|a - b| in float64; NaN/Inf where the two agree count as 0, where not as inf."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return torch.zeros(b.shape if isinstance(b, torch.Tensor) else (), dtype=torch.float64)
    if not b.dtype.is_floating_point:
        return (a != b).double() * math.inf
    d = (a.double() - b.double()).abs()
    return torch.where(same_bits(a, b) | (a == b), torch.zeros_like(d), d.nan_to_num(nan=math.inf))


class _Program:
    """One program and its float64 inputs, rerun as often as the allowance needs."""

    def __init__(self, program, inputs):
        self.program = program
        self.inputs = [x.detach() for x in inputs]

    def run(self, after=None, scale_inputs=None):
        dense = [x.clone() for x in self.inputs]
        if scale_inputs is not None:
            dense = [x * s if x.dtype.is_floating_point else x for x, s in zip(dense, scale_inputs)]
        mode = _Run(after)
        with mode:
            outputs = tuple(self.program(*dense))
        return mode.calls, [o.detach().clone() for o in outputs], dense


def carried(program, inputs, dtype: torch.dtype, *, seed: int = 0) -> Carried:
    """The rounding allowance of `program` on float64 `inputs` for a computation in `dtype`
    (see the module docstring). Integer dtypes get zero everywhere."""
    runner = _Program(program, inputs)
    calls, outputs, finals = runner.run()
    if not dtype.is_floating_point:
        zeros = [torch.zeros(o.shape, dtype=torch.float64) for o in outputs]
        izeros = [torch.zeros(f.shape, dtype=torch.float64) for f in finals]
        return Carried(zeros, izeros, zeros, izeros, [None] * len(outputs), {})
    gen = torch.Generator().manual_seed(seed)
    eps = torch.finfo(dtype).eps
    node, by_op = _node_allowances(runner, calls, outputs, finals, eps, gen, dtype)
    sens, input_sens = _sensitivity(runner, outputs, finals, eps, gen)
    overflow, input_overflow, overflow_fed = _may_overflow(runner, calls, outputs, finals, dtype)
    unstable_calls = _unstable_decisions(calls, node["calls"], dtype, overflow_fed)
    flipped_out, flipped_in, unstable = _flip(runner, calls, outputs, finals, unstable_calls)
    probed = _probe(runner, calls, outputs, eps, gen, dtype)
    unstable = [u if u is None else u | (a > 0) | p | o
                for u, a, p, o in zip(unstable, node["outputs"], probed, overflow)]
    out_allow = [torch.zeros_like(a) if u is not None else a + f
                 for a, f, u in zip(node["outputs"], flipped_out, unstable)]
    in_allow = [a + f for a, f in zip(node["inputs"], flipped_in)]
    return Carried(out_allow, in_allow, sens, input_sens, unstable, by_op, overflow, input_overflow)


def _node_allowances(runner, calls, outputs, finals, eps, gen, dtype):
    """Per call, output and input: the summed movement when each rounding node moves."""
    total = {"calls": [torch.zeros(c.value.shape, dtype=torch.float64) for c in calls],
             "outputs": [torch.zeros(o.shape, dtype=torch.float64) for o in outputs],
             "inputs": [torch.zeros(f.shape, dtype=torch.float64) for f in finals]}
    by_op: dict = {}
    for index, call in enumerate(calls):
        rule = ROUNDING.get(call.name)
        if rule is None or not call.value.dtype.is_floating_point:
            continue
        moved = _moved_by_node(runner, calls, outputs, finals, index, rule, eps, gen)
        for key in total:
            total[key] = [t + m for t, m in zip(total[key], moved[key])]
        ulps = [float(m.max() / scale_ulp(o.double(), dtype)) for m, o in zip(moved["outputs"], outputs)
                if o.dtype.is_floating_point and m.numel()]
        by_op[call.name] = max([by_op.get(call.name, 0.0), *ulps])
    return total, by_op


def _moved_by_node(runner, calls, outputs, finals, index, rule, eps, gen):
    moved = {"calls": [torch.zeros(c.value.shape, dtype=torch.float64) for c in calls],
             "outputs": [torch.zeros(o.shape, dtype=torch.float64) for o in outputs],
             "inputs": [torch.zeros(f.shape, dtype=torch.float64) for f in finals]}
    for _ in range(SAMPLES):
        def inject(i, call):
            if i != index:
                return
            sign = torch.randint(0, 2, call.result.shape, generator=gen, dtype=torch.float64) * 2 - 1
            _nudge(call.result, sign * _local(rule, call, eps))

        got_calls, got_out, got_in = runner.run(inject)
        _accumulate_max(moved["calls"], [c.value for c in got_calls], [c.value for c in calls])
        _accumulate_max(moved["outputs"], got_out, outputs)
        _accumulate_max(moved["inputs"], got_in, finals)
    return moved


def _nudge(result: torch.Tensor, delta: torch.Tensor) -> None:
    """Move a result in place; one whose elements share memory (an expanded view) stays put."""
    try:
        result.add_(delta.to(result.dtype))
    except RuntimeError:
        pass


def _local(rule, call, eps) -> torch.Tensor:
    """A node's local allowance, shaped like its result. A rule that cannot read this call's
    arguments (an op spelled another way) allows nothing rather than failing the case."""
    try:
        with torch.no_grad():
            local = rule(call.func, call.args, call.kwargs, call.result, eps)
        return torch.as_tensor(local, dtype=torch.float64).nan_to_num(nan=0.0, posinf=0.0).expand(call.result.shape)
    except (TypeError, ValueError, IndexError, KeyError, RuntimeError):
        return torch.zeros(call.result.shape, dtype=torch.float64)


def _may_overflow(runner, calls, outputs, finals, dtype):
    """(per output, per final input, per call) bool masks of the elements fed by a node that
    works at the dtype's overflow scale: its float64 result, or a value it passes through on
    the way (PASSES_THROUGH: partial sums and products, shifted exponents), reaches the
    dtype's max. In the dtype such a node gives +-Inf or NaN in some orders, and what it
    feeds may then be any value: non-finite, or finite where an op maps those to numbers
    (x / Inf = 0 in a normalisation whose variance overflows, sign(NaN) = 0), and a decision
    on it (a comparison of a sum that overflows) may go either way. Found by one rerun with
    those elements set to NaN: an element that differs from the clean run is fed."""
    top = torch.finfo(dtype).max

    def poison(i, call):
        if call.result.dtype.is_floating_point:
            reach = _at_overflow_scale(call, top)
            if bool(reach.any()):
                _nudge(call.result, torch.where(reach, math.nan, 0.0))

    poisoned, got_out, got_in = runner.run(poison)
    fed = [_newly_nan(p.value, c.value) for p, c in zip(poisoned, calls)]
    return ([_delta(g, o) > 0 for g, o in zip(got_out, outputs)],
            [_delta(g, f) > 0 for g, f in zip(got_in, finals)], fed)


def _newly_nan(poisoned: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    if not poisoned.dtype.is_floating_point or poisoned.shape != clean.shape:
        return torch.zeros(clean.shape, dtype=torch.bool)
    return torch.isnan(poisoned) & ~torch.isnan(clean)


def _at_overflow_scale(call, top) -> torch.Tensor:
    magnitude = call.result.detach().double().abs()
    reach = ~(magnitude < top)                  # beyond max, Inf or NaN in float64 already
    rule = PASSES_THROUGH.get(call.name)
    if rule is not None:
        try:
            with torch.no_grad():
                passed = torch.as_tensor(rule(call.func, call.args, call.kwargs, call.result), dtype=torch.float64)
            reach = reach | (passed >= top).expand(reach.shape)
        except (TypeError, ValueError, IndexError, KeyError, RuntimeError):
            pass
    return reach


def _probe(runner, calls, outputs, eps, gen, dtype):
    """Discrete output elements that change when every rounding node moves at once by
    margin x its allowance (random signs, PROBES runs): decisions no rule above names
    (sort, topk, max with dim, remainder) are unstable where a probe changes them."""
    changed = [torch.zeros(o.shape, dtype=torch.bool) for o in outputs]
    scale = margin(dtype, FEW_ELEMENTS + 1)
    if not any(not o.dtype.is_floating_point for o in outputs):
        return changed

    def inject(i, call):
        rule = ROUNDING.get(call.name)
        if rule is None or not call.result.dtype.is_floating_point:
            return
        sign = torch.randint(0, 2, call.result.shape, generator=gen, dtype=torch.float64) * 2 - 1
        _nudge(call.result, scale * sign * _local(rule, call, eps))

    for _ in range(PROBES):
        _, got, _ = runner.run(inject)
        changed = [c | ((_delta(g, o) > 0) if not o.dtype.is_floating_point else c)
                   for c, g, o in zip(changed, got, outputs)]
    return changed


def _accumulate_max(into, got, clean):
    for i, (g, c) in enumerate(zip(got, clean)):
        if i < len(into) and g.shape == c.shape:
            into[i] = torch.maximum(into[i], _delta(g, c))


def _sensitivity(runner, outputs, finals, eps, gen):
    """Movement of outputs and final inputs when each float input moves by up to 1 ulp."""
    scales = []
    for x in runner.inputs:
        noise = torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1
        scales.append(1 + eps * noise)
    _, got_out, got_in = runner.run(scale_inputs=scales)
    return ([_delta(g, o) for g, o in zip(got_out, outputs)], [_delta(g, f) for g, f in zip(got_in, finals)])


def _unstable_decisions(calls, allowances, dtype, overflow_fed) -> dict:
    """call index -> (mask of elements rounding may flip, the flipped result).
    overflow_fed: per call, the elements fed by a node at the dtype's overflow scale; a
    decision on them may go either way too."""
    index_of: dict = {}

    def of_producer(per_call: list, default: torch.Tensor):
        """x -> per_call's entry for the call that produced x (default: an input or a scalar)."""
        def lookup(x):
            i = index_of.get(id(x)) if isinstance(x, torch.Tensor) else None
            return per_call[i] if i is not None and i < len(per_call) else default
        return lookup

    # a computed value may be off by the absolute tolerance (an output may: exp(x) - 1 for
    # expm1 loses a subnormal x), and a decision on it may go either way within it
    atol = TOLERANCES[dtype][1]
    floored = [torch.where(a > 0, a.clamp(min=atol), a) for a in allowances]
    allowance = of_producer(floored, torch.zeros((), dtype=torch.float64))
    overflowed = of_producer(overflow_fed, torch.zeros((), dtype=torch.bool))

    found = {}
    for i, call in enumerate(calls):
        index_of[id(call.result)] = i
        if call.name in COMPARISONS:
            found[i] = _unstable_comparison(call, allowance, overflowed, dtype)
        elif call.name in ARG_EXTREMES:
            found[i] = _unstable_extreme(call, allowance, dtype)
        elif call.name in STEPS:
            found[i] = _unstable_step(call, allowance, dtype)
        elif call.name in JUMPS:
            found[i] = _unstable_jump(call, allowance, dtype)
    return {i: v for i, v in found.items() if v is not None and bool(v[0].any())}


def _operand(x):
    return x.double() if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)


def _unstable_comparison(call, allowance, overflowed, dtype):
    a, b = call.args[0], call.args[1]
    if not any(isinstance(x, torch.Tensor) and x.dtype.is_floating_point for x in (a, b)):
        return None
    room = margin(dtype, call.value.numel()) * (allowance(a) + allowance(b))
    gap = (_operand(a) - _operand(b)).abs()
    mask = (((gap <= room) & (room > 0)) | overflowed(a) | overflowed(b)).expand(call.value.shape)
    return mask, torch.where(mask, ~call.value, call.value)


def _unstable_extreme(call, allowance, dtype):
    x = call.args[0]
    if not x.dtype.is_floating_point or x.numel() < 2:
        return None
    dim = call.kwargs.get("dim", call.args[1] if len(call.args) > 1 else None)
    signed = ARG_EXTREMES[call.name] * x.double()
    room = allowance(x).expand(x.shape)
    if dim is None:
        signed, room = signed.reshape(-1), room.reshape(-1)
        dim = 0
    if signed.shape[dim] < 2:
        return None
    top = signed.topk(2, dim=dim)
    gap = top.values.narrow(dim, 0, 1) - top.values.narrow(dim, 1, 1)
    spread = room.amax(dim=dim, keepdim=True) * 2 * margin(dtype, call.value.numel())
    mask = (gap <= spread) & (spread > 0) & ~signed.isnan().any(dim=dim, keepdim=True)
    mask, second = mask.reshape(call.value.shape), top.indices.narrow(dim, 1, 1).reshape(call.value.shape)
    return mask, torch.where(mask, second, call.value)


def _unstable_step(call, allowance, dtype):
    """A step function (floor, round, a cast to integers or to a coarser float) whose input
    may move across a step: the elements where it may, and the neighbouring step."""
    moved = _moved_both_ways(call, allowance, dtype)
    if moved is None or not _coarsens(call.args[0].dtype, call.value.dtype):
        return None
    x, room, up, down = moved
    up_moves, down_moves = ~same_bits(up, call.value), ~same_bits(down, call.value)
    mask = (up_moves | down_moves) & torch.isfinite(x)
    return mask, torch.where(mask, torch.where(up_moves, up, down), call.value)


def _unstable_jump(call, allowance, dtype):
    """remainder/fmod whose dividend may move across a multiple of the divisor, where the
    result jumps by the divisor: those elements, and the value just across the jump (the
    moved result less the move: the slope is 1 on either side)."""
    moved = _moved_both_ways(call, allowance, dtype)
    if moved is None:
        return None
    x, room, up, down = moved
    value = call.value.double()
    jumps_up, jumps_down = ((moved.double() - value).abs() > 2 * room for moved in (up, down))
    mask = (jumps_up | jumps_down) & torch.isfinite(x)
    across = torch.where(jumps_up, up - room, down + room).to(call.value.dtype)
    return mask, torch.where(mask, across, call.value)


def _moved_both_ways(call, allowance, dtype):
    """(x, room, result at x + room, result at x - room) for a call on a float first operand
    x that may move by room = margin x its allowance; None where it cannot move."""
    x = call.args[0]
    if not (isinstance(x, torch.Tensor) and x.dtype.is_floating_point):
        return None
    room = margin(dtype, call.value.numel()) * allowance(x).expand(x.shape)
    if not bool((room > 0).any()):
        return None
    with torch.no_grad():
        up, down = (call.func(x + sign * room, *call.args[1:], **call.kwargs) for sign in (1.0, -1.0))
    return x, room, up, down


def _coarsens(source: torch.dtype, result: torch.dtype) -> bool:
    if not result.is_floating_point:
        return True
    return source == result or torch.finfo(result).eps > torch.finfo(source).eps


def _flip(runner, calls, outputs, finals, unstable_calls):
    """Rerun with every unstable decision flipped: how far that moves each float output
    and final input, and which discrete output elements change (unstable)."""
    if not unstable_calls:
        zeros = [torch.zeros(o.shape, dtype=torch.float64) for o in outputs]
        return zeros, [torch.zeros(f.shape, dtype=torch.float64) for f in finals], [
            torch.zeros(o.shape, dtype=torch.bool) if not o.dtype.is_floating_point else None for o in outputs]

    def flip(i, call):
        if i in unstable_calls:
            call.result.copy_(unstable_calls[i][1])

    _, got_out, got_in = runner.run(flip)
    out_moved, unstable = [], []
    for g, o in zip(got_out, outputs):
        d = _delta(g, o)
        floating = o.dtype.is_floating_point
        out_moved.append(d if floating else torch.zeros_like(d))
        unstable.append(None if floating else d > 0)
    return out_moved, [_delta(g, f) if f.dtype.is_floating_point else torch.zeros(f.shape, dtype=torch.float64)
                       for g, f in zip(got_in, finals)], unstable
