"""The host runner a torch-mlir bundle ships (mlir_host.py), so that its repro.py compares values.

The mlir and spike routes lower torch-mlir's linalg with torchsim-diff's pass pipeline; a
maintainer has neither. When the bug is in torch-mlir's lowering (the values are wrong on
the host too), the bundle ships this short script instead: torch.export, torch-mlir's import,
the mlir route's pipeline, and MLIR's ExecutionEngine, with results as out-parameters.
"""
from __future__ import annotations

FILE = "mlir_host.py"

_TEMPLATE = '''"""torch-mlir's linalg lowered to LLVM and run on this host by MLIR's ExecutionEngine, as
torchsim-diff's mlir route does (the same pass pipeline, results as out-parameters)."""
import ctypes

import torch
import torch_mlir.dialects.torch  # noqa: F401 - registers torch-mlir's lowering passes
from torch_mlir import fx, passmanager
from torch_mlir.execution_engine import ExecutionEngine
from torch_mlir.extras.fx_decomp_util import get_decomposition_table
from torch_mlir.runtime import get_ranked_memref_descriptor

LOWERING = {pipeline!r}


def run(program, xs):
    """program(*xs)'s outputs as the lowered module computes them (inputs as contiguous copies)."""
    module = type("Program", (torch.nn.Module,), {{"forward": lambda self, *a: program(*a)}})()
    exported = torch.export.export(module, tuple(x.contiguous() for x in xs), strict=False)
    exported = exported.run_decompositions(get_decomposition_table())
    lowered = fx.export_and_import(exported, output_type="linalg-on-tensors", func_name="main")
    with lowered.context:
        passmanager.PassManager.parse(f"builtin.module({{LOWERING}})").run(lowered.operation)
    outs = [torch.empty(e.shape, dtype=e.dtype) for e in program(*xs)]
    arrays = [x.contiguous().numpy() for x in (*xs, *outs)]  # kept alive until the call returns
    descriptors = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in arrays]
    ExecutionEngine(lowered, opt_level=2).invoke("main", *descriptors)
    return outs
'''

# numpy carries these across the call; bfloat16 has no numpy dtype, float16 needs libgcc helpers.
HOST_DTYPES = ("float32", "float64", "int64", "int32", "int16", "int8", "uint8", "bool")


def source() -> str:
    """The text of mlir_host.py, with the mlir route's current pass pipeline."""
    from torchsim_diff.routes.mlir.lowering import LINALG_TO_LLVM
    return _TEMPLATE.format(pipeline=LINALG_TO_LLVM)


def runs_on_host(case) -> bool:
    """Whether mlir_host.run can run `case`: no mutated inputs (it writes nothing back) and
    only dtypes numpy carries."""
    return (not any(spec.get("mutated") for spec in case.inputs)
            and all(spec["dtype"] in HOST_DTYPES for spec in case.inputs))
