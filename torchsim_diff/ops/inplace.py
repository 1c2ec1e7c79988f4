"""In-place and in/out ops writing into graph inputs or views of them.

The first argument is always an input; `attrs["view"]` optionally narrows the write to a
view of it (a strided slice, a transpose, a narrow or a select), so partial writes and
writes through strides are covered. Indices that would make eager itself
nondeterministic (duplicates without accumulate) are never drawn.
"""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, register
from torchsim_diff.ops.attrs import BOOL, INT, NUMBER, optional, or_none, record
from torchsim_diff.ops.views import NARROW, SLICE, slice_expr

TARGET_VIEW = optional(or_none(record({"slice": SLICE, "transpose": {"dim0": INT, "dim1": INT}, "narrow": NARROW,
                                       "select": {"dim": INT, "index": INT}})))


def target_expr(base: str, view: dict | None) -> str:
    """Python expression for the written tensor: the input or a view of it."""
    if not view:
        return base
    kind = view["kind"]
    if kind == "slice":
        return slice_expr(base, 0, view["dim"], view["start"], view["stop"], view["step"])
    if kind == "transpose":
        return f"{base}.transpose({view['dim0']}, {view['dim1']})"
    if kind == "narrow":
        return f"{base}.narrow({view['dim']}, {view['start']}, {view['length']})"
    if kind == "select":
        return f"{base}.select({view['dim']}, {view['index']})"
    raise ValueError(f"unknown target view kind {kind!r}")


def _register(name, emit, build, *, rounding, dtypes="any", signature=None):
    def emit_on_target(args, attrs):
        return emit([target_expr(args[0], attrs.get("view")), *args[1:]], attrs)
    register(OpSpec(name, "inplace", emit_on_target, build, rounding=rounding, dtypes=dtypes, mutates=True,
                    signature={"view": TARGET_VIEW, **(signature or {})}))


def _build_pointwise_(b):
    target, view, shape = b.mutable_target()
    return [target, b.broadcastable_to(shape)], {"view": view}


_register("add_", lambda a, k: f"{a[0]}.add_({a[1]})", _build_pointwise_, rounding="pointwise")
_register("mul_", lambda a, k: f"{a[0]}.mul_({a[1]})", _build_pointwise_, rounding="pointwise")


def _build_copy_(b):
    target, view, shape = b.mutable_target(prefer_view=True)
    return [target, b.broadcastable_to(shape)], {"view": view}


_register("copy_", lambda a, k: f"{a[0]}.copy_({a[1]})", _build_copy_, rounding="exact")


def _build_masked_fill_(b):
    target, view, shape = b.mutable_target()
    mask = b.broadcastable_to(shape, domain="bool")
    return [target, mask], {"view": view, "value": b.draw_choice([0.0, -1.5, 3.0])}


def _emit_masked_fill_(args, attrs):
    return f"{args[0]}.masked_fill_({args[1]}, {attrs['value']!r})"


_register("masked_fill_", _emit_masked_fill_, _build_masked_fill_, dtypes="float", signature={"value": NUMBER},
          rounding="exact")


def _build_index_put_(b):
    target, view, shape = b.mutable_target(min_rank=1)
    accumulate = b.draw_bool()
    count = b.draw_int(1, shape[0]) if not accumulate else b.draw_size(scale=1)
    idx = b.index_input([count], high=shape[0], unique=not accumulate)
    values = b.broadcastable_to([count, *shape[1:]])
    return [target, idx, values], {"view": view, "accumulate": accumulate}


def _emit_index_put_(args, attrs):
    return f"{args[0]}.index_put_(({args[1]},), {args[2]}, accumulate={attrs['accumulate']})"


_register("index_put_", _emit_index_put_, _build_index_put_, signature={"accumulate": BOOL}, rounding="unmodelled")


def _build_dim_index_op(unique):
    def build(b):
        target, view, shape = b.mutable_target(min_rank=1)
        dim = b.draw_int(0, len(shape) - 1)
        count = b.draw_int(1, shape[dim]) if unique else b.draw_size(scale=1)
        idx = b.index_input([count], high=shape[dim], unique=unique)
        source_shape = list(shape)
        source_shape[dim] = count
        return [target, idx, b.value_of_shape(source_shape)], {"view": view, "dim": dim}
    return build


_register("index_add_", lambda a, k: f"{a[0]}.index_add_({k['dim']}, {a[1]}, {a[2]})",
          _build_dim_index_op(unique=False), signature={"dim": INT}, rounding="unmodelled")
_register("index_copy_", lambda a, k: f"{a[0]}.index_copy_({k['dim']}, {a[1]}, {a[2]})",
          _build_dim_index_op(unique=True), signature={"dim": INT}, rounding="exact")


def _build_scatter_(b):
    target, view, shape = b.mutable_target(min_rank=1)
    dim = b.draw_int(0, len(shape) - 1)
    idx_shape = [b.draw_int(1, s) for s in shape]
    idx = b.index_input(idx_shape, high=shape[dim], unique=True, dim=dim)
    return [target, idx, b.value_of_shape(idx_shape)], {"view": view, "dim": dim}


_register("scatter_", lambda a, k: f"{a[0]}.scatter_({k['dim']}, {a[1]}, {a[2]})", _build_scatter_, signature={"dim": INT},
          rounding="exact")


# -- edges. Read from torch's docs (index_put_ and index_add_ accumulate over repeated indices)
# and Inductor's functionalization and lowerings (lowering.py index_put_: accumulate or not, a
# fallback for some forms; a write through a view goes back through its strides and offset).
# Operand 0 is the written tensor: the input or its view.
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value, values_of  # noqa: E402

# Where a write lands: through a view (its strides, its offset).
TARGET_EDGES = (ArgShape("write through a view"), Form(0, "non-contiguous"), Form(0, "offset"))
declare_edges({name: (*TARGET_EDGES, *edges) for name, edges in {
    "add_": (Form(1, "stride 0"), Form(1, "0-d"), *values_of(1, "inf", "-0"), Value(0, "nan")),
    "mul_": (Form(1, "stride 0"), Form(1, "0-d"), *values_of(1, "inf", "nan"), Value(0, "+0")),
    "copy_": (Form(1, "stride 0"), Form(1, "0-d"), Form(0, "permuted"), Form(1, "permuted")),
    "masked_fill_": (*values_of(1, "all true", "all false"), Form(1, "stride 0"), Form(1, "0-d"), Value(0, "nan")),
    "index_put_": (ArgValue("accumulate", True), Value(1, "duplicate"), ArgShape("index at the end"),
                   Form(2, "stride 0"), Form(2, "one element"), Value(2, "inf")),
    "index_add_": (Value(1, "duplicate"), ArgShape("index at the end"), Form(2, "permuted"), *values_of(2, "inf", "nan")),
    "index_copy_": (ArgShape("index at the end"), ArgShape("dim of size 1"), Form(2, "permuted"), Form(2, "stride 0")),
    "scatter_": (ArgShape("index at the end"), ArgShape("dim of size 1"), Form(0, "permuted"), Value(2, "nan"),
                 Form(2, "stride 0")),
}.items()})
