"""softmax, log_softmax and layer_norm."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register


def _build_softmax(b):
    x = b.value()
    rank = len(b.shape(x))
    return [x], {"dim": b.draw_int(-1, rank - 1) if rank else 0}


register(OpSpec("softmax", "normalization",
                lambda a, k: call("torch.softmax", a, dim=k["dim"]), _build_softmax,
                result_domain="positive"))
register(OpSpec("log_softmax", "normalization",
                lambda a, k: call("torch.log_softmax", a, dim=k["dim"]), _build_softmax))


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


register(OpSpec("layer_norm", "normalization", _emit_layer_norm, _build_layer_norm))
