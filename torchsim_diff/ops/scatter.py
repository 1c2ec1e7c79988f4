"""Out-of-place scatters and masked writes: scatter_reduce, scatter_add, index_reduce,
masked_fill, masked_scatter.

Unlike the in-place family, indices here may repeat: reductions over duplicates are the
point (every reduce mode is order-independent up to rounding, which the oracle allows).
"""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, register
from torchsim_diff.ops.attrs import BOOL, FILL, INT, one_of

SCATTER_REDUCES = ("sum", "prod", "mean", "amax", "amin")
INDEX_REDUCES = ("prod", "mean", "amax", "amin")
# Eager CPU (torch 2.13) fails an internal assert on index_reduce "prod" in float16/bfloat16
# whenever an index repeats: no reference exists there, so the case would be invalid.
HALF_INDEX_REDUCES = ("mean", "amax", "amin")


def _register(name, emit, build, signature, *, rounding, dtypes="any"):
    register(OpSpec(name, "indexing", emit, build, rounding=rounding, dtypes=dtypes, result_domain="real",
                    signature=signature))


def _scatter_operands(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    idx_shape = [b.draw_int(1, s) if d != dim else b.draw_size(scale=b.numel(x) // max(s, 1))
                 for d, s in enumerate(shape)]
    return x, dim, b.index_input(idx_shape, high=shape[dim]), b.value_of_shape(idx_shape)


def _build_scatter_reduce(b):
    x, dim, idx, src = _scatter_operands(b)
    return [x, idx, src], {"dim": dim, "reduce": b.draw_choice(SCATTER_REDUCES), "include_self": b.draw_bool()}


def _emit_scatter_reduce(args, attrs):
    x, idx, src = args
    return (f"torch.scatter_reduce({x}, {attrs['dim']}, {idx}, {src}, {attrs['reduce']!r}, "
            f"include_self={attrs['include_self']})")


_register("scatter_reduce", _emit_scatter_reduce, _build_scatter_reduce,
          {"dim": INT, "reduce": one_of(*SCATTER_REDUCES), "include_self": BOOL}, rounding="unmodelled")


def _build_scatter_add(b):
    x, dim, idx, src = _scatter_operands(b)
    return [x, idx, src], {"dim": dim}


_register("scatter_add", lambda a, k: f"torch.scatter_add({a[0]}, {k['dim']}, {a[1]}, {a[2]})", _build_scatter_add,
          {"dim": INT}, rounding="unmodelled")


def _build_index_reduce(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_int(0, len(shape) - 1)
    count = b.draw_size(scale=b.numel(x) // max(shape[dim], 1))
    source_shape = list(shape)
    source_shape[dim] = count
    idx = b.index_input([count], high=shape[dim])
    return [x, idx, b.value_of_shape(source_shape)], {"dim": dim, "reduce": b.draw_choice(_index_reduces(b.dtype)),
                                                      "include_self": b.draw_bool()}


def _index_reduces(dtype: str) -> tuple:
    return HALF_INDEX_REDUCES if dtype in ("float16", "bfloat16") else INDEX_REDUCES


def _emit_index_reduce(args, attrs):
    x, idx, src = args
    return f"{x}.index_reduce({attrs['dim']}, {idx}, {src}, {attrs['reduce']!r}, include_self={attrs['include_self']})"


_register("index_reduce", _emit_index_reduce, _build_index_reduce,
          {"dim": INT, "reduce": one_of(*INDEX_REDUCES), "include_self": BOOL}, dtypes="float", rounding="unmodelled")


def _build_masked_fill(b):
    x = b.value()
    mask = b.broadcastable_to(b.shape(x), domain="bool")
    pool = [0, -3, 7] if b.dtype.startswith("int") else [0.0, -1.5, float("-inf"), -1e4]
    return [x, mask], {"value": b.draw_choice(pool)}


def _emit_masked_fill(args, attrs):
    value = attrs["value"]
    text = "float('-inf')" if value == float("-inf") else repr(value)
    return f"torch.masked_fill({args[0]}, {args[1]}, {text})"


_register("masked_fill", _emit_masked_fill, _build_masked_fill, {"value": FILL}, rounding="exact")


def _build_masked_scatter(b):
    x = b.value()
    mask = b.broadcastable_to(b.shape(x), domain="bool")
    return [x, mask, b.value_of_shape(b.shape(x))], {}


_register("masked_scatter", lambda a, k: f"{a[0]}.masked_scatter({a[1]}, {a[2]})", _build_masked_scatter, {},
          rounding="exact")


# -- edges. Read from torch's docs (scatter_reduce / index_reduce: each reduce mode,
# include_self=False, mean's count) and Inductor's lowerings (lowering.py scatter_reduce_: sum is
# generated, other modes fall back; index_reduce and masked_scatter are fallbacks, so the
# operands' layouts reach ATen).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value, values_of  # noqa: E402

# Repeated indices (the reduction over duplicates), the last position, special sources.
WRITE_EDGES = (Value(1, "duplicate"), ArgShape("index at the end"), *values_of(2, "nan", "inf"), Form(0, "permuted"),
               Form(2, "stride 0"))
MASK_EDGES = (Value(1, "all true"), Value(1, "all false"), Form(1, "stride 0"), Form(1, "0-d"))
declare_edges({
    "scatter_reduce": (*(ArgValue("reduce", r) for r in SCATTER_REDUCES), ArgValue("include_self", False),
                       *WRITE_EDGES, Value(2, "+0")),
    "scatter_add": (*WRITE_EDGES, Value(2, "-inf")),
    "index_reduce": (*(ArgValue("reduce", r) for r in INDEX_REDUCES), ArgValue("include_self", False), *WRITE_EDGES),
    "masked_fill": (*MASK_EDGES, ArgValue("value", float("-inf")), Value(0, "nan"), Form(0, "permuted")),
    "masked_scatter": (*MASK_EDGES, Form(0, "permuted"), Form(2, "permuted"), Form(0, "0-d")),
})
