"""softmax, log_softmax and layer_norm."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import INT, INTS, NUMBER


def _build_softmax(b):
    x = b.value()
    rank = len(b.shape(x))
    return [x], {"dim": b.draw_int(-1, rank - 1) if rank else 0}


register(OpSpec("softmax", "normalization",
                lambda a, k: call("torch.softmax", a, dim=k["dim"]), _build_softmax, rounding="normalization",
                result_domain="positive", signature={"dim": INT}))
register(OpSpec("log_softmax", "normalization",
                lambda a, k: call("torch.log_softmax", a, dim=k["dim"]), _build_softmax, rounding="normalization",
                signature={"dim": INT}))


def _build_layer_norm(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    k = b.draw_int(1, min(len(shape), 2))
    normalized = list(shape[-k:])
    args = [x]
    if b.draw_bool():
        args += [b.value_of_shape(normalized), b.value_of_shape(normalized)]
    return args, {"normalized_shape": normalized}


def _emit_layer_norm(args, attrs):
    shape = tuple(attrs["normalized_shape"])
    if len(args) == 3:
        return call("torch.nn.functional.layer_norm", [args[0], repr(shape), args[1], args[2]])
    return call("torch.nn.functional.layer_norm", [args[0], repr(shape)])


register(OpSpec("layer_norm", "normalization", _emit_layer_norm, _build_layer_norm, rounding="normalization",
                signature={"normalized_shape": INTS}))


def _build_group_norm(b):
    x = b.value(min_rank=2, max_rank=4)
    if b.numel(x) < 2:
        x = b.new_input([2, *b.shape(x)[1:]])
    channels = b.shape(x)[1]
    # torch refuses a group holding a single value
    groups = b.draw_choice([g for g in range(1, channels + 1) if channels % g == 0 and b.numel(x) // g > 1])
    args = [x]
    if b.draw_bool():
        args += [b.value_of_shape([channels]), b.value_of_shape([channels])]
    return args, {"num_groups": groups}


def _emit_group_norm(args, attrs):
    weights = {"weight": args[1], "bias": args[2]} if len(args) == 3 else {}
    parts = [args[0], str(attrs["num_groups"])] + [f"{k}={v}" for k, v in weights.items()]
    return f"torch.nn.functional.group_norm({', '.join(parts)})"


register(OpSpec("group_norm", "normalization", _emit_group_norm, _build_group_norm, rounding="normalization",
                signature={"num_groups": INT}))


def _build_rms_norm(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    normalized = list(shape[-b.draw_int(1, min(len(shape), 2)):])
    args = [x, b.value_of_shape(normalized)] if b.draw_bool() else [x]
    return args, {"normalized_shape": normalized, "eps": b.draw_choice([1e-6, 1e-5, 0.1])}


def _emit_rms_norm(args, attrs):
    shape = repr(tuple(attrs["normalized_shape"]))
    weight = [args[1]] if len(args) == 2 else ["None"]
    return call("torch.nn.functional.rms_norm", [args[0], shape, *weight], eps=attrs["eps"])


register(OpSpec("rms_norm", "normalization", _emit_rms_norm, _build_rms_norm, rounding="normalization",
                signature={"normalized_shape": INTS, "eps": NUMBER}))


# -- edges. Read from torch's docs and decompositions (torch/_decomp/decompositions.py: _softmax
# subtracts the max, so a row of -inf or one holding inf is NaN; native_layer_norm and
# native_group_norm divide by the count, so one normalized element has variance 0; rms_norm's
# eps) and Inductor's lowering (a softmax over a size-1 dim or of a 0-d operand).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value, values_of  # noqa: E402

SOFTMAX_EDGES = (*values_of(0, "-inf", "inf", "nan", "exp overflow"), ArgShape("dim of size 1"),
                 ArgShape("negative dim"), Form(0, "0-d"), Form(0, "permuted"))
# The statistics over the normalized elements: huge values, the affine weights, the layout.
NORM_EDGES = (*values_of(0, "inf", "nan", "max"), ArgShape("weight given"), Form(0, "permuted"))
declare_edges({
    "softmax": SOFTMAX_EDGES,
    "log_softmax": (*SOFTMAX_EDGES, Value(0, "exp underflow")),
    "layer_norm": (*NORM_EDGES, ArgShape("normalized over one element")),
    "group_norm": (*NORM_EDGES, ArgShape("one group"), ArgShape("group per channel")),
    "rms_norm": (*NORM_EDGES, ArgShape("normalized over one element"), Value(0, "+0"), ArgValue("eps", 0.1)),
})
