"""Route `mlir`: torch-mlir FX import -> linalg-on-tensors -> LLVM, JIT-run on the host.

compile() does all per-graph work (export, import, lowering, JIT); the returned callable only
copies inputs into contiguous buffers, calls ``_mlir_ciface_torchsim_kernel`` through MLIR's
ExecutionEngine with out-parameter buffers it allocated (the calling convention of
`mlir_lowering`), and writes mutated inputs back into the caller's views.
Stages: import, lowering, translation (LLVM IR artifact), compile (the JIT).
"""
from __future__ import annotations

import ctypes
import functools
import re
import time

import torch

from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.mlir import lowering as lowering
from torchsim_diff.routes.base import Compiled, Route, RouteFailure, Unsupported


@functools.lru_cache(maxsize=None)
def _descriptor_type(rank: int):
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


def memref_descriptor(tensor: torch.Tensor):
    """A ranked memref descriptor (by ctypes) over a contiguous tensor's storage."""
    rank = tensor.dim()
    descriptor = _descriptor_type(rank)()
    descriptor.allocated = descriptor.aligned = tensor.data_ptr()
    descriptor.offset = 0
    if rank:
        descriptor.sizes[:] = list(tensor.shape)
        descriptor.strides[:] = list(tensor.stride())
    return descriptor


class MlirJitCompiled(Compiled):
    def __init__(self, engine, signature: lowering.GraphSignature):
        self.engine = engine
        self.signature = signature

    def __call__(self, inputs, ctx):
        buffers = lowering.contiguous_copies(inputs)
        results = [torch.empty(r.spec.shape, dtype=r.spec.dtype) for r in self.signature.results]
        descriptors = [memref_descriptor(t) for t in buffers + results]
        started = time.perf_counter()
        self.engine.invoke(lowering.ENTRY, *[ctypes.pointer(ctypes.pointer(d)) for d in descriptors])
        ctx.metrics.stage_s["kernel"] = time.perf_counter() - started
        return lowering.write_back(results, self.signature, inputs)


class MlirJitRoute(Route):
    name = "mlir"
    report = lowering.REPORT
    description = "torch-mlir FX import -> linalg-on-tensors -> LLVM, run by MLIR's ExecutionEngine on the host"
    boundary = ("inputs copied to contiguous buffers at the route boundary (strided access inside the "
                "graph comes from view ops); mutated inputs written back into the caller's views")

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        self._libraries: list | None = None

    def available(self):
        try:
            import torch_mlir  # noqa: F401
            from torch_mlir.execution_engine import ExecutionEngine  # noqa: F401
        except Exception as error:  # noqa: BLE001
            return False, (f"torch-mlir is not importable ({type(error).__name__}: {error}); "
                           "install it with `bash scripts/setup.sh`")
        return True, f"torch-mlir {self.versions().get('torch_mlir', '?')}"

    def compile(self, program, example_inputs, ctx):
        lowering.check_dtypes(example_inputs)
        lowered = lowering.lower_program(program, example_inputs, ctx.metrics)
        _write(ctx.artifact("kernel.linalg.mlir"), lowered.linalg)
        _write(ctx.artifact("kernel.llvm.mlir"), lowered.llvm_dialect)
        _write(ctx.artifact("kernel.ll"), _llvm_ir(lowered.module))
        missing = self._missing_helpers(lowered.llvm_dialect)
        if missing:
            raise Unsupported(f"the host's libgcc lacks {', '.join(missing)}, which x86 code for a cast to "
                              "bfloat16 calls (GCC 13's libgcc has it): the JIT cannot run this graph here")
        with ctx.metrics.timed("jit"):
            engine = self._jit(lowered.module)
        return MlirJitCompiled(engine, lowered.signature)

    def versions(self):
        from importlib.metadata import PackageNotFoundError, version
        found = super().versions()
        try:
            found["torch_mlir"] = version("torch-mlir")
        except PackageNotFoundError:
            found["torch_mlir"] = None
        return found

    def setup(self):
        self._libraries = helper_libraries()

    def _missing_helpers(self, llvm_dialect: str) -> list:
        """The conversion helpers the module's casts to bfloat16 need that no library of the
        JIT defines: ExecutionEngine would fail on them with only "Unknown function"."""
        if self._libraries is None:
            self.setup()
        needed = {BF16_TRUNCATION_HELPERS[source or "f32"] for source in _BF16_TRUNCATION.findall(llvm_dialect)}
        return sorted(name for name in needed if not _defined(name, tuple(self._libraries)))

    def _jit(self, module):
        from torch_mlir.execution_engine import ExecutionEngine
        if self._libraries is None:
            self.setup()
        try:
            engine = ExecutionEngine(module, opt_level=2, shared_libs=self._libraries)
            engine.lookup(lowering.ENTRY)  # JIT now, so that a run times only the kernel
            return engine
        except Exception as error:  # noqa: BLE001
            raise RouteFailure(Kind.COMPILE_ERROR, "compile", f"ExecutionEngine could not JIT the module "
                               f"(LLVM prints the missing symbols on stderr): {error}") from None


# x86 without AVX512-BF16 rounds a float to bfloat16 in libgcc (from GCC 13 on): for a cast,
# and for bfloat16 arithmetic, which it computes in float32 and rounds back.
BF16_TRUNCATION_HELPERS = {"f32": "__truncsfbf2", "f64": "__truncdfbf2"}
_BF16_TRUNCATION = re.compile(r"llvm\.fptrunc [^\n]*: (f32|f64) to bf16\b"
                              r"|llvm\.(?:fadd|fsub|fmul|fdiv|frem|intr\.\w+) [^\n]*: bf16\b")


@functools.lru_cache(maxsize=None)
def _defined(symbol: str, libraries: tuple) -> bool:
    """Whether the process, or one of `libraries`, defines `symbol`."""
    for library in (None, *libraries):
        try:
            if hasattr(ctypes.CDLL(library), symbol):
                return True
        except OSError:
            continue
    return False


def helper_libraries() -> list:
    """Paths of shared libraries the JIT must search besides the process's own symbols.

    x86 code for half precision calls libgcc's conversion helpers; the process resolves
    some of them (__truncsfhf2) but not others (__truncdfhf2) unless libgcc_s is named.
    """
    try:
        ctypes.CDLL("libgcc_s.so.1")
        with open("/proc/self/maps") as maps:
            return sorted({line.split()[-1] for line in maps if "/libgcc_s" in line})
    except OSError:
        return []


def _llvm_ir(module) -> str:
    """LLVM IR of the module, kept for reproducers (the JIT compiles the same module)."""
    from torch_mlir._mlir_libs._mlirDialectsLLVM import translate_module_to_llvmir
    try:
        return translate_module_to_llvmir(module.operation)
    except Exception as error:  # noqa: BLE001
        raise RouteFailure(Kind.COMPILE_ERROR, "translation", f"MLIR LLVM dialect -> LLVM IR failed: "
                           f"{error}") from None


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


