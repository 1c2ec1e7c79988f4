"""Unary, binary and ternary pointwise ops (operands broadcast), clamps and interpolation."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import NUMBER, one_of, optional, or_none


def unary(name, fn, *, rounding, domain="real", dtypes="float", result_domain="real"):
    def build(b):
        return [b.value(domain=domain)], {}
    register(OpSpec(name, "pointwise", lambda a, k: call(fn, a), build, rounding=rounding, dtypes=dtypes,
                    result_domain=result_domain))


# How a binary op's operands come: same shape, one broadcasting to the other (size-1 or fewer
# dims), one 0-d, one a Python number, or one of another dtype (type promotion); each on
# either side.
OPERAND_FORMS = ("same shape", "right broadcasts", "left broadcasts", "right 0-d", "left 0-d",
                 "right scalar", "left scalar", "right other dtype", "left other dtype")
# torch's functions take a Python number as their second operand; these also as their first
# (a wrapped number: a Python scalar's type promotion). maximum, minimum, atan2 and the logical
# ops take none.
LEFT_SCALAR_OPS = frozenset({"add", "sub", "mul", "div", "pow", "remainder", "floor_divide",
                             "bitwise_and", "bitwise_or", "bitwise_xor"})
NO_SCALAR_OPS = frozenset({"maximum", "minimum", "atan2", "logical_and", "logical_or"})
# Python numbers per value domain: ints and floats, both signs and zero where the domain has
# them, integer exponents (negative too) and fractional ones for pow.
SCALARS = {"real": (-2.5, -1, 0, 0.5, 3), "positive": (0.5, 1, 1.5, 2), "nonzero": (-2, -0.5, 0.5, 3),
           "small": (-1, -0.5, 0, 0.5, 2)}
# The dtype of an "other dtype" operand, per case dtype: the other floats and an integer.
OTHER_DTYPES = {"float32": ("float16", "bfloat16", "int32"), "float16": ("float32", "bfloat16", "int64"),
                "bfloat16": ("float32", "float16", "int32"), "int32": ("int64", "float32"),
                "int64": ("int32", "float32")}


def operand_forms(name: str, domain: str = "real") -> tuple:
    """The forms op `name`'s operands may take (`domain`: its operands', "bool" for logical ops)."""
    sides = () if name in NO_SCALAR_OPS else ("right", "left") if name in LEFT_SCALAR_OPS else ("right",)
    return tuple(f for f in OPERAND_FORMS
                 if (not f.endswith(" scalar") or f.split()[0] in sides)
                 and not (f.endswith(" other dtype") and domain == "bool"))


def _scalar_signature(name: str) -> dict:
    sides = [f.split()[0] for f in operand_forms(name) if f.endswith(" scalar")]
    return {"scalar": optional(NUMBER), "scalar_side": optional(one_of(*sides))} if sides else {}


def _emit_binary(fn: str):
    def emit(args, attrs):
        if "scalar" not in attrs:
            return call(fn, args)
        scalar = repr(attrs["scalar"])
        return call(fn, [scalar, *args] if attrs.get("scalar_side") == "left" else [*args, scalar])
    return emit


def binary(name, fn, *, rounding, lhs="real", rhs="real", dtypes="float", result_domain="real"):
    """An op of two operands in OPERAND_FORMS; an integer-only op (bitwise) meets integer
    Python numbers and integer other dtypes only."""
    integers = dtypes == "int"

    def build(b):
        form = b.draw_choice(operand_forms(name, lhs))
        small_on_left = form.startswith("left")
        full = b.value(domain=rhs if small_on_left else lhs)
        other = lhs if small_on_left else rhs
        if form.endswith("scalar"):
            pool = [v for v in SCALARS[other] if isinstance(v, int) or not integers]
            return [full], {"scalar": b.draw_choice(pool), "scalar_side": form.split()[0]}
        if form == "same shape":
            small = b.value_of_shape(b.shape(full), domain=other)
        elif form.endswith("0-d"):
            small = b.value_of_shape([], domain=other)
        elif form.endswith("other dtype"):
            kinds = [d for d in OTHER_DTYPES[b.dtype] if d.startswith("int") or not integers]
            small = b.new_input(b.shape(full), domain=other, dtype=b.draw_choice(kinds))
        else:
            small = b.broadcasting_to(b.shape(full), domain=other)
        return ([small, full] if small_on_left else [full, small]), {}
    register(OpSpec(name, "pointwise", _emit_binary(fn), build, rounding=rounding, dtypes=dtypes,
                    result_domain=result_domain, signature=_scalar_signature(name)))


for _name, _fn, _dom, _dt, _res, _rule in [
    ("relu", "torch.relu", "real", "any", "real", "exact"),
    ("gelu", "torch.nn.functional.gelu", "real", "float", "real", "pointwise"),
    ("sigmoid", "torch.sigmoid", "real", "float", "positive", "pointwise"),
    ("silu", "torch.nn.functional.silu", "real", "float", "real", "pointwise"),
    ("tanh", "torch.tanh", "real", "float", "real", "pointwise"),
    ("exp", "torch.exp", "real", "float", "positive", "pointwise"),
    ("log", "torch.log", "positive", "float", "real", "pointwise"),
    ("sqrt", "torch.sqrt", "positive", "float", "positive", "pointwise"),
    ("rsqrt", "torch.rsqrt", "positive", "float", "positive", "pointwise"),
    ("abs", "torch.abs", "real", "any", "real", "exact"),
    ("neg", "torch.neg", "real", "any", "real", "exact"),
    ("sign", "torch.sign", "real", "any", "real", "exact"),
    ("erf", "torch.erf", "real", "float", "real", "pointwise"),
    ("sin", "torch.sin", "real", "float", "real", "pointwise"),
    ("cos", "torch.cos", "real", "float", "real", "pointwise"),
    ("reciprocal", "torch.reciprocal", "nonzero", "float", "nonzero", "pointwise"),
    ("floor", "torch.floor", "real", "float", "real", "decision"),
    ("round", "torch.round", "real", "float", "real", "decision"),
    ("expm1", "torch.expm1", "real", "float", "real", "pointwise"),
    ("log1p", "torch.log1p", "positive", "float", "real", "pointwise"),
    ("hardswish", "torch.nn.functional.hardswish", "real", "float", "real", "pointwise"),
    ("elu", "torch.nn.functional.elu", "real", "float", "real", "pointwise"),
]:
    unary(_name, _fn, rounding=_rule, domain=_dom, dtypes=_dt, result_domain=_res)

for _name, _fn, _lhs, _rhs, _dt, _rule in [
    ("add", "torch.add", "real", "real", "any", "pointwise"),
    ("sub", "torch.sub", "real", "real", "any", "pointwise"),
    ("mul", "torch.mul", "real", "real", "any", "pointwise"),
    ("div", "torch.div", "real", "nonzero", "float", "pointwise"),
    ("maximum", "torch.maximum", "real", "real", "any", "exact"),
    ("minimum", "torch.minimum", "real", "real", "any", "exact"),
    ("pow", "torch.pow", "positive", "small", "float", "pointwise"),
    ("fmod", "torch.fmod", "real", "nonzero", "float", "jump"),
    ("remainder", "torch.remainder", "real", "nonzero", "any", "jump"),
    ("floor_divide", "torch.floor_divide", "real", "nonzero", "any", "decision"),
    ("atan2", "torch.atan2", "real", "real", "float", "pointwise"),
]:
    binary(_name, _fn, rounding=_rule, lhs=_lhs, rhs=_rhs, dtypes=_dt)

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    binary(_name, f"torch.{_name}", rounding="decision", dtypes="any", result_domain="bool")


def _build_where(b):
    x = b.value()
    cond = b.broadcastable_to(b.shape(x), domain="bool")
    form = b.draw_choice(("tensors", "left scalar", "right scalar"))
    if form != "tensors":
        return [cond, x], {"scalar": b.draw_choice(SCALARS["real"]), "scalar_side": form.split()[0]}
    return [cond, x, b.broadcastable_to(b.shape(x))], {}


def _emit_where(args, attrs):
    if "scalar" not in attrs:
        return call("torch.where", args)
    cond, x = args
    scalar = repr(attrs["scalar"])
    return call("torch.where", [cond, scalar, x] if attrs.get("scalar_side") == "left" else [cond, x, scalar])


register(OpSpec("where", "pointwise", _emit_where, _build_where, rounding="exact", dtypes="any",
                signature={"scalar": optional(NUMBER), "scalar_side": optional(one_of("left", "right"))}))


def _bounds(b):
    """(low, high) clamp bounds for the case dtype; either may be None, and low > high
    happens (torch then returns high everywhere)."""
    pool = [-1, 0, 1, 2] if b.dtype.startswith("int") else [-1.5, -0.5, 0.0, 0.25, 1.0]
    low = b.draw_choice(pool) if b.draw_bool(0.8) else None
    high = b.draw_choice(pool) if low is None or b.draw_bool(0.7) else None
    return low, high


def _build_clamp(b):
    low, high = _bounds(b)
    return [b.value()], {"min": low, "max": high}


register(OpSpec("clamp", "pointwise", lambda a, k: call("torch.clamp", a, min=k["min"], max=k["max"]),
                _build_clamp, rounding="exact", dtypes="any",
                signature={"min": or_none(NUMBER), "max": or_none(NUMBER)}))


def _build_clamp_tensor(b):
    x = b.value()
    return [x, b.broadcastable_to(b.shape(x)), b.broadcastable_to(b.shape(x))], {}


register(OpSpec("clamp_tensor", "pointwise", lambda a, k: call("torch.clamp", a), _build_clamp_tensor,
                rounding="exact", dtypes="any", kernel="clamp"))


def _build_hardtanh(b):
    low = b.draw_choice([-1.0, -0.5, 0.0])
    return [b.value()], {"min_val": low, "max_val": low + b.draw_choice([0.5, 1.0, 2.0, 0.0])}


register(OpSpec("hardtanh", "pointwise",
                lambda a, k: call("torch.nn.functional.hardtanh", a, min_val=k["min_val"], max_val=k["max_val"]),
                _build_hardtanh, rounding="exact", signature={"min_val": NUMBER, "max_val": NUMBER}, kernel="clamp"))


def _build_leaky_relu(b):
    return [b.value()], {"negative_slope": b.draw_choice([0.01, 0.2, -0.5, 1.5])}


register(OpSpec("leaky_relu", "pointwise",
                lambda a, k: call("torch.nn.functional.leaky_relu", a, negative_slope=k["negative_slope"]),
                _build_leaky_relu, rounding="pointwise", signature={"negative_slope": NUMBER}))


def _build_lerp(b):
    x = b.value()
    end = b.broadcastable_to(b.shape(x))
    if b.draw_bool():
        return [x, end], {"weight": b.draw_choice([0.0, 0.25, 0.5, 1.0, 1.5])}
    return [x, end, b.broadcastable_to(b.shape(x), domain="small")], {}


def _emit_lerp(args, attrs):
    if "weight" in attrs:
        return call("torch.lerp", args, weight=attrs["weight"])
    return call("torch.lerp", args)


register(OpSpec("lerp", "pointwise", _emit_lerp, _build_lerp, rounding="pointwise",
                signature={"weight": optional(NUMBER)}))


def _build_addc(divisor_domain):
    def build(b):
        x = b.value()
        t1 = b.broadcastable_to(b.shape(x))
        t2 = b.broadcastable_to(b.shape(x), domain=divisor_domain)
        return [x, t1, t2], {"value": b.draw_choice([1.0, 0.5, -2.0])}
    return build


register(OpSpec("addcmul", "pointwise", lambda a, k: call("torch.addcmul", a, value=k["value"]),
                _build_addc("real"), rounding="pointwise", signature={"value": NUMBER}))
register(OpSpec("addcdiv", "pointwise", lambda a, k: call("torch.addcdiv", a, value=k["value"]),
                _build_addc("nonzero"), rounding="pointwise", signature={"value": NUMBER}))


# -- edges. Read from torch's docs, its refs (torch/_refs/__init__.py: where, clamp, lerp's
# weight < 0.5 branch, addcdiv's value, floor_divide and remainder at signed zeros and
# infinities) and Inductor's lowerings (lowering.py: pow's scalar exponents 0.5 / integers / 1,
# fmod, div_mode, clamp as maximum(minimum)), with the IEEE regimes of each function in the
# operand's own dtype (exp's overflow, signed zeros, NaN propagation).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value, values_of  # noqa: E402

UNARY_EDGES = {
    "relu": values_of(0, "nan", "-0", "-inf"),
    "gelu": values_of(0, "nan", "inf", "-inf", "subnormal"),
    "sigmoid": values_of(0, "nan", "inf", "-inf", "-exp overflow", "exp overflow"),
    "silu": values_of(0, "nan", "inf", "-inf", "-exp overflow"),
    "tanh": values_of(0, "nan", "inf", "-inf", "-0", "subnormal"),
    "exp": values_of(0, "nan", "inf", "-inf", "exp overflow", "exp underflow"),
    "log": values_of(0, "+0", "-0", "negative", "subnormal", "inf", "nan", 1.0),
    "sqrt": values_of(0, "-0", "negative", "subnormal", "inf", "nan"),
    "rsqrt": values_of(0, "+0", "-0", "negative", "subnormal", "inf"),
    "abs": values_of(0, "-0", "-inf", "nan", "int min"),
    "neg": values_of(0, "+0", "nan", "int min", "max"),
    "sign": values_of(0, "+0", "-0", "nan", "negative"),
    "erf": values_of(0, "nan", "inf", "-inf", "-0"),
    "sin": values_of(0, "nan", "inf", "-0", "no fraction"),
    "cos": values_of(0, "nan", "inf", "no fraction"),
    "reciprocal": values_of(0, "+0", "-0", "subnormal", "inf", "max"),
    "floor": values_of(0, "-0", "negative", "no fraction", "nan", "-inf"),
    "round": values_of(0, "tie", "-0", "no fraction", "nan", "inf"),
    "expm1": values_of(0, "-0", "subnormal", "exp overflow", "-inf", "nan"),
    "log1p": values_of(0, -1.0, "-0", "subnormal", "inf", "nan"),
    "hardswish": values_of(0, 3.0, -3.0, "nan", "inf", "-inf"),
    "elu": values_of(0, "+0", "-0", "-inf", "nan", "exp underflow"),
}
# A Python number or 0-d operand takes other lowerings (pow's exponent, a wrapped number's promotion).
_SMALL_RIGHT = (Form(1, "scalar"), Form(1, "0-d"))
BINARY_EDGES = {
    "add": (*values_of(0, "-0", "inf", "max", "nan"), *values_of(1, "-0", "-inf"), *_SMALL_RIGHT, Form(0, "scalar")),
    "sub": (*values_of(0, "-0", "inf", "int min", "nan"), *values_of(1, "+0", "inf"), *_SMALL_RIGHT, Form(0, "scalar")),
    "mul": (*values_of(0, "inf", "-0", "max", "nan"), *values_of(1, "+0", "negative"), *_SMALL_RIGHT,
            Form(0, "scalar")),
    "div": (*values_of(0, "inf", "nan", "+0"), *values_of(1, "+0", "-0", "subnormal", "inf"), *_SMALL_RIGHT,
            Form(0, "scalar")),
    "maximum": (*values_of(0, "nan", "-0", "-inf"), *values_of(1, "nan", "+0"), Form(1, "0-d"), Form(1, "stride 0")),
    "minimum": (*values_of(0, "nan", "+0", "inf"), *values_of(1, "nan", "-0"), Form(1, "0-d"), Form(1, "stride 0")),
    "pow": (*values_of(0, "-inf", "+0", "-0", "negative", "nan", 1.0),
            *values_of(1, 0.5, 0.0, 1.0, 2.0, -1.0, "negative", "nan", "inf"), *_SMALL_RIGHT, Form(0, "scalar")),
    "fmod": (*values_of(0, "inf", "-0", "negative", "no fraction", "nan"),
             *values_of(1, "subnormal", "+0", "-0", "inf", "negative"), *_SMALL_RIGHT),
    "remainder": (*values_of(0, "inf", "-0", "negative", "no fraction", "nan", "int min"),
                  *values_of(1, "subnormal", "+0", "-0", "inf", "negative", -1.0), *_SMALL_RIGHT, Form(0, "scalar")),
    "floor_divide": (*values_of(0, "inf", "-inf", "-0", "negative", "int min", "nan"),
                     *values_of(1, "+0", "-0", "inf", "negative", "subnormal", -1.0), *_SMALL_RIGHT,
                     Form(0, "scalar")),
    "atan2": (*values_of(0, "+0", "-0", "inf", "nan"), *values_of(1, "+0", "-0", "-inf", "inf"), Form(1, "0-d")),
}
# Every comparison: NaN compares false (ne true), -0 == +0, infinities, a number, another dtype.
COMPARISON_EDGES = (*values_of(0, "nan", "-0", "-inf"), *values_of(1, "nan", "+0", "inf"), *_SMALL_RIGHT,
                    Form(1, "int32"))
declare_edges({
    **UNARY_EDGES,
    **BINARY_EDGES,
    **{name: COMPARISON_EDGES for name in ("eq", "ne", "lt", "le", "gt", "ge")},
    "where": (Value(0, "all true"), Value(0, "all false"), Form(0, "stride 0"), Form(0, "0-d"), Value(1, "nan"),
              Value(2, "-0"), Form(1, "scalar"), Form(2, "scalar"), Form(2, "stride 0")),
    "clamp": (ArgShape("min >= max"), ArgShape("min only"), ArgShape("max only"),
              *values_of(0, "nan", "-0", "inf", "-inf")),
    "clamp_tensor": (ArgShape("min > max elementwise"), *values_of(0, "nan"), *values_of(1, "nan", "-inf"),
                     *values_of(2, "nan", "inf"), Form(1, "stride 0"), Form(2, "0-d")),
    "hardtanh": (ArgShape("min >= max"), ArgShape("x at a bound"), *values_of(0, "nan", "-0", "inf")),
    "leaky_relu": (ArgShape("slope outside [0, 1]"), ArgValue("negative_slope", 1.5), *values_of(0, "-0", "-inf", "nan")),
    # torch/_refs lerp: start + w * (end - start) below |w| 0.5, end - (end - start) * (1 - w) from it.
    "lerp": (ArgValue("weight", 0.5), ArgValue("weight", 1.0), ArgValue("weight", 0.0), ArgValue("weight", 1.5),
             *values_of(2, 0.5, "negative"), Value(0, "inf"), *values_of(1, "inf", "nan"), Form(2, "stride 0")),
    "addcmul": (ArgValue("value", 1.0), Value(1, "inf"), Value(2, "+0"), Value(0, "nan"), Form(1, "stride 0"),
                Form(2, "0-d")),
    "addcdiv": (ArgValue("value", 1.0), *values_of(2, "+0", "subnormal"), Value(1, "inf"), Value(0, "nan"),
                Form(2, "stride 0")),
})
