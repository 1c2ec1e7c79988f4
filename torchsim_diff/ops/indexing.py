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
