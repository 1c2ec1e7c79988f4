"""The `triton-spike` chain's tools and stages after TTIR: adapter, mlir-opt, translate, clang,
link. Each stage that fails raises RouteFailure(compile_error) with the stage's own name and
its tool's error lines, so every stage gets its own buckets.

`triton-adapter-opt` is the standalone executable inside the PyPI wheel triton-ascend==3.2.0
(MIT), taken out of the wheel by scripts/install_adapter.sh without installing the wheel (it
would replace `triton`). It lives in `.venv/lib/triton-adapter/`, with a SOURCE file naming
the wheel it came from, or an UNAVAILABLE file saying why the install step could not get it.

Worker-side module: standard library only (plus the `spike` route's tool lookup).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.routes.base import RouteFailure, Unsupported

ADAPTER_ENV = "TRITON_ADAPTER_OPT"
ADAPTER_DIR = os.path.join(sys.prefix, "lib", "triton-adapter")
ADAPTER_NAME = "triton-adapter-opt"
MLIR_OPT = "mlir-opt-19"
MLIR_TRANSLATE = "mlir-translate-19"
INSTALL_FIX = "run `bash scripts/setup.sh` (its install_adapter.sh step) from the repository root"

# The ttir_to_linalg pass list of triton-ascend 3.2.0's compiler.py, its CPU path
# (named-ops=False: linalg.generic rather than named ops the NPU back end wants).
ADAPTER_PASSES = (
    "--discrete-mask-access-conversion=compile-on-910-95=False force-simt-template=False",
    "--triton-to-annotation",
    "--triton-to-unstructure=compile-on-910-95=False force-simt-template=False",
    "--triton-to-hivm", "--triton-to-hfusion", "--triton-to-llvm", "--bubble-up-operation",
    "--triton-to-linalg=global-kernel=false named-ops=False enable-nd2nz-on-vector=False "
    "enable-select-analysis=False compile-on-910-95=False",
)
# The same wheel's linalg_to_llir pipeline, plus llvm-request-c-wrappers (the entry then takes
# descriptor pointers, `_mlir_ciface_<kernel>`, which the generated stub calls) and, after it so
# that the libm declarations keep plain C names, convert-math-to-libm (math ops without an LLVM
# intrinsic, e.g. tanh, become picolibc calls).
MLIR_OPT_PASSES = (
    "--convert-linalg-to-affine-loops", "--eliminate-empty-tensors", "--empty-tensor-to-alloc-tensor",
    "--one-shot-bufferize=allow-return-allocs-from-loops=true", "--lower-affine", "--convert-linalg-to-loops",
    "--convert-scf-to-cf", "--convert-cf-to-llvm", "--convert-arith-to-llvm", "--convert-math-to-llvm",
    "--convert-complex-to-llvm", "--convert-vector-to-llvm", "--convert-index-to-llvm", "--memref-expand",
    "--expand-strided-metadata", "--finalize-memref-to-llvm", "--llvm-request-c-wrappers",
    "--convert-math-to-libm", "--convert-func-to-llvm", "--lower-affine", "--convert-arith-to-llvm", "--reconcile-unrealized-casts",
)


def adapter_path() -> str | None:
    """The adapter executable: $TRITON_ADAPTER_OPT, the install step's copy, or PATH."""
    for candidate in (os.environ.get(ADAPTER_ENV), os.path.join(ADAPTER_DIR, ADAPTER_NAME)):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which(ADAPTER_NAME)


def adapter_missing_reason() -> str:
    """Why there is no adapter: the install step's recorded reason, or what to run."""
    recorded = os.path.join(ADAPTER_DIR, "UNAVAILABLE")
    if os.path.exists(recorded):
        with open(recorded) as handle:
            return f"{ADAPTER_NAME} is not installed: {handle.read().strip()}; {INSTALL_FIX} once it can"
    return f"{ADAPTER_NAME} not found ({ADAPTER_ENV}, {ADAPTER_DIR}, PATH); {INSTALL_FIX}"


def adapter_version(path: str) -> str:
    """'triton-ascend 3.2.0, LLVM 20.0.0git' (what the wheel and the binary say)."""
    source = os.path.join(os.path.dirname(path), "SOURCE")
    wheel = open(source).read().strip() if os.path.exists(source) else "unknown wheel"
    banner = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    llvm = re.search(r"LLVM version (\S+)", banner)
    return f"{wheel}, LLVM {llvm.group(1) if llvm else 'unknown'}"


@dataclasses.dataclass(frozen=True)
class Tools:
    adapter: str
    mlir_opt: str
    mlir_translate: str
    clang: str
    gcc: str
    spike: str

    @classmethod
    def locate(cls) -> "Tools":
        """Every tool of the chain, or LookupError naming the missing one and the fix."""
        from torchsim_diff.routes.spike.spike import Toolchain
        spike_tools = Toolchain.locate()
        adapter = adapter_path()
        if adapter is None:
            raise LookupError(adapter_missing_reason())
        found = {}
        for role, name in (("mlir_opt", MLIR_OPT), ("mlir_translate", MLIR_TRANSLATE)):
            found[role] = shutil.which(name)
            if not found[role]:
                raise LookupError(f"{name} not found on PATH (Debian package mlir-19-tools); {INSTALL_FIX}")
        return cls(adapter=adapter, clang=spike_tools.clang, gcc=spike_tools.gcc, spike=spike_tools.spike, **found)


# A chain tool that runs this long is stopped and the case is a `timeout` at that stage: a worker
# killed at the case's limit (120 s by default) would lose its cache and say nothing of where.
STAGE_TIMEOUT_S = 90.0


def run_stage(stage: str, command: list, metrics: RunMetrics, *, log: str | None = None,
              timeout_s: float = STAGE_TIMEOUT_S) -> None:
    """Run one tool; its time adds to the stage's in `metrics`; failure -> RouteFailure(stage).

    log: where the tool's whole output goes when it fails (the message keeps its error lines)."""
    with metrics.timed(stage):
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise RouteFailure(Kind.TIMEOUT, stage, f"{stage}: {os.path.basename(command[0])} ran past "
                               f"{timeout_s:.0f} s") from None
    if not done.returncode:
        return
    output = done.stderr or done.stdout
    if log:
        with open(log, "w") as handle:
            handle.write(output)
    missing = _MISSING_SOFT_FLOAT.search(output) if stage == "link" else None
    if missing:
        raise Unsupported(f"the kernel needs {missing.group(1)}, which the bare-metal libgcc lacks; pass an ISA "
                          f"with zfh/zfbfmin for half types (e.g. isa=rv64gcv_zfh)", stage="link")
    raise RouteFailure(Kind.COMPILE_ERROR, stage, f"{stage}: {os.path.basename(command[0])} "
                       f"{_status(done.returncode)}: {error_lines(output)}")


def _status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"failed (status {code})"


def error_lines(log: str, limit: int = 4) -> str:
    """The lines that say what went wrong, without source locations, and with the types of an
    unresolved materialization left out (the adapter names whichever it meets first)."""
    errors = [_normalised(line) for line in log.splitlines() if _ERROR.search(line)][:limit]
    if errors:
        # the types are dropped, but a value kept live by a discrete (gather/scatter) access is
        # another adapter path than a tile's: kept apart
        discrete = " (live user: a discrete memory access)" if _DISCRETE_USER.search(log) else ""
        return " | ".join(dict.fromkeys(errors)) + discrete
    # a crash without an error line: what precedes LLVM's stack dump, not the dump's addresses
    before_dump = re.split(r"^(?:PLEASE submit|Stack dump:|#0 )", log, maxsplit=1, flags=re.M)[0].strip()
    return before_dump[-600:] or "no message before the stack dump"


_DISCRETE_USER = re.compile(r"existing live user here: .*\{DiscreteMemAccess\}")
_MISSING_SOFT_FLOAT = re.compile(r"undefined reference to `(__\w*(?:hf|bf)\w*)'")
_ERROR = re.compile(r"error|undefined reference|Assertion .* failed|UNREACHABLE", re.I)
_LOCATION = re.compile(r"^\S*:\d+(?::\d+)?: ")
_MATERIALIZATION = re.compile(r"materialization from \(.*?\) to '[^']*'")


def _normalised(line: str) -> str:
    line = _LOCATION.sub("", line.strip())
    return _MATERIALIZATION.sub("materialization from <type> to <type>", line)


# tl.cumsum / tl.cumprod (scans) become calls of a body-less `@triton_cumsum_0(tensor<..>, axis, reverse)`
_LIBRARY_CALL = re.compile(r"^\s*func\.func private @(triton_(\w+?)_\d+)\(tensor<", re.M)
_LEFTOVER_TRITON_OP = re.compile(r'^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?"?(tt\.\w+)', re.M)


def check_adapter_output(text: str) -> None:
    """The adapter sometimes leaves a Triton op it cannot convert in its output and exits 0;
    mlir-opt would then fail on an 'unregistered dialect'. Named here, at the adapter's stage.
    A scan becomes a call of an NPU library function: unsupported, also at the adapter's stage."""
    library = _LIBRARY_CALL.search(text)
    if library:
        raise Unsupported(f"the adapter lowers {library.group(2)} to a call of @{library.group(1)}, a function of "
                          f"the NPU's runtime library with no body for the CPU chain", stage="adapter")
    leftover = sorted(set(_LEFTOVER_TRITON_OP.findall(text)) - {"tt.reduce.return"})
    if leftover:
        raise RouteFailure(Kind.COMPILE_ERROR, "adapter", f"adapter: left Triton op(s) {', '.join(leftover)} "
                           f"unconverted in its linalg output")
