"""What a torch-mlir bundle ships beside repro.py: mlir_host.py, which runs the lowered module
on the host so that repro.py compares values, and the IR a maintainer reads (torch.mlir as
imported, linalg.mlir after torch-mlir's lowering) with the torch-mlir-opt command between them.

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
    exported = exported.run_decompositions(get_decomposition_table())  # then none in the import, as the route
    lowered = fx.export_and_import(exported, output_type="linalg-on-tensors", func_name="main", decomposition_table={{}})
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


TORCH_IR, LINALG_IR = "torch.mlir", "linalg.mlir"
# What fx.export_and_import(output_type="linalg-on-tensors") runs on the imported module, as one
# torch-mlir-opt pipeline: torch.mlir -> linalg.mlir with torch-mlir alone.
TO_LINALG = ("builtin.module(func.func(torch-match-quantized-custom-ops),"
             "torchdynamo-export-to-torch-backend-pipeline{extra-library=},"
             "torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=true})")


def opt_command() -> str:
    """The torch-mlir-opt command that lowers torch.mlir as the route does."""
    return f"torch-mlir-opt --pass-pipeline='{TO_LINALG}' {TORCH_IR} -o {LINALG_IR}"


def write_ir(case, to_dir: str, *, lower: bool = True) -> list:
    """Write torch.mlir (the program as torch-mlir's FX importer emits it, after the route's
    decompositions) and, where torch-mlir lowers it, linalg.mlir; the names written. Nothing
    where torch-mlir or torch.export is missing or fails: repro.py shows that failure.
    lower=False: torch.mlir only (a lowering that hangs is the bug; the command shows it)."""
    import os

    try:
        from torch_mlir import fx, passmanager

        from torchsim_diff.case import layout
        from torchsim_diff.case.program_check import load_program
        from torchsim_diff.routes.mlir import lowering
        program = load_program(case.program_source())
        exported = lowering.export_program(program, layout.materialize_all(case.to_dict()))
        module = fx.export_and_import(exported, output_type="raw", func_name="main", decomposition_table={})
    except Exception:  # noqa: BLE001 - export or import failing is what repro.py reports
        return []
    written = [TORCH_IR]
    _write(os.path.join(to_dir, TORCH_IR), str(module))
    if not lower:
        return written
    try:
        with module.context:
            passmanager.PassManager.parse(TO_LINALG).run(module.operation)
    except Exception:  # noqa: BLE001 - the lowering failing is the bug; the command shows it
        return written
    _write(os.path.join(to_dir, LINALG_IR), str(module))
    return written + [LINALG_IR]


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
