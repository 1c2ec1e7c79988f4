"""Reads through index tensors: gather, index_select, embedding and `x[idx]`.

Index inputs are int64 with values in range, so eager never rejects them.
"""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import INT


def _build_gather(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    idx_shape = [b.draw_int(1, s) if i != dim else b.draw_size(scale=b.numel(x))
                 for i, s in enumerate(shape)]
    return [x, b.index_input(idx_shape, high=shape[dim])], {"dim": dim}


register(OpSpec("gather", "indexing", lambda a, k: f"torch.gather({a[0]}, {k['dim']}, {a[1]})",
                _build_gather, rounding="exact", dtypes="any", result_domain="same", signature={"dim": INT}))


def _build_index_select(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    idx = b.index_input([b.draw_size(scale=b.numel(x) // shape[dim])], high=shape[dim])
    return [x, idx], {"dim": dim}


register(OpSpec("index_select", "indexing",
                lambda a, k: f"torch.index_select({a[0]}, {k['dim']}, {a[1]})",
                _build_index_select, rounding="exact", dtypes="any", result_domain="same", signature={"dim": INT}))


def _build_embedding(b):
    weight = b.value(exact_rank=2)
    rows, cols = b.shape(weight)
    idx = b.index_input(b.draw_shape(max_rank=2, scale=cols), high=rows)
    return [idx, weight], {}


register(OpSpec("embedding", "indexing", lambda a, k: call("torch.nn.functional.embedding", a),
                _build_embedding, rounding="exact", result_domain="real"))


def _build_advanced_index(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    idx = b.index_input([b.draw_size(scale=b.numel(x) // shape[0])], high=shape[0])
    return [x, idx], {}


register(OpSpec("index", "indexing", lambda a, k: f"{a[0]}[{a[1]}]", _build_advanced_index,
                rounding="exact", dtypes="any", result_domain="same"))


# -- edges. Read from torch's docs (repeated indices read twice; embedding of a 0-d index) and
# Inductor's lowerings (lowering.py gather / embedding / index: a load at an indirect index with
# a bounds check at the last valid position; the index operand's own layout, stride 0 included).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, Form, Value  # noqa: E402

READ_EDGES = (Value(1, "duplicate"), ArgShape("index at the end"), Value(1, 0), Form(1, "stride 0"),
              Form(0, "permuted"), Form(0, "stride 0"), Value(0, "nan"))
declare_edges({
    "gather": (*READ_EDGES, ArgShape("dim of size 1")),
    "index_select": (*READ_EDGES, ArgShape("dim of size 1")),
    "embedding": (Value(0, "duplicate"), ArgShape("row at the end"), Value(0, 0), Form(0, "0-d"), Form(0, "stride 0"),
                  Form(1, "permuted"), Value(1, "nan")),
    "index": READ_EDGES,
})
