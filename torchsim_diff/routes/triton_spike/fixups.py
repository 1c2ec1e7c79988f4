"""Textual fix-ups between the versions the `triton-spike` chain joins, as one table.

Triton 3.9 prints TTIR that the adapter (`triton-adapter-opt` from triton-ascend 3.2.0,
Triton 3.2 dialects, LLVM 20) cannot read, and the adapter prints linalg that Debian's
mlir-opt-19 cannot read. Each rule names what it rewrites and why; a version bump of either
side shows which rules to re-check (tests/routes/test_triton_spike_fixups.py covers each).

    text = apply(TTIR_FIXUPS, ttir)      # may raise Unsupported (a libdevice call with no math op)
    text = apply(LINALG_FIXUPS, linalg)

Worker-side module: standard library only.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

from torchsim_diff.routes.base import Unsupported


@dataclasses.dataclass(frozen=True)
class Fixup:
    """One rewrite: `pattern` replaced by `replacement` (a string or a function of the match)."""

    name: str
    why: str
    pattern: re.Pattern
    replacement: str | Callable[[re.Match], str]

    def __call__(self, text: str) -> str:
        return self.pattern.sub(self.replacement, text)


# libdevice (CUDA's __nv_* names, what Inductor's libdevice.* and tl.math become for a CUDA
# target) -> the op Triton 3.2 itself emits for the same tl.* function. The "f" suffix is the
# float32 variant; both map to the same op, typed by its operand.
_MATH = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "tanh", "sin", "cos", "tan",
         "atan", "atan2", "erf", "floor", "ceil", "trunc", "round", "cbrt", "copysign", "fma")
LIBDEVICE_TO_MATH = {**{name: f"math.{name}" for name in _MATH}, "fabs": "math.absf", "rint": "math.roundeven",
                     "nearbyint": "math.roundeven", "pow": "math.powf", "fmod": "arith.remf"}
_EXTERN = re.compile(r'(%[\w.$-]+) = tt\.extern_elementwise ([^{]*?) \{[^}]*symbol = "__nv_(\w+)"\} '
                     r': \(([^)]*)\) -> (\S+)')


def libdevice_name(symbol: str) -> str:
    """__nv_expf -> exp, __nv_exp -> exp, __nv_isnand -> isnan, __nv_fast_expf -> fast_exp."""
    if symbol[:-1] in _PREDICATES and symbol[-1] in "fd":  # __nv_isnand: the double variant
        return symbol[:-1]
    return symbol[:-1] if symbol.endswith("f") and symbol[:-1] in LIBDEVICE_TO_MATH else symbol


# libdevice's float predicates (int result, non-zero when true) as exact arith/math ops: the
# i1 predicate, widened to the call's int result type.
_FLOAT_BITS = {"f32": ("i32", "0x7F800000"), "f64": ("i64", "0x7FF0000000000000")}
_PREDICATES = ("isnan", "isinf", "signbit")


def _predicate_ops(name: str, result: str, operand: str, operand_type: str, result_type: str) -> str:
    """Lines computing libdevice `name` of `operand` into `result` (SSA names with a prefix of
    their own, so they cannot clash with Triton's)."""
    element = re.search(r"(f32|f64)>?$", operand_type)
    if element is None:
        raise Unsupported(f"libdevice {name} of {operand_type} in the triton-spike chain", stage="ttir")
    int_type, inf_bits = _FLOAT_BITS[element.group(1)]
    def like(element_type: str) -> str:
        return operand_type[:element.start(1)] + element_type + operand_type[element.end(1):]
    def constant(value: str, type_: str) -> str:
        return f"dense<{value}> : {type_}" if type_.startswith("tensor") else f"{value} : {type_}"
    tmp = f"%tsd.{result.lstrip('%')}"
    if name == "isnan":
        ops = [f"{tmp}.p = arith.cmpf uno, {operand}, {operand} : {operand_type}"]
    elif name == "isinf":
        ops = [f"{tmp}.abs = math.absf {operand} : {operand_type}",
               f"{tmp}.inf = arith.constant {constant(inf_bits, like(int_type))}",
               f"{tmp}.inff = arith.bitcast {tmp}.inf : {like(int_type)} to {operand_type}",
               f"{tmp}.p = arith.cmpf oeq, {tmp}.abs, {tmp}.inff : {operand_type}"]
    else:
        ops = [f"{tmp}.bits = arith.bitcast {operand} : {operand_type} to {like(int_type)}",
               f"{tmp}.zero = arith.constant {constant('0', like(int_type))}",
               f"{tmp}.p = arith.cmpi slt, {tmp}.bits, {tmp}.zero : {like(int_type)}"]
    ops.append(f"{result} = arith.extui {tmp}.p : {like('i1')} to {result_type}")
    return "\n    ".join(ops)


def _libdevice_call(match: re.Match) -> str:
    result, operands, symbol, operand_types, result_type = match.groups()
    name = libdevice_name(symbol)
    if name in _PREDICATES:
        return _predicate_ops(name, result, operands.strip(), operand_types, result_type)
    if name not in LIBDEVICE_TO_MATH:
        raise Unsupported(f"libdevice __nv_{symbol} has no math-dialect equivalent in the triton-spike "
                          f"chain (known: {', '.join(sorted(LIBDEVICE_TO_MATH))})", stage="ttir")
    return f"{result} = {LIBDEVICE_TO_MATH[name]} {operands} : {result_type}"


TTIR_FIXUPS = (
    Fixup("cache-policy", "triton 3.9 prints load/store cache hints as {cachePolicy = #tt.cache_policy<..>}; "
          "the 3.2 dialect spells them differently. They are hints: dropped.",
          re.compile(r" \{cachePolicy = #tt\.cache_policy<[^>]*>\}|cachePolicy = #tt\.cache_policy<[^>]*>, "
                     r"|, cachePolicy = #tt\.cache_policy<[^>]*>"), ""),
    Fixup("assume", "triton 3.9 lowers tl.assume (Inductor's templates assume positive strides) to "
          "llvm.intr.assume, whose custom syntax the adapter's LLVM dialect cannot parse. A hint: dropped.",
          re.compile(r"^\s*llvm\.intr\.assume [^\n]*\n", re.M), ""),
    Fixup("libdevice", "a CUDA target turns libdevice calls into tt.extern_elementwise \"__nv_*\", which the "
          "adapter passes through and mlir-opt cannot lower; rewritten to the op Triton 3.2 emits.",
          _EXTERN, _libdevice_call),
)

LINALG_FIXUPS = (
    Fixup("annotation-mark", "the adapter leaves `annotation.mark` hints for its NPU back end, an "
          "unregistered dialect for mlir-opt-19: dropped.",
          re.compile(r"^\s*annotation\.mark [^\n]*\n", re.M), ""),
)


def apply(fixups, text: str) -> str:
    """`text` with every rule of `fixups` applied in order."""
    for fixup in fixups:
        text = fixup(text)
    return text
