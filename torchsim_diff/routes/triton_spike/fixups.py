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
_EXTERN = re.compile(r'tt\.extern_elementwise ([^{]*?) \{[^}]*symbol = "__nv_(\w+)"\} : \(([^)]*)\) -> (\S+)')


def libdevice_name(symbol: str) -> str:
    """__nv_expf -> exp, __nv_exp -> exp, __nv_fast_expf -> fast_exp."""
    return symbol[:-1] if symbol.endswith("f") and symbol[:-1] in LIBDEVICE_TO_MATH else symbol


def _libdevice_call(match: re.Match) -> str:
    operands, symbol, result_type = match.group(1), match.group(2), match.group(4)
    name = libdevice_name(symbol)
    if name not in LIBDEVICE_TO_MATH:
        raise Unsupported(f"libdevice __nv_{symbol} has no math-dialect equivalent in the triton-spike "
                          f"chain (known: {', '.join(sorted(LIBDEVICE_TO_MATH))})", stage="ttir")
    return f"{LIBDEVICE_TO_MATH[name]} {operands} : {result_type}"


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
