"""Reductions over one or more dims, with and without keepdim."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import BOOL, INT, INTS, optional


# Without "dim" a reduction is over everything (keepdim then has no effect).
MULTI_DIM = {"dim": optional(INTS), "keepdim": optional(BOOL)}
ONE_DIM = {"dim": optional(INT), "keepdim": optional(BOOL)}
VAR_LIKE = {"dim": optional(INTS), "correction": INT, "keepdim": BOOL}


def _build_multi_dim(b):
    x = b.value()
    dims = b.reduction_dims(len(b.shape(x)))
    attrs = {"keepdim": b.draw_bool()}
    if dims is not None:
        attrs = {"dim": dims, **attrs}
    return [x], attrs


def _emit_multi(fn):
    def emit(args, attrs):
        if "dim" not in attrs:
            return call(fn, args)
        return call(fn, args, dim=tuple(attrs["dim"]), keepdim=attrs.get("keepdim", False))
    return emit


for _name, _fn, _dt, _rule in [("sum", "torch.sum", "any", "reduction"), ("mean", "torch.mean", "float", "reduction"),
                               ("amax", "torch.amax", "any", "exact"), ("amin", "torch.amin", "any", "exact")]:
    register(OpSpec(_name, "reduction", _emit_multi(_fn), _build_multi_dim, rounding=_rule, dtypes=_dt,
                    signature=MULTI_DIM))


def _build_one_dim(b):
    x = b.value()
    rank = len(b.shape(x))
    if rank == 0 or b.draw_bool(0.2):
        return [x], {}
    return [x], {"dim": b.draw_dim(rank), "keepdim": b.draw_bool()}


def _emit_one(fn):
    def emit(args, attrs):
        if "dim" not in attrs:
            return call(fn, args)
        return call(fn, args, dim=attrs["dim"], keepdim=attrs["keepdim"])
    return emit


register(OpSpec("argmax", "reduction", _emit_one("torch.argmax"), _build_one_dim, rounding="decision", dtypes="any",
                result_domain="index", signature=ONE_DIM))
register(OpSpec("prod", "reduction", _emit_one("torch.prod"), _build_one_dim, rounding="reduction", dtypes="any",
                signature=ONE_DIM))


def _build_var(b):
    x = b.value()
    shape = b.shape(x)
    dims = b.reduction_dims(len(shape))
    reduced = 1
    for d in (range(len(shape)) if dims is None else dims):
        reduced *= shape[d]
    # A correction of at least the elements reduced divides by zero or less: eager's NaN or
    # negative variance is not a finding.
    correction = b.draw_int(0, min(reduced - 1, 2))
    attrs = {"correction": correction, "keepdim": b.draw_bool()}
    if dims is not None:
        attrs["dim"] = dims
    return [x], attrs


def _emit_var_like(fn):
    def emit(args, attrs):
        kwargs = {"correction": attrs["correction"], "keepdim": attrs["keepdim"]}
        if "dim" in attrs:
            kwargs = {"dim": tuple(attrs["dim"]), **kwargs}
        return call(fn, args, **kwargs)
    return emit


register(OpSpec("var", "reduction", _emit_var_like("torch.var"), _build_var, rounding="reduction", result_domain="real",
                signature=VAR_LIKE))


register(OpSpec("std", "reduction", _emit_var_like("torch.std"), _build_var, rounding="reduction", signature=VAR_LIKE,
                kernel="var"))
register(OpSpec("argmin", "reduction", _emit_one("torch.argmin"), _build_one_dim, rounding="decision", dtypes="any",
                result_domain="index", signature=ONE_DIM))


def _build_logsumexp(b):
    x = b.value(min_rank=1)
    dims = b.reduction_dims(len(b.shape(x))) or list(range(len(b.shape(x))))
    return [x], {"dim": dims, "keepdim": b.draw_bool()}


register(OpSpec("logsumexp", "reduction",
                lambda a, k: call("torch.logsumexp", a, dim=tuple(k["dim"]), keepdim=k["keepdim"]),
                _build_logsumexp, rounding="reduction", signature={"dim": INTS, "keepdim": BOOL}))


def _build_max_dim(b):
    x = b.value(min_rank=1)
    return [x], {"dim": b.draw_dim(len(b.shape(x))), "keepdim": b.draw_bool()}


register(OpSpec("max_dim", "reduction",
                lambda a, k: f"{call('torch.max', a, dim=k['dim'], keepdim=k['keepdim'])}.values",
                _build_max_dim, rounding="exact", dtypes="any", result_domain="same",
                signature={"dim": INT, "keepdim": BOOL}))


# -- edges. Read from torch's docs (NaN propagation of amax and argmax, var's correction),
# torch/_refs (var with a correction of at least the count, a reduction over no dim) and
# Inductor's lowerings (lowering.py: var_mean_sum_ or welford; a reduction of one element or of
# a 0-d operand; sum and prod of integers promoted; logsumexp subtracts the max, which inf breaks).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, values_of  # noqa: E402

# The reduced extent: everything, one element, a size-1 dim; 0-d, broadcast and permuted operands.
EXTENT_EDGES = (ArgShape("no dim"), ArgShape("one element reduced"), ArgShape("dim of size 1"), ArgShape("keepdim"),
                Form(0, "0-d"), Form(0, "stride 0"), Form(0, "permuted"))
# Which index wins: NaN first, the first of tied values.
ARG_EXTREME_EDGES = (ArgShape("no dim"), ArgShape("one element reduced"), ArgShape("dim of size 1"),
                     ArgShape("keepdim"), Form(0, "0-d"), *values_of(0, "nan", "duplicate", "-0"))
# var of one element, and a correction of at least the count (a divisor <= 0), are eager's NaN or inf.
VAR_EDGES = (ArgShape("one element reduced"), ArgShape("correction >= count"), ArgValue("correction", 0),
             ArgShape("no dim"), ArgShape("dim of size 1"), Form(0, "0-d"), Form(0, "stride 0"),
             *values_of(0, "inf", "nan", "max"))
declare_edges({
    "sum": (*EXTENT_EDGES, *values_of(0, "inf", "-inf", "nan", "max")),
    "mean": (*EXTENT_EDGES, *values_of(0, "inf", "-inf", "nan", "max")),
    "amax": (*EXTENT_EDGES, *values_of(0, "nan", "-inf", "-0", "int min")),
    "amin": (*EXTENT_EDGES, *values_of(0, "nan", "inf", "-0", "max")),
    "argmax": (*ARG_EXTREME_EDGES, *values_of(0, "inf")),
    "argmin": (*ARG_EXTREME_EDGES, *values_of(0, "-inf")),
    "prod": (ArgShape("no dim"), ArgShape("one element reduced"), ArgShape("dim of size 1"), Form(0, "0-d"),
             *values_of(0, "+0", "inf", "nan", "max", "negative")),
    "var": VAR_EDGES,
    "std": VAR_EDGES,
    "logsumexp": (*values_of(0, "inf", "-inf", "nan", "exp overflow", "exp underflow"),
                  ArgShape("one element reduced"), ArgShape("dim of size 1")),
    "max_dim": (*values_of(0, "nan", "-0", "-inf", "duplicate"), ArgShape("dim of size 1"), ArgShape("keepdim"),
                Form(0, "permuted")),
})
