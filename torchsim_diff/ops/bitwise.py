"""Bitwise ops on integers and logical ops on booleans (exact comparison)."""
from __future__ import annotations

from torchsim_diff.ops.pointwise import binary, unary

for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    binary(_name, f"torch.{_name}", rounding="exact", dtypes="int")
unary("bitwise_not", "torch.bitwise_not", rounding="exact", dtypes="int")

for _name in ("logical_and", "logical_or"):
    binary(_name, f"torch.{_name}", rounding="exact", lhs="bool", rhs="bool", dtypes="any", result_domain="bool")
unary("logical_not", "torch.logical_not", rounding="exact", domain="bool", dtypes="any", result_domain="bool")
