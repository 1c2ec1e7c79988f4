"""The judge's rounding and decision rules, per torch function: how far one dtype computation
of it may be off (ROUNDING), what magnitudes it passes through on the way (PASSES_THROUGH),
which of its results are decisions rounding may flip (COMPARISONS, ARG_EXTREMES, STEPS,
JUMPS), and which return zeros whose sign is a decision too (SIGN_UNSPECIFIED). Functions
are named as `op_name` spells them ('add' for torch.add, Tensor.add_ and Tensor.__add__).

Every function the judge knows has one rule, named in FUNCTIONS_BY_RULE (the names are the
closed set an op declares as `OpSpec.rounding`, torchsim_diff/ops/rule_names.py); those
that round nothing are listed too (EXACT), so that a function nobody classified shows up
(tests/test_op_entry.py) instead of silently rounding nothing.

The allowances a rule gives are about one ulp for pointwise ops, sqrt(n)+2 ulps of the
magnitude for a reduction of length n, up to n/2 where its addends are equal
(docs/oracle.md, "The oracle rule"); carried_rounding carries them through a program.

Imports only the standard library and torch: reproducer bundles ship it.
"""
from __future__ import annotations

import math

import torch


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
    term = (offset + normalised).expand(grouped.shape).reshape(x.shape)
    if weight is not None:      # each channel's own weight: one huge weight says nothing of the others
        term = term * weight.abs().reshape(1, -1, *[1] * (x.dim() - 2))
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


# name -> local allowance (float64, broadcastable to the result) of one dtype computation, one
# table per rule (FUNCTIONS_BY_RULE, below). A function in EXACT rounds nothing (views,
# selections, max/min, sign, abs, neg, relu, where, clamps, pooling by max); step functions
# (floor, round, casts) are decisions, below.
POINTWISE = {name: _pointwise for name in (
    "add", "sub", "mul", "div", "true_divide", "sqrt", "rsqrt", "reciprocal", "exp", "expm1", "log", "log1p",
    "tanh", "sigmoid", "gelu", "silu", "elu", "hardswish", "leaky_relu", "erf", "sin", "cos", "atan2", "pow",
    "addcmul", "addcdiv", "lerp")}
REDUCTIONS = {
    "sum": _sum_of(_reduced_rows), "mean": _sum_of(_reduced_rows), "cumsum": _sum_of(_running_rows),
    "prod": _product(_reduced), "cumprod": _product(_along), "var": _var, "std": _std,
    "logsumexp": _log_sum(_reduced), "logcumsumexp": _log_sum(_along),
}
CONTRACTIONS = {
    "mm": _linear(_inner(0)), "bmm": _linear(_inner(0)), "matmul": _linear(_inner(0)), "linear": _linear(_inner(0)),
    "addmm": _linear(_inner(1)), "baddbmm": _linear(_inner(1)),
    "addbmm": _linear(lambda args, kwargs, out: args[1].shape[0] * args[1].shape[-1]),
    "einsum": _linear(_einsum_length), "conv1d": _linear(_conv_window), "conv2d": _linear(_conv_window),
    "avg_pool2d": _linear(_window), "adaptive_avg_pool2d": _linear(_window), "interpolate": _linear(_window),
}
NORMALIZATIONS = {
    "softmax": _softmax, "log_softmax": _log_softmax, "layer_norm": _layer_norm, "group_norm": _group_norm,
    "rms_norm": _rms_norm,
}
ROUNDING = {**POINTWISE, **REDUCTIONS, **CONTRACTIONS, **NORMALIZATIONS}


def _sums(func, args, kwargs, out):
    """The sum of the magnitudes; with an alpha (addmm, baddbmm, addbmm) also before alpha
    scales it: alpha * (A @ B) overflows where the scaled result does not."""
    scaled = _magnitude(func, args, kwargs).abs()
    if kwargs.get("alpha", 1.0) == 1.0:
        return scaled
    return torch.maximum(scaled, _magnitude(func, args, {**kwargs, "alpha": 1.0}))


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
    """The mean's and the variance's partial sums, and what the affine passes through: eager
    and Inductor compute x * (w * rstd) + (b - mean * w * rstd), whose two products overflow
    where the result does not (x = -16382 in a group of spread 0.86, w = 8.5e37: 1.6e42 on the
    way to 1.1e38)."""
    x, groups = args[0], args[1]
    grouped = x.reshape(x.shape[0], groups, -1)
    sums = _squares_over(grouped, (2,), True).expand(grouped.shape)
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
    rstd = torch.rsqrt(grouped.var(dim=2, correction=0, keepdim=True) + eps)
    products = torch.maximum(grouped.abs(), grouped.mean(dim=2, keepdim=True).abs()) * rstd
    if weight is not None:
        products = products.reshape(x.shape) * weight.abs().reshape(1, -1, *[1] * (x.dim() - 2))
    return torch.maximum(sums.reshape(x.shape), products.reshape(x.shape))


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

# Functions whose zeros have no specified sign: a zero they return may be +0.0 or -0.0, and what
# turns that sign into another answer (atan2, copysign, signbit, 1/x, x/0, pow with a negative
# exponent) may give either answer. Selections: eager passes x through where x is a zero
# (relu(-0.0), clamp(-0.0, min=0) and hardtanh(-0.0, 0, 1) are -0.0), while where(x > 0, x, 0),
# Inductor's maximum(0, x) and torch-mlir give +0.0, and x * (x > 0) gives -0.0 for every x < 0;
# between zeros of both signs, maximum/minimum return one operand (eager's scalar loop the
# first, its vector loop the second), amax, max along a dim, max pooling and cummax one of the
# tied elements (eager and Inductor pick differently), sort and topk keep or reorder equal keys.
# Decompositions: elu is expm1(x) in eager (-0.0 at x = -0.0) and exp(x) - 1 (+0.0) in
# torch-mlir; hardswish(-3) is x * relu6(x + 3) / 6 = -0.0 in eager, +0.0 as a select;
# lerp(-0.0, -0.0, w) is -0.0 in eager, +0.0 as start + w * (end - start). Sums: eager and
# Inductor start from +0.0, so a sum of -0.0 addends is +0.0 there and -0.0 in IEEE order or as
# a copy of a single addend. Every zero such a function returns is flipped like an unstable
# decision (carried_rounding). Functions that define a zero's sign (IEEE 754: neg, abs, mul,
# div, add and sub, sqrt, floor, round; prod, a product) are not listed.
SELECTIONS_OF_UNSPECIFIED_SIGN = (
    "relu", "relu6", "hardtanh", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "fmax", "fmin",
    "max", "min", "amax", "amin", "max_pool1d", "max_pool2d", "cummax", "cummin", "sort", "topk",
)
DECOMPOSITIONS_OF_UNSPECIFIED_SIGN = ("elu", "hardswish", "lerp")
SUMS_OF_UNSPECIFIED_SIGN = (
    "sum", "mean", "cumsum", "mm", "bmm", "matmul", "linear", "addmm", "baddbmm", "addbmm", "einsum", "conv1d",
    "conv2d", "avg_pool2d", "adaptive_avg_pool2d", "interpolate",
)
SIGN_UNSPECIFIED = SELECTIONS_OF_UNSPECIFIED_SIGN + DECOMPOSITIONS_OF_UNSPECIFIED_SIGN + SUMS_OF_UNSPECIFIED_SIGN


# Functions that round nothing: views and copies, selections and gathers, orderings (an index
# whose order rounding may flip, argsort's, is found by carried_rounding's probe), max/min,
# abs, neg, sign, relu, where, clamps, pooling by max, bitwise and logical ops, fills. (sort,
# topk, cummax and max/min along a dim are recorded by the values they return.)
EXACT = (
    "abs", "neg", "sign", "relu", "hardtanh", "clamp", "where", "maximum", "minimum", "max", "min", "amax", "amin",
    "max_pool1d", "max_pool2d", "argsort", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "logical_and", "logical_or", "logical_not", "nan_to_num", "masked_fill", "masked_scatter",
    "transpose", "permute", "reshape", "view", "getitem", "narrow", "select", "expand", "unsqueeze", "squeeze",
    "contiguous", "clone", "copy", "repeat", "cat", "stack", "constant_pad_nd", "flip", "roll", "tril", "triu",
    "gather", "index_select", "embedding", "index_copy", "scatter",
    "relu6", "clamp_min", "clamp_max", "fmax", "fmin", "cummax", "cummin", "sort", "topk",
)
# Functions that round where the judge has no rule for them yet: allowed nothing, as EXACT's
# are (scatter and index accumulations; index_put with accumulate=True).
UNMODELLED = ("scatter_add", "scatter_reduce", "index_add", "index_reduce", "index_put")

# rule name (torchsim_diff/ops/rule_names.py) -> the functions it covers
FUNCTIONS_BY_RULE = {
    "exact": EXACT,
    "pointwise": tuple(POINTWISE),
    "reduction": tuple(REDUCTIONS),
    "contraction": tuple(CONTRACTIONS),
    "normalization": tuple(NORMALIZATIONS),
    "decision": COMPARISONS + tuple(ARG_EXTREMES) + STEPS,
    "jump": JUMPS,
    "unmodelled": UNMODELLED,
}


def rule_of(name: str) -> str | None:
    """The rule covering function `name` (op_name's spelling), or None where no table lists
    it (the judge then allows it nothing)."""
    return next((rule for rule, names in FUNCTIONS_BY_RULE.items() if name in names), None)


def op_name(func) -> str:
    """'add' for torch.add, Tensor.add_ and Tensor.__add__."""
    name = getattr(func, "__name__", str(func))
    return name.strip("_") if name.startswith("__") else name.rstrip("_")
