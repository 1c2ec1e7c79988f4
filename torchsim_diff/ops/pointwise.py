"""Unary, binary and ternary pointwise ops (operands broadcast), clamps and interpolation."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import NUMBER, optional, or_none


def unary(name, fn, *, rounding, domain="real", dtypes="float", result_domain="real"):
    def build(b):
        return [b.value(domain=domain)], {}
    register(OpSpec(name, "pointwise", lambda a, k: call(fn, a), build, rounding=rounding, dtypes=dtypes,
                    result_domain=result_domain))


# How a binary op's operands come: same shape, one broadcasting to the other (size-1 or fewer
# dims), or one 0-d; each on either side.
OPERAND_FORMS = ("same shape", "right broadcasts", "left broadcasts", "right 0-d", "left 0-d")


def binary(name, fn, *, rounding, lhs="real", rhs="real", dtypes="float", result_domain="real"):
    def build(b):
        form = b.draw_choice(OPERAND_FORMS)
        small_on_left = form.startswith("left")
        full = b.value(domain=rhs if small_on_left else lhs)
        other = lhs if small_on_left else rhs
        if form == "same shape":
            small = b.value_of_shape(b.shape(full), domain=other)
        elif form.endswith("0-d"):
            small = b.value_of_shape([], domain=other)
        else:
            small = b.broadcastable_to(b.shape(full), domain=other)
        return ([small, full] if small_on_left else [full, small]), {}
    register(OpSpec(name, "pointwise", lambda a, k: call(fn, a), build, rounding=rounding, dtypes=dtypes,
                    result_domain=result_domain))


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
    y = b.broadcastable_to(b.shape(x))
    return [cond, x, y], {}


register(OpSpec("where", "pointwise", lambda a, k: call("torch.where", a), _build_where, rounding="exact",
                dtypes="any"))


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
                rounding="exact", dtypes="any"))


def _build_hardtanh(b):
    low = b.draw_choice([-1.0, -0.5, 0.0])
    return [b.value()], {"min_val": low, "max_val": low + b.draw_choice([0.5, 1.0, 2.0])}


register(OpSpec("hardtanh", "pointwise",
                lambda a, k: call("torch.nn.functional.hardtanh", a, min_val=k["min_val"], max_val=k["max_val"]),
                _build_hardtanh, rounding="exact", signature={"min_val": NUMBER, "max_val": NUMBER}))


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
