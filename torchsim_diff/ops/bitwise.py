"""Bitwise ops on integers and logical ops on booleans (exact comparison)."""
from __future__ import annotations

from torchsim_diff.ops.pointwise import binary, unary

for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    binary(_name, f"torch.{_name}", rounding="exact", dtypes="int")
unary("bitwise_not", "torch.bitwise_not", rounding="exact", dtypes="int")

for _name in ("logical_and", "logical_or"):
    binary(_name, f"torch.{_name}", rounding="exact", lhs="bool", rhs="bool", dtypes="any", result_domain="bool")
unary("logical_not", "torch.logical_not", rounding="exact", domain="bool", dtypes="any", result_domain="bool")


# -- edges: two's complement at its ends (sign bit, smallest value), integer type promotion; a
# mask holding one truth value only, broadcast and 0-d masks. Read from torch's docs and
# Inductor's pointwise lowerings (lowering.py: bitwise_* and logical_* as one ops.* each).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import Form, Value, values_of  # noqa: E402

BITWISE_EDGES = (*values_of(0, "negative", "int min", "+0"), *values_of(1, "negative", "max"), Form(1, "scalar"),
                 Form(0, "scalar"), Form(1, "int64"), Form(1, "int32"))
LOGICAL_EDGES = (Value(0, "all true"), Value(0, "all false"), Value(1, "all true"), Value(1, "all false"),
                 Form(1, "stride 0"), Form(1, "0-d"))
declare_edges({
    "bitwise_and": BITWISE_EDGES,
    "bitwise_or": BITWISE_EDGES,
    "bitwise_xor": BITWISE_EDGES,
    "bitwise_not": values_of(0, "negative", "int min", "max", "+0"),
    "logical_and": LOGICAL_EDGES,
    "logical_or": LOGICAL_EDGES,
    "logical_not": (Value(0, "all true"), Value(0, "all false"), Form(0, "stride 0")),
})
