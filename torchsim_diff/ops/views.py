"""Layout ops: transpose, permute, reshape/view, strided slicing, narrow, expand,
unsqueeze/squeeze, cat, constant_pad_nd, contiguous and repeat."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import INT, INTS, NUMBER, or_none


def slice_expr(base: str, rank: int, dim: int, start: int, stop, step: int) -> str:
    """`base[:, start:stop:step]` written the way a person would."""
    stop_txt = "" if stop is None else str(stop)
    step_txt = "" if step == 1 else f":{step}"
    part = f"{start or ''}:{stop_txt}{step_txt}"
    return f"{base}[{', '.join([':'] * dim + [part])}]"


# The fields of a strided slice and of a narrow, also the views an in-place op may write through.
SLICE = {"dim": INT, "start": INT, "stop": or_none(INT), "step": INT}
NARROW = {"dim": INT, "start": INT, "length": INT}


def _register(name, emit, build, signature, *, rounding, dtypes="any", result_domain="same"):
    register(OpSpec(name, "view", emit, build, rounding=rounding, dtypes=dtypes, result_domain=result_domain,
                    signature=signature))


def _build_transpose(b):
    x = b.view_source(min_rank=1)
    rank = len(b.shape(x))
    return [x], {"dim0": b.draw_dim(rank), "dim1": b.draw_dim(rank)}


_register("transpose", lambda a, k: call("torch.transpose", a, dim0=k["dim0"], dim1=k["dim1"]),
          _build_transpose, {"dim0": INT, "dim1": INT}, rounding="exact")


def _build_permute(b):
    x = b.view_source(min_rank=1)
    return [x], {"dims": b.draw_permutation(len(b.shape(x)))}


_register("permute", lambda a, k: call("torch.permute", a, dims=tuple(k["dims"])), _build_permute, {"dims": INTS},
          rounding="exact")


def _build_reshape(b):
    x = b.value()
    return [x], {"shape": b.draw_reshape(b.shape(x))}


_register("reshape", lambda a, k: call("torch.reshape", a, shape=tuple(k["shape"])), _build_reshape, {"shape": INTS},
          rounding="exact")


def _build_view(b):
    # A view must be expressible over the operand's strides; splitting and merging dims
    # is only guaranteed for contiguous values, so other values get a leading unit dim.
    x = b.value()
    shape = b.shape(x)
    if b.is_contiguous(x):
        return [x], {"shape": b.draw_reshape(shape)}
    return [x], {"shape": [1, *shape]}


_register("view", lambda a, k: f"{a[0]}.view({', '.join(map(str, k['shape'])) or '()'})", _build_view,
          {"shape": INTS}, rounding="exact")


def _build_slice(b):
    x = b.view_source(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    size = shape[dim]
    start = b.draw_int(0, max(size - 1, 0))
    step = b.draw_choice([1, 2, 3, size + 1])     # size + 1: a step past the end takes one element
    stop = None if b.draw_bool() else b.draw_int(start + 1, max(size, start + 1))
    return [x], {"dim": dim, "start": start, "stop": stop, "step": step}


_register("slice", lambda a, k: slice_expr(a[0], 0, k["dim"], k["start"], k["stop"], k["step"]),
          _build_slice, SLICE, rounding="exact")


def _build_narrow(b):
    x = b.view_source(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    start = b.draw_int(0, shape[dim] - 1)
    return [x], {"dim": dim, "start": start, "length": b.draw_int(1, max(shape[dim] - start, 1))}


_register("narrow", lambda a, k: call("torch.narrow", a, dim=k["dim"], start=k["start"], length=k["length"]),
          _build_narrow, NARROW, rounding="exact")


def _build_expand(b):
    x = b.view_source()
    shape = list(b.shape(x))
    ones = [i for i, s in enumerate(shape) if s == 1]
    grown = b.draw_size(scale=b.numel(x))
    if ones and b.draw_bool(0.7):
        shape[b.draw_choice(ones)] = grown
    else:
        shape = [grown, *shape]
    return [x], {"size": shape}


_register("expand", lambda a, k: f"{a[0]}.expand({', '.join(map(str, k['size']))})", _build_expand, {"size": INTS},
          rounding="exact")


def _build_unsqueeze(b):
    x = b.view_source(max_rank=3)
    return [x], {"dim": b.draw_int(0, len(b.shape(x)))}


_register("unsqueeze", lambda a, k: call("torch.unsqueeze", a, dim=k["dim"]), _build_unsqueeze, {"dim": INT},
          rounding="exact")


def _build_squeeze(b):
    x = b.view_source(min_rank=1)
    shape = b.shape(x)
    ones = [i for i, s in enumerate(shape) if s == 1]
    return [x], {"dim": b.draw_choice(ones) if ones else b.draw_int(0, len(shape) - 1)}


_register("squeeze", lambda a, k: call("torch.squeeze", a, dim=k["dim"]), _build_squeeze, {"dim": INT},
          rounding="exact")


def _build_cat(b):
    """2-5 operands, each with its own size along the dim."""
    x = b.value(min_rank=1)
    shape = list(b.shape(x))
    dim = b.draw_int(0, len(shape) - 1)
    operands = [x]
    for _ in range(b.draw_int(1, 4)):
        other = list(shape)
        other[dim] = b.draw_size(scale=b.numel(x) // max(shape[dim], 1))
        operands.append(b.value_of_shape(other))
    return operands, {"dim": dim}


_register("cat", lambda a, k: f"torch.cat([{', '.join(a)}], dim={k['dim']})", _build_cat, {"dim": INT},
          result_domain="real", rounding="exact")


def _build_pad(b):
    x = b.value(min_rank=1)
    padded = b.draw_int(1, min(2, len(b.shape(x))))
    pad = [b.draw_int(0, 3) for _ in range(2 * padded)]
    return [x], {"pad": pad, "value": b.draw_choice([0.0, 1.5, -2.0])}


def _emit_pad(args, attrs):
    return call("torch.constant_pad_nd", args, pad=tuple(attrs["pad"]), value=attrs["value"])


_register("constant_pad_nd", _emit_pad, _build_pad, {"pad": INTS, "value": NUMBER}, dtypes="float",
          result_domain="real", rounding="exact")


def _build_contiguous(b):
    return [b.value()], {}


_register("contiguous", lambda a, k: f"{a[0]}.contiguous()", _build_contiguous, {}, rounding="exact")


def _build_repeat(b):
    x = b.value(max_rank=3)
    rank = len(b.shape(x))
    repeats = [b.draw_int(1, 3) for _ in range(rank + b.draw_int(0, 1))] or [1]
    total = b.numel(x)
    for r in repeats:
        total *= r
    if not b.fits(total):
        repeats = [1] * len(repeats)
    return [x], {"repeats": repeats}


_register("repeat", lambda a, k: f"{a[0]}.repeat({', '.join(map(str, k['repeats']))})", _build_repeat,
          {"repeats": INTS}, rounding="exact")


# -- edges. Read from torch's docs (reshape copies what a view cannot express; slice and narrow
# bounds) and Inductor's lowerings (lowering.py: slice_ clamps start, stop and step; expand of a
# 0-d or broadcast operand; cat picks a ConcatKernel or a pointwise cat by its operands;
# constant_pad_nd crops on negative pads; clone of a dense or a strided operand).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, NoEdges, Value  # noqa: E402

PURE_VIEW = NoEdges("a pure view: it moves no value, and its index map branches on no value or argument")
declare_edges({
    "transpose": PURE_VIEW,
    "permute": PURE_VIEW,
    "unsqueeze": PURE_VIEW,
    # reshape is a view where the strides allow it, a copy elsewhere.
    "reshape": (Form(0, "non-contiguous"), Form(0, "stride 0"), Form(0, "0-d"), Form(0, "offset")),
    "view": (Form(0, "non-contiguous"), Form(0, "0-d"), Form(0, "offset")),
    "slice": (ArgShape("step past the end"), ArgValue("stop", None), Form(0, "offset"), Form(0, "stride 0"),
              Form(0, "permuted")),
    "narrow": (ArgShape("whole length"), ArgValue("start", 0), Form(0, "offset"), Form(0, "stride 0")),
    "expand": (ArgShape("new leading dim"), Form(0, "0-d"), Form(0, "stride 0"), Form(0, "offset")),
    "squeeze": (ArgShape("squeeze of a dim not 1"), Form(0, "one element")),
    "cat": (ArgShape("cat along the last dim"), ArgShape("dim of size 1"), Form(0, "permuted"), Form(1, "stride 0"),
            Form(1, "offset"), Value(1, "nan")),
    "constant_pad_nd": (ArgShape("zero pad"), ArgShape("negative pad"), ArgValue("value", 0.0), Form(0, "permuted"),
                        Form(0, "stride 0"), Value(0, "nan")),
    "contiguous": (Form(0, "non-contiguous"), Form(0, "stride 0"), Form(0, "offset"), Form(0, "permuted")),
    "repeat": (ArgShape("more repeats than dims"), Form(0, "0-d"), Form(0, "stride 0"), Form(0, "permuted")),
})
