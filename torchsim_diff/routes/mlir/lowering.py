"""Shared by the `mlir` and `spike` routes: torch.export -> torch-mlir linalg -> LLVM dialect.

One calling convention serves both routes. The lowered module exposes
``_mlir_ciface_main(in_0, ..., in_n, res_0, ..., res_m)``: every argument is a pointer to a
ranked memref descriptor ``{T *allocated, *aligned; int64 offset, sizes[rank], strides[rank]}``
over a contiguous buffer, and the results are out-parameters the caller allocates
(``buffer-results-to-out-params{modify-public-functions=1}``). Without that option the
results would come back as descriptors of buffers the callee allocated, and a harness that
reads its own out buffers reads garbage with no error.

torch.export functionalises in-place ops: the lowered function returns the final values of
mutated inputs first, then the program's outputs; `GraphSignature.results` records which is
which so the routes can write mutations back into the caller's views.

Worker-side module: torch_mlir is imported inside functions only.
"""
from __future__ import annotations

import dataclasses
import re
import warnings

import torch

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.routes.base import ReportFacts, RouteFailure, Unsupported

ENTRY = "torchsim_kernel"

# Dtypes that cross the function boundary as memrefs; anything else is Unsupported.
SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                    torch.int16, torch.int8, torch.uint8, torch.bool)

# Re-assembled from torch-mlir's RefBackend pipeline (not shipped in the wheel), with
# results turned into out-parameters and C wrappers requested for every function.
LINALG_TO_LLVM = ",".join([
    "func.func(linalg-generalize-named-ops)", "func.func(linalg-fuse-elementwise-ops)",
    "convert-shape-to-std",
    "func.func(refback-generalize-tensor-pad)", "func.func(refback-generalize-tensor-concat)",
    "func.func(tm-tensor-bufferize)",
    "one-shot-bufferize{copy-before-write bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}",
    "refback-mlprogram-bufferize",
    "buffer-results-to-out-params{modify-public-functions=1}",
    "buffer-deallocation-pipeline",
    "func.func(tm-tensor-to-loops)", "func.func(refback-munge-memref-copy)",
    "func.func(convert-linalg-to-loops)", "func.func(lower-affine)", "convert-scf-to-cf",
    "func.func(refback-expand-ops-for-llvm)", "func.func(arith-expand)",
    "func.func(convert-math-to-llvm)", "convert-math-to-libm", "expand-strided-metadata",
    "finalize-memref-to-llvm", "lower-affine", "convert-bufferization-to-memref",
    "finalize-memref-to-llvm", "func.func(convert-arith-to-llvm)", "convert-vector-to-llvm",
    "func.func(llvm-request-c-wrappers)", "convert-func-to-llvm", "convert-cf-to-llvm",
    "convert-complex-to-llvm", "reconcile-unrealized-casts",
])

# An aten op without a lowering (torch.aten.X), or one torch-mlir does not know at all
# (torch.operator named "torch.aten.X"): coverage, not a bug.
_LEGALIZE_FAILURE = re.compile(r"failed to legalize operation '(torch\.aten\.[\w.]+)'"
                               r"|failed to legalize operation 'torch\.operator'.*?name = \"(torch\.aten\.[\w.]+)\"")

# What a bug report says of the routes through torch-mlir (mlir, and spike after it): a case that
# cannot run on the host stops after torch-mlir's import, where most of its bugs show.
REPORT = ReportFacts(project="torch-mlir", toolchain="torch-mlir", script=("", "torch-mlir"), import_only=True,
                     plainest=3, dists=("torch-mlir",),
                     compiler={"torch-mlir": "fx.export_and_import (linalg-on-tensors)",
                               "pytorch": "torch.export with torch-mlir's decompositions"})


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one memref crossing the function boundary."""

    shape: tuple
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for size in self.shape:
            n *= size
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Result:
    """One function result: a program output (`output` index) or a mutated input (`input` index)."""

    spec: TensorSpec
    role: str          # "output" | "mutation"
    index: int


@dataclasses.dataclass
class GraphSignature:
    inputs: list       # TensorSpec per program input, in order
    results: list      # Result per function result, in order (= out-parameter order)

    @property
    def n_outputs(self) -> int:
        return sum(1 for r in self.results if r.role == "output")


@dataclasses.dataclass
class LoweredGraph:
    """A program lowered to the LLVM dialect, with the texts worth keeping as artifacts."""

    linalg: str
    llvm_dialect: str
    module: object     # torch_mlir.ir.Module in the LLVM dialect (owns its context)
    signature: GraphSignature


class _ProgramModule(torch.nn.Module):
    def __init__(self, program):
        super().__init__()
        self.program = program

    def forward(self, *inputs):
        return tuple(self.program(*inputs))


def check_dtypes(tensors) -> None:
    """Raise Unsupported for an input dtype the lowering cannot pass."""
    for position, t in enumerate(tensors):
        if t.dtype not in SUPPORTED_DTYPES:
            raise Unsupported(f"dtype {t.dtype} of input {position} is not supported by this route "
                              f"(supported: {', '.join(str(d) for d in SUPPORTED_DTYPES)})")


def contiguous_copies(inputs) -> list:
    """The route boundary: every input as a fresh contiguous tensor (views are not aliased)."""
    return [t.detach().clone(memory_format=torch.contiguous_format) for t in inputs]


def export_program(program, example_inputs):
    """torch.export the program on contiguous copies and run torch-mlir's decompositions."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    try:
        with warnings.catch_warnings():
            # torch deep-copies its own pytree specs here and warns about its own deprecated
            # LeafSpec, once per copy: hundreds of lines per case that nobody can act on.
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            exported = torch.export.export(_ProgramModule(program), tuple(contiguous_copies(example_inputs)),
                                           strict=False)
            return exported.run_decompositions(get_decomposition_table())
    except Exception as error:  # noqa: BLE001 - any export failure is the import stage's verdict
        raise RouteFailure(Kind.COMPILE_ERROR, "import", f"torch.export failed: {_first_lines(error)}") from None


def signature_of(exported, n_inputs: int) -> GraphSignature:
    """Input specs and the role of every function result, from the functionalised graph."""
    from torch.export.graph_signature import OutputKind
    sig = exported.graph_signature
    user_inputs = list(sig.user_inputs)
    output_node = next(n for n in exported.graph.nodes if n.op == "output")
    values = [arg.meta["val"] for arg in output_node.args[0]]
    results, n_outputs = [], 0
    for spec, value in zip(sig.output_specs, values):
        if not isinstance(value, torch.Tensor):
            raise Unsupported(f"non-tensor program output {value!r}", stage="import")
        tensor_spec = TensorSpec(tuple(int(s) for s in value.shape), value.dtype)
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            results.append(Result(tensor_spec, "mutation", user_inputs.index(spec.target)))
        elif spec.kind == OutputKind.USER_OUTPUT:
            results.append(Result(tensor_spec, "output", n_outputs))
            n_outputs += 1
        else:
            raise Unsupported(f"export produced a {spec.kind.name} output; only user outputs and "
                              "user-input mutations are supported", stage="import")
    inputs = [TensorSpec(tuple(int(s) for s in n.meta["val"].shape), n.meta["val"].dtype)
              for n in exported.graph.nodes if n.op == "placeholder" and n.name in user_inputs]
    if len(inputs) != n_inputs:
        raise Unsupported(f"export kept {len(inputs)} of {n_inputs} inputs", stage="import")
    return GraphSignature(inputs, results)


class Diagnostics:
    """MLIR diagnostics of one context, kept for error messages instead of going to stderr.

    Capped: a pass that loops forever re-emitting one error must not eat memory.
    """

    LIMIT = 20

    def __init__(self):
        self.messages: list = []

    def __call__(self, diagnostic) -> bool:
        if len(self.messages) < self.LIMIT:
            self.messages.append(str(diagnostic.message))
        return True  # handled: nothing printed

    def text(self) -> str:
        unique = list(dict.fromkeys(self.messages))
        return "\n".join(unique[:8])


def import_to_linalg(exported):
    """FX import and torch -> linalg-on-tensors (stage "import").

    A torch op torch-mlir has no lowering for is coverage (Unsupported); any other failure,
    such as a leftover constant after a partial lowering, is a compile_error.
    """
    import torch_mlir.fx as tmfx
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_dialect
    from torch_mlir.extras.fx_importer import FxImporter
    context, diagnostics = ir.Context(), Diagnostics()
    torch_dialect.register_dialect(context)
    context.attach_diagnostic_handler(diagnostics)
    try:
        return tmfx.export_and_import(exported, output_type="linalg-on-tensors", func_name=ENTRY,
                                      fx_importer=FxImporter(context=context), decomposition_table={})
    except Exception as error:  # noqa: BLE001
        details = diagnostics.text() or _first_lines(error)
        missing = _LEGALIZE_FAILURE.search(details)
        if missing:
            op = missing.group(1) or missing.group(2)
            raise Unsupported(f"torch-mlir cannot lower {op} to linalg: {details}", stage="import") from None
        raise RouteFailure(Kind.COMPILE_ERROR, "import", f"torch-mlir import failed: {details}") from None


def lower_to_llvm_dialect(module) -> None:
    """linalg-on-tensors -> LLVM dialect, in place (stage "lowering")."""
    import torch_mlir.dialects.torch  # noqa: F401 - registers the refback-* and tm-tensor-* passes
    from torch_mlir.passmanager import PassManager
    diagnostics = Diagnostics()
    handler = module.context.attach_diagnostic_handler(diagnostics)
    try:
        with module.context:
            PassManager.parse(f"builtin.module({LINALG_TO_LLVM})").run(module.operation)
    except Exception as error:  # noqa: BLE001
        raise RouteFailure(Kind.COMPILE_ERROR, "lowering", f"linalg -> LLVM lowering failed: "
                           f"{diagnostics.text() or _first_lines(error)}") from None
    finally:
        handler.detach()


def lower_program(program, example_inputs, metrics: RunMetrics) -> LoweredGraph:
    """All per-graph MLIR work shared by both routes; stage times go into `metrics`."""
    with metrics.timed("export"):
        exported = export_program(program, example_inputs)
        signature = signature_of(exported, len(example_inputs))
    for result in signature.results:
        if result.spec.dtype not in SUPPORTED_DTYPES:
            raise Unsupported(f"result dtype {result.spec.dtype} is not supported", stage="import")
    with metrics.timed("import"):
        module = import_to_linalg(exported)
        linalg = str(module)
    with metrics.timed("lowering"):
        lower_to_llvm_dialect(module)
    lowered = LoweredGraph(linalg=linalg, llvm_dialect=str(module), module=module, signature=signature)
    check_calling_convention(lowered)
    return lowered


def check_calling_convention(lowered: LoweredGraph) -> None:
    """The kernel must return nothing and its C wrapper take one descriptor per input and
    per result; otherwise callers would read and write the wrong buffers without an error
    (without modify-public-functions the wrapper's first argument is the returned descriptor)."""
    kernel = re.search(rf"llvm\.func @{ENTRY}\(.*", lowered.llvm_dialect)
    wrapper = re.search(rf"llvm\.func @_mlir_ciface_{ENTRY}\(([^)]*)\)", lowered.llvm_dialect)
    expected = len(lowered.signature.inputs) + len(lowered.signature.results)
    found = wrapper.group(1).count("%arg") if wrapper else None
    returns = kernel is None or ") -> " in kernel.group(0).split(" attributes")[0]
    if found != expected or returns:
        raise RouteFailure(Kind.TOOL_ERROR, "lowering", f"_mlir_ciface_{ENTRY} takes {found} descriptors "
                           f"(expected {expected}: {len(lowered.signature.inputs)} inputs, then "
                           f"{len(lowered.signature.results)} results as out-parameters) and the kernel "
                           f"{'returns a value' if returns else 'returns nothing'}: the lowering's calling "
                           "convention changed")


def write_back(results: list, signature: GraphSignature, inputs) -> tuple:
    """Copy mutated values into the caller's views; return the program outputs in order."""
    outputs = [None] * signature.n_outputs
    for value, result in zip(results, signature.results):
        if result.role == "mutation":
            inputs[result.index].copy_(value)
        else:
            outputs[result.index] = value
    return tuple(outputs)


def _first_lines(error: Exception, limit: int = 30) -> str:
    lines = str(error).strip().splitlines()
    head = "\n".join(lines[:limit])
    return f"{type(error).__name__}: {head}" + ("\n..." if len(lines) > limit else "")
