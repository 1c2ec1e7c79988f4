"""Type conversions and mixed-dtype arithmetic (type promotion).

Operands of another dtype are new inputs: a conversion of a computed value would turn a
last-bit difference that the oracle allows into a different integer.
"""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import one_of

# The other float dtype a case meets: never the case's own, and float32 where a
# promotion should widen.
OTHER_FLOAT = {"float32": "float16", "float16": "float32", "bfloat16": "float16"}
# The narrower dtypes a round trip may pass through: float32 rounds to float16's 10-bit or
# bfloat16's 7-bit mantissa (a bfloat16 conversion that truncates is a classic NPU bug).
ROUND_TRIP = {"float32": ("float16", "bfloat16"), "float16": ("bfloat16",), "bfloat16": ("float16",)}


def _register(name, emit, build, rounding, dtypes="float", signature=None, kernel=None):
    register(OpSpec(name, "pointwise", emit, build, rounding=rounding, dtypes=dtypes, signature=signature or {},
                    kernel=kernel))


def _build_to_int32(b):
    return [b.new_input(b.draw_shape(), tail=False)], {}


# Out-of-range floats (and NaN) make float-to-int conversion undefined in C++: clamp first.
_register("to_int32", lambda a, k: f"{a[0]}.nan_to_num(0.0).clamp(-1e4, 1e4).to(torch.int32)",
          _build_to_int32, "decision")


def _build_to_float(b):
    return [b.value()], {"dtype": b.draw_choice(["float32", "float16"])}


_register("to_float", lambda a, k: f"{a[0]}.to(torch.{k['dtype']})", _build_to_float, "decision", dtypes="int",
          signature={"dtype": one_of("float32", "float16")})


def _build_round_trip(b):
    return [b.value()], {"via": b.draw_choice(ROUND_TRIP[b.dtype])}


_register("cast_round_trip", lambda a, k: f"{a[0]}.to(torch.{k['via']}).to({a[0]}.dtype)", _build_round_trip,
          "decision", signature={"via": one_of(*sorted({via for options in ROUND_TRIP.values() for via in options}))})


def _build_add_int(b):
    x = b.value()
    return [x, b.new_input(_broadcast_shape(b, b.shape(x)), dtype=b.draw_choice(["int32", "int64"]))], {}


_register("add_int_tensor", lambda a, k: call("torch.add", a), _build_add_int, "pointwise", kernel="add")


def _build_mul_mixed(b):
    x = b.value()
    other = b.new_input(_broadcast_shape(b, b.shape(x)), dtype=OTHER_FLOAT[b.dtype])
    return ([other, x] if b.draw_bool() else [x, other]), {}


_register("mul_mixed_float", lambda a, k: call("torch.mul", a), _build_mul_mixed, "pointwise", kernel="mul")


def _broadcast_shape(b, shape) -> list:
    return [1 if b.draw_bool(0.3) else s for s in shape]


# -- edges. Read from torch's docs on type promotion and `Tensor.to` (NaN and out-of-range floats
# to integers; narrower floats overflow to inf and flush subnormals) and Inductor's to_dtype.
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgValue, Form, values_of  # noqa: E402

declare_edges({
    "to_int32": values_of(0, "nan", "inf", "-inf", "no fraction", "negative", "-0", 1e4),
    "to_float": (*values_of(0, "max", "int min", "negative"), ArgValue("dtype", "float16")),
    "cast_round_trip": (*values_of(0, "subnormal", "max", "nan", "-0", "inf"), ArgValue("via", "bfloat16"),
                        ArgValue("via", "float16")),
    "add_int_tensor": (Form(1, "int64"), Form(1, "int32"), Form(1, "stride 0"), *values_of(1, "negative"),
                       *values_of(0, "nan", "inf")),
    "mul_mixed_float": (Form(0, "float16"), Form(1, "float16"), Form(0, "float32"), Form(1, "float32"),
                        *values_of(0, "max", "inf"), *values_of(1, "subnormal"), Form(1, "stride 0")),
})
