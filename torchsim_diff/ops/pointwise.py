"""Unary and binary pointwise ops (binary ones broadcast)."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register


def _unary(name, fn, *, domain="real", dtypes="float", result_domain="real"):
    def build(b):
        return [b.value(domain=domain)], {}
    register(OpSpec(name, "pointwise", lambda a, k: call(fn, a), build, dtypes=dtypes,
                    result_domain=result_domain))


def _binary(name, fn, *, lhs="real", rhs="real", dtypes="float", result_domain="real"):
    def build(b):
        x = b.value(domain=lhs)
        y = b.broadcastable_to(b.shape(x), domain=rhs)
        return ([y, x] if b.draw_bool() and rhs == lhs else [x, y]), {}
    register(OpSpec(name, "pointwise", lambda a, k: call(fn, a), build, dtypes=dtypes,
                    result_domain=result_domain))


for _name, _fn, _dom, _dt, _res in [
    ("relu", "torch.relu", "real", "any", "real"),
    ("gelu", "torch.nn.functional.gelu", "real", "float", "real"),
    ("sigmoid", "torch.sigmoid", "real", "float", "positive"),
    ("silu", "torch.nn.functional.silu", "real", "float", "real"),
    ("tanh", "torch.tanh", "real", "float", "real"),
    ("exp", "torch.exp", "real", "float", "positive"),
    ("log", "torch.log", "positive", "float", "real"),
    ("sqrt", "torch.sqrt", "positive", "float", "positive"),
    ("rsqrt", "torch.rsqrt", "positive", "float", "positive"),
    ("abs", "torch.abs", "real", "any", "real"),
    ("neg", "torch.neg", "real", "any", "real"),
    ("sign", "torch.sign", "real", "any", "real"),
    ("erf", "torch.erf", "real", "float", "real"),
    ("sin", "torch.sin", "real", "float", "real"),
    ("cos", "torch.cos", "real", "float", "real"),
    ("reciprocal", "torch.reciprocal", "nonzero", "float", "nonzero"),
]:
    _unary(_name, _fn, domain=_dom, dtypes=_dt, result_domain=_res)

for _name, _fn, _lhs, _rhs, _dt in [
    ("add", "torch.add", "real", "real", "any"),
    ("sub", "torch.sub", "real", "real", "any"),
    ("mul", "torch.mul", "real", "real", "any"),
    ("div", "torch.div", "real", "nonzero", "float"),
    ("maximum", "torch.maximum", "real", "real", "any"),
    ("minimum", "torch.minimum", "real", "real", "any"),
    ("pow", "torch.pow", "positive", "small", "float"),
    ("fmod", "torch.fmod", "real", "nonzero", "float"),
]:
    _binary(_name, _fn, lhs=_lhs, rhs=_rhs, dtypes=_dt)

for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _binary(_name, f"torch.{_name}", dtypes="any", result_domain="bool")


def _build_where(b):
    x = b.value()
    cond = b.broadcastable_to(b.shape(x), domain="bool")
    y = b.broadcastable_to(b.shape(x))
    return [cond, x, y], {}


register(OpSpec("where", "pointwise", lambda a, k: call("torch.where", a), _build_where, dtypes="any"))
