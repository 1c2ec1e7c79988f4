"""Ops that move elements without arithmetic: flip, roll, tril/triu, stack, split and
chunk (every piece used), select."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import INT, INTS


def _register(name, emit, build, *, rounding, result_domain="same", signature=None):
    register(OpSpec(name, "view", emit, build, rounding=rounding, dtypes="any", result_domain=result_domain,
                    signature=signature or {}))


def _dims(b, rank: int) -> list:
    return b.draw_subset(0, rank - 1, min_size=1)


def _build_flip(b):
    x = b.value(min_rank=1)
    return [x], {"dims": _dims(b, len(b.shape(x)))}


_register("flip", lambda a, k: call("torch.flip", a, dims=tuple(k["dims"])), _build_flip, signature={"dims": INTS},
          rounding="exact")


def _build_roll(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dims = _dims(b, len(shape))
    # both signs, and past the size: whole turns (-2n .. 2n) plus a few steps
    return [x], {"shifts": [b.draw_int(-2, 2) * shape[d] + b.draw_int(-2, 2) for d in dims], "dims": dims}


_register("roll", lambda a, k: call("torch.roll", a, shifts=tuple(k["shifts"]), dims=tuple(k["dims"])), _build_roll,
          signature={"shifts": INTS, "dims": INTS}, rounding="exact")


def _build_triangle(b):
    return [b.value(min_rank=2)], {"diagonal": b.draw_int(-2, 2)}


_register("tril", lambda a, k: call("torch.tril", a, diagonal=k["diagonal"]), _build_triangle, signature={"diagonal": INT},
          rounding="exact")
_register("triu", lambda a, k: call("torch.triu", a, diagonal=k["diagonal"]), _build_triangle, signature={"diagonal": INT},
          rounding="exact")


def _build_stack(b):
    x = b.value(max_rank=3)
    shape = b.shape(x)
    count = b.draw_int(2, max(2, min(5, b.max_numel // max(1, b.numel(x)))))
    return [x] + [b.value_of_shape(shape) for _ in range(count - 1)], {"dim": b.draw_int(0, len(shape))}


_register("stack", lambda a, k: f"torch.stack([{', '.join(a)}], dim={k['dim']})", _build_stack,
          result_domain="real", signature={"dim": INT}, rounding="exact")


def _build_split(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    size = shape[dim]
    cuts = b.draw_subset(1, size - 1, max_size=4) if size > 1 else []
    bounds = [0, *cuts, size]
    return [x], {"sizes": [hi - lo for lo, hi in zip(bounds, bounds[1:])], "dim": dim}


# Every piece is used: the pieces come back in reverse order, each a separate view.
_register("split", lambda a, k: f"torch.cat(torch.split({a[0]}, {k['sizes']!r}, dim={k['dim']})[::-1], dim={k['dim']})",
          _build_split, signature={"sizes": INTS, "dim": INT}, rounding="exact")


def _build_chunk(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    return [x], {"chunks": b.draw_int(1, 5), "dim": b.draw_dim(len(shape))}


# chunk's pieces may differ in size along the dim; each is summed over it and restacked.
_register("chunk", lambda a, k: f"torch.stack([c.sum({k['dim']}) for c in torch.chunk({a[0]}, {k['chunks']}, dim={k['dim']})])",
          _build_chunk, result_domain="real", signature={"chunks": INT, "dim": INT}, rounding="reduction")


def _build_select(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    return [x], {"dim": dim, "index": b.draw_int(-shape[dim], shape[dim] - 1)}


_register("select", lambda a, k: call("torch.select", a, dim=k["dim"], index=k["index"]), _build_select,
          signature={"dim": INT, "index": INT}, rounding="exact")


# -- edges. Read from torch's docs (roll wraps shifts past the size; tril/triu's diagonal may
# lie outside the matrix; chunk returns fewer pieces than asked) and Inductor's lowerings
# (lowering.py: roll takes the shift modulo the size; tril/triu are a where over an index
# comparison; select wraps a negative index).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, Form, Value  # noqa: E402

TRIANGLE_EDGES = (ArgShape("diagonal past the size"), ArgShape("negative diagonal"), Value(0, "nan"), Value(0, "-0"),
                  Form(0, "permuted"), Form(0, "stride 0"))
declare_edges({
    "flip": (Form(0, "size-1 dim"), Form(0, "stride 0"), Form(0, "permuted"), Form(0, "offset")),
    "roll": (ArgShape("shift >= size"), ArgShape("negative shift"), ArgShape("shift of whole turns"),
             Form(0, "size-1 dim"), Form(0, "stride 0"), Form(0, "permuted")),
    "tril": TRIANGLE_EDGES,
    "triu": TRIANGLE_EDGES,
    "stack": (ArgShape("new last dim"), Form(0, "0-d"), Form(1, "stride 0"), Form(0, "permuted")),
    "split": (ArgShape("one piece"), Form(0, "permuted"), Form(0, "stride 0")),
    "chunk": (ArgShape("chunks > size"), ArgShape("uneven chunks"), ArgShape("dim of size 1"), Form(0, "stride 0"),
              Value(0, "inf")),
    "select": (ArgShape("negative index"), Form(0, "stride 0"), Form(0, "offset"), Form(0, "size-1 dim")),
})
