"""Our launcher: each Inductor kernel launch runs on Spike, as PyTorchSim's Triton route
launches its kernels, but right where that one was wrong (PR #308):

- every pointer argument sees its real storage: the descriptor's `aligned` pointer is the
  storage's start plus the view's storage offset, and the kernel indexes it with the exact
  strides Inductor planned (they are compiled into the kernel); several arguments viewing one
  storage share it;
- every storage goes in with its real contents (in/out buffers are never zero-seeded) and
  comes back whole, so guards, read-only inputs and untouched elements are compared;
- the grid is walked x fastest, then y, then z, each program getting num_programs and
  program_id in the adapter's calling convention (runtime/driver.c);
- block sizes and constexprs are the launch's own; the kernel is compiled for them.

Per kernel specialisation (source, name, signature, constexprs, ISA) the chain runs once:
TTIR (ttir.py) -> fix-ups (fixups.py) -> adapter -> mlir-opt -> translate -> clang -> link
(toolchain.py); the ELF is cached and every launch of it only writes in.bin and runs Spike.

The hooks `grid`, `constexprs` and `storage_contents` are what test doubles override to
reintroduce PyTorchSim's launcher bugs (tests/doubles/spike_launchers.py).

Worker-side module: standard library and torch; the chain's tools run as subprocesses.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import time

import torch

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.routes.base import RouteFailure, Unsupported
from torchsim_diff.routes.spike.spike import (
    ABI,
    HARNESS_MARCH,
    MEMORY_MAP,
    RUNTIME_DIR as SPIKE_RUNTIME_DIR,
    LOG_TAIL_CHARS,
    SpikeOptions,
    SpikeRun,
    classify_run,
)
from torchsim_diff.routes.triton_spike import fixups
from torchsim_diff.routes.triton_spike.toolchain import (
    ADAPTER_PASSES,
    MLIR_OPT_PASSES,
    Tools,
    check_adapter_output,
    run_stage,
)
from torchsim_diff.routes.triton_spike.ttir import TtirError, TtirServer

RUNTIME_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
RUNTIME_SOURCES = ((SPIKE_RUNTIME_DIR, "htif.c"), (RUNTIME_DIR, "driver.c"), (RUNTIME_DIR, "memref.c"))
MAGIC = 0x5452495350494B45
# Kernels whose result must equal the interpreter's bit for bit: no reduction, scan, dot or
# math function other than the correctly rounded ones (order and libm may legitimately differ).
NOT_BIT_EXACT = re.compile(r"\btt\.(?:reduce|scan|dot)\b|\bmath\.(?!absf|floor|ceil|trunc|sqrt\b|copysign|"
                            r"roundeven|round\b)\w+")
_ENTRY = re.compile(r"define void @_mlir_ciface_(\w+)\(([^)]*)\)")
_SCALAR_TYPES = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64", "fp32", "fp64"}


@dataclasses.dataclass(frozen=True)
class Specialisation:
    """What one compiled kernel depends on."""

    source: str
    kernel: str
    signature: tuple
    constexprs: tuple
    isa: str

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(dataclasses.astuple(self)).encode()).hexdigest()[:16]

    @property
    def folder_name(self) -> str:
        return f"{self.kernel}-{self.key[:8]}"


@dataclasses.dataclass
class Build:
    """A linked ELF for one specialisation and the files the chain made on the way."""

    elf: str
    folder: str
    bit_exact: bool
    n_pointers: int
    n_scalars: int
    artifacts: dict


@dataclasses.dataclass
class LaunchPlan:
    """One launch in the driver's terms (see runtime/driver.c for in.bin's layout)."""

    storages: list           # flat uint8 tensors sharing the real storages' memory
    pointers: list           # (storage index, byte offset, elements reachable) per pointer argument
    scalars: list            # raw 64-bit words per scalar argument
    grid: tuple

    def header(self) -> bytes:
        words = [MAGIC, len(self.storages), len(self.pointers), len(self.scalars), *self.grid]
        words += [s.numel() for s in self.storages]
        words += [w for p in self.pointers for w in p]
        words += self.scalars
        return struct.pack(f"<{len(words)}q", *[_signed64(w) for w in words])


class SpikeLauncher:
    """The launcher of route `triton-spike` (module docstring). `configure()` before use."""

    executor = "triton-spike"

    def __init__(self):
        self.tools: Tools | None = None
        self.options = SpikeOptions()
        self.workdir: str | None = None
        self.ctx = None
        self.ttir_server = TtirServer()
        self._builds: dict = {}
        self._runtime: dict = {}
        self._runs = 0
        # Spike's answers of this case's compiling run, by ELF and in.bin bytes: the checked run
        # repeats those launches, mostly on the same bytes (same inputs; fresh float outputs
        # poisoned alike by the capture), and Spike is deterministic for one ELF and one in.bin,
        # so such a launch runs on Spike once. Any byte that differs (e.g. an uninitialised
        # in/out buffer) runs Spike again.
        self._answers: dict = {}
        self.reused = 0
        self.spike_launches = 0   # this case's launches that ran on Spike, compiling run included
        self._unbuildable: dict = {}
        self._last_log = ""

    def configure(self, tools: Tools, options: SpikeOptions, workdir: str) -> "SpikeLauncher":
        self.tools, self.options, self.workdir = tools, options, workdir
        return self

    def begin(self, ctx) -> None:
        """Artifacts and metrics of the following launches go to `ctx`."""
        self.ctx = ctx

    def new_case(self) -> None:
        """Forget the previous case's Spike answers (a compiling run starts)."""
        self._answers.clear()
        self.spike_launches = 0

    def close(self) -> None:
        self.ttir_server.close()

    # ---- hooks (test doubles override these) -------------------------------------------
    def grid(self, launch) -> tuple:
        """(gx, gy, gz), program_id(0) first, as the launch asks."""
        return tuple(int(g) for g in launch.grid) + (1,) * (3 - len(launch.grid))

    def constexprs(self, launch) -> dict:
        """Block sizes and other constexprs the kernel is compiled for: the launch's own,
        including arguments Inductor declared constexpr (e.g. an xnumel of 1) and passes
        positionally."""
        positional = {name: value for name, value in zip(launch.arg_names, launch.args)
                      if launch.signature.get(name) == "constexpr"}
        return {**positional, **launch.extra_kwargs, **launch.constexprs}

    def storage_contents(self, launch, plan: LaunchPlan) -> list:
        """The bytes each storage starts with on Spike: its real contents."""
        return [storage.numpy().tobytes() for storage in plan.storages]

    # ---- one launch -----------------------------------------------------------------------
    def launch(self, launch) -> None:
        if self.tools is None:
            raise RouteFailure(Kind.TOOL_ERROR, "setup", "SpikeLauncher used before configure()")
        try:
            build = self.build(self.specialise(launch))
            plan = self.plan(launch)
        except Unsupported as cannot:
            self._run_on_host(launch, cannot)
            return
        if (len(plan.pointers), len(plan.scalars)) != (build.n_pointers, build.n_scalars):
            raise RouteFailure(Kind.TOOL_ERROR, "launch", f"{launch.kernel_name}: the launch has "
                               f"{len(plan.pointers)} pointer and {len(plan.scalars)} scalar arguments, the "
                               f"compiled entry {build.n_pointers} and {build.n_scalars}")
        launch.record_extra = {"bit_exact_with": ["interpreter"] if build.bit_exact else []}
        output = self._run(build, plan, self.storage_contents(launch, plan))
        launch.record_extra["spike_instret"] = _instret(self._last_log)   # the grid walk's, for TOGs
        self._write_back(plan, output)
        self.spike_launches += 1

    def _run_on_host(self, launch, cannot: Unsupported) -> None:
        """A kernel the chain cannot express (a scan, a scalar type the driver does not pass)
        runs in Triton's interpreter instead, so that the case's other kernels are still tested
        on Spike. The part is recorded in `host_parts`; such a case can fail, never pass (check.py)."""
        note_host_part(self.ctx, cannot.message)
        launch.execute()

    def specialise(self, launch) -> Specialisation:
        constexprs = self.constexprs(launch)
        signature = dict(launch.signature)
        for name, kind in signature.items():
            if kind == "constexpr" and name not in constexprs:
                raise Unsupported(f"constexpr {name} of {launch.kernel_name} has no value at launch", stage="ttir")
        return Specialisation(self._source(launch), launch.kernel_name, tuple(signature.items()),
                              tuple(sorted(constexprs.items())), self.options.isa)

    def plan(self, launch) -> LaunchPlan:
        storages, where, pointers, scalars = [], {}, [], []
        for name, arg in zip(launch.arg_names, launch.args):
            if isinstance(arg, torch.Tensor):
                key = arg.untyped_storage().data_ptr()
                if key not in where:
                    where[key] = len(storages)
                    storages.append(torch.empty(0, dtype=torch.uint8).set_(arg.untyped_storage()))
                item = arg.element_size()
                elements = arg.untyped_storage().nbytes() // item - arg.storage_offset()
                pointers.append((where[key], arg.storage_offset() * item, elements))
            elif launch.signature.get(name) != "constexpr":  # compiled into the kernel instead
                scalars.append(_scalar_bits(name, launch.signature.get(name), arg, launch.kernel_name))
        return LaunchPlan(storages, pointers, scalars, self.grid(launch))

    def _write_back(self, plan: LaunchPlan, output: bytes) -> None:
        cursor = 0
        for storage in plan.storages:
            size = storage.numel()
            storage.copy_(torch.frombuffer(bytearray(output[cursor:cursor + size]), dtype=torch.uint8))
            cursor += size

    # ---- Spike ----------------------------------------------------------------------------
    def _run(self, build: Build, plan: LaunchPlan, contents: list) -> bytes:
        header = plan.header()
        key = hashlib.sha256(b"".join([build.elf.encode(), header, *contents])).digest()
        if key in self._answers:
            self.reused += 1
            run, log = self._answers[key]
        else:
            run, log = self._simulate(build, header, contents)
            self._answers[key] = run, log
        if self.ctx is not None:
            _write(self.ctx.artifact(f"triton-spike/{os.path.basename(build.folder)}/spike.log"),
                   log[-LOG_TAIL_CHARS:])
        classify_run(run, sum(s.numel() for s in plan.storages))
        self._last_log = run.log
        self._record(run.log)
        return run.output

    def _simulate(self, build: Build, header: bytes, contents: list) -> tuple:
        self._runs += 1
        run_dir = os.path.join(build.folder, f"run{self._runs}")
        os.makedirs(run_dir)
        try:
            with open(os.path.join(run_dir, "in.bin"), "wb") as handle:
                handle.write(header)
                for data in contents:
                    handle.write(data)
            run = self._spike(build, run_dir)
        finally:
            log = _read(os.path.join(run_dir, "spike.log"))
            shutil.rmtree(run_dir, ignore_errors=True)
        return run, log

    def _spike(self, build: Build, run_dir: str) -> SpikeRun:
        command = [self.tools.spike, f"--isa={self.options.spike_isa}"]
        if self.options.max_instructions is not None:
            command.append(f"--instructions={self.options.max_instructions}")
        command.append(build.elf)
        started = time.perf_counter()
        try:
            done = subprocess.run(command, cwd=run_dir, capture_output=True, text=True,
                                  timeout=self.options.timeout_s)
        except subprocess.TimeoutExpired:
            raise RouteFailure(Kind.TIMEOUT, "run", f"Spike ran past timeout_s={self.options.timeout_s}") from None
        finally:
            self._add_time("spike", time.perf_counter() - started)
        _write(os.path.join(run_dir, "spike.log"), done.stdout + done.stderr)
        out_path = os.path.join(run_dir, "out.bin")
        output = open(out_path, "rb").read() if os.path.exists(out_path) else None
        return SpikeRun(done.returncode, done.stdout + done.stderr, output, self.options.max_instructions)

    def _record(self, log: str) -> None:
        if self.ctx is None:
            return
        retired = _instret(log)
        if retired is not None:
            # cost stays absent for a case that launched no kernel: nothing of it ran on Spike
            self.ctx.metrics.cost = (self.ctx.metrics.cost or 0) + retired
            self.ctx.metrics.cost_per_launch.append(retired)
        vlen = re.search(r"TORCHSIM vlen=(\d+)", log)
        if vlen:
            self.ctx.metrics.vlen = int(vlen.group(1))

    # ---- the chain, once per specialisation ----------------------------------------------
    def build(self, spec: Specialisation) -> Build:
        if spec.key in self._unbuildable:
            folder, cannot = self._unbuildable[spec.key]
            self._copy_artifacts(folder)
            raise cannot
        if spec.key not in self._builds:
            folder = os.path.join(self.workdir, spec.folder_name)
            os.makedirs(folder, exist_ok=True)
            try:
                self._builds[spec.key] = self._build(spec, folder)
            except Unsupported as cannot:
                self._unbuildable[spec.key] = folder, cannot
                raise
            finally:
                self._copy_artifacts(folder)
        else:
            self._copy_artifacts(self._builds[spec.key].folder)
        return self._builds[spec.key]

    def _build(self, spec: Specialisation, folder: str) -> Build:
        def path(name):
            return os.path.join(folder, name)
        _write(path("kernel.py"), spec.source)
        _write(path("specialisation.json"), json.dumps({"kernel": spec.kernel, "signature": dict(spec.signature),
                                                        "constexprs": dict(spec.constexprs), "isa": spec.isa},
                                                       indent=1))
        started = time.perf_counter()
        try:
            ttir = self.ttir_server.ttir(spec.source, spec.kernel, dict(spec.signature), dict(spec.constexprs))
        except TtirError as error:
            raise RouteFailure(Kind.COMPILE_ERROR, "ttir", f"ttir: {error}") from None
        finally:
            self._add_time("ttir", time.perf_counter() - started)
        _write(path("kernel.ttir"), ttir)
        fixed = fixups.apply(fixups.TTIR_FIXUPS, ttir)
        _write(path("kernel.fixed.ttir"), fixed)
        metrics = self.ctx.metrics if self.ctx is not None else RunMetrics()
        run_stage("adapter", [self.tools.adapter, path("kernel.fixed.ttir"), *ADAPTER_PASSES,
                              "-o", path("kernel.adapter.mlir")], metrics, log=path("adapter.log"))
        check_adapter_output(_read(path("kernel.adapter.mlir")))
        _write(path("kernel.linalg.mlir"), fixups.apply(fixups.LINALG_FIXUPS, _read(path("kernel.adapter.mlir"))))
        run_stage("mlir-opt", [self.tools.mlir_opt, path("kernel.linalg.mlir"), *MLIR_OPT_PASSES,
                               "-o", path("kernel.llvm.mlir")], metrics, log=path("mlir-opt.log"))
        run_stage("translate", [self.tools.mlir_translate, "--mlir-to-llvmir", path("kernel.llvm.mlir"),
                                "-o", path("kernel.ll")], metrics, log=path("translate.log"))
        n_pointers, n_scalars = self._add_program_stub(path("kernel.ll"), spec)
        flags = ["--target=riscv64-unknown-elf", f"-march={self.options.isa}", f"-mabi={ABI}",
                 "-mcmodel=medany", optimisation_level(path("kernel.ll")), "-Wno-override-module"]
        run_stage("clang", [self.tools.clang, *flags, "-c", path("kernel.ll"), "-o", path("kernel.o")], metrics,
                  log=path("clang.log"))
        run_stage("link", [self.tools.gcc, "--specs=picolibc.specs", "--crt0=hosted", f"-march={HARNESS_MARCH}",
                           f"-mabi={ABI}", "-mcmodel=medany", MEMORY_MAP, "-o", path("kernel.elf"),
                           path("kernel.o"), *self._runtime_objects(metrics), "-lm"], metrics, log=path("link.log"))
        return Build(path("kernel.elf"), folder, not NOT_BIT_EXACT.search(fixed), n_pointers, n_scalars,
                     {})

    def _add_program_stub(self, ll_path: str, spec: Specialisation) -> tuple:
        """Append `triton_spike_program` (runtime/triton_spike.h) to the LLVM IR: it loads each
        argument from the driver's tables and calls the adapter's entry with exactly the
        parameter types the lowered module declares. Returns (pointers, scalars)."""
        text = _read(ll_path)
        entry = _ENTRY.search(text)
        if entry is None:
            raise RouteFailure(Kind.COMPILE_ERROR, "translate", "translate: the lowered module has no "
                               "_mlir_ciface_ entry (was llvm-request-c-wrappers applied?)")
        types = [p.split()[0] for p in entry.group(2).split(",") if p.strip()]
        kinds = [kind for _, kind in spec.signature if kind != "constexpr"]
        params = types[2:-6]
        pointers_match = all((kind.startswith("*")) == (llvm == "ptr") for kind, llvm in zip(kinds, params))
        if len(params) != len(kinds) or not pointers_match or types[:2] != ["ptr", "ptr"] or types[-6:] != ["i32"] * 6:
            raise RouteFailure(Kind.TOOL_ERROR, "translate", f"unexpected entry signature "
                               f"_mlir_ciface_{entry.group(1)}({entry.group(2)}) for {dict(spec.signature)}")
        _write(ll_path, text + "\n" + program_stub(entry.group(1), params))
        return params.count("ptr"), len(params) - params.count("ptr")

    def _runtime_objects(self, metrics: RunMetrics) -> list:
        """driver.o, htif.o, memref.o: built once per launcher and vector setting."""
        vector = self.options.has_vector
        if vector not in self._runtime:
            folder = os.path.join(self.workdir, f"runtime-{'v' if vector else 'novector'}")
            os.makedirs(folder, exist_ok=True)
            objects = []
            for directory, source in RUNTIME_SOURCES:
                obj = os.path.join(folder, source.replace(".c", ".o"))
                run_stage("link", [self.tools.gcc, "--specs=picolibc.specs", f"-march={HARNESS_MARCH}",
                                   f"-mabi={ABI}", "-mcmodel=medany", "-O2", f"-I{SPIKE_RUNTIME_DIR}",
                                   f"-I{RUNTIME_DIR}", *(["-DTORCHSIM_VECTOR"] if vector else []), "-c",
                                   os.path.join(directory, source), "-o", obj], metrics)
                objects.append(obj)
            self._runtime[vector] = objects
        return self._runtime[vector]

    def _copy_artifacts(self, folder: str) -> None:
        """The chain's files for this kernel into the case's artifacts (triton-spike/<kernel>/)."""
        if self.ctx is None:
            return
        for name in ARTIFACT_FILES:
            source = os.path.join(folder, name)
            target = self.ctx.artifact(f"triton-spike/{os.path.basename(folder)}/{name}")
            if os.path.exists(source) and not os.path.exists(target):
                shutil.copyfile(source, target)

    def _source(self, launch) -> str:
        path = launch.source_path
        if path and os.path.exists(path):
            return _read(path)
        raise RouteFailure(Kind.TOOL_ERROR, "ttir", f"{launch.kernel_name}: Inductor left no kernel source file")

    def _add_time(self, stage: str, seconds: float) -> None:
        if self.ctx is not None:
            self.ctx.metrics.add_stage(stage, seconds)


def note_host_part(ctx, what: str) -> None:
    """Record in ctx's metrics a part of the case that ran on the host, not on Spike."""
    if ctx is not None:
        ctx.metrics.note_host_part(what)


# Triton unrolls tl.sort's bitonic network (static_range) into hundreds of TTIR ops, which the
# adapter lowers to millions of bytes of LLVM IR: clang -O3 (and -O1) then runs for minutes, -O0
# for seconds. Modules above this many lines are compiled without optimisation.
O3_MAX_LINES = 20_000


def optimisation_level(ll_path: str) -> str:
    with open(ll_path) as handle:
        lines = sum(1 for _ in handle)
    return "-O3" if lines <= O3_MAX_LINES else "-O0"


ARTIFACT_FILES = ("kernel.py", "specialisation.json", "kernel.ttir", "kernel.fixed.ttir", "kernel.adapter.mlir",
                  "kernel.linalg.mlir", "kernel.llvm.mlir", "kernel.ll", "adapter.log", "mlir-opt.log",
                  "translate.log", "clang.log", "link.log")


def program_stub(entry: str, params: list) -> str:
    """LLVM IR of triton_spike_program(lock, workspace, pointers, scalars, grid, pid).

    params: the LLVM types of the kernel's own arguments in order; each "ptr" takes the next
    descriptor, any other type the next scalar word."""
    lines = ["define void @triton_spike_program(ptr %lock, ptr %workspace, ptr %pointers, ptr %scalars, "
             "ptr %grid, ptr %pid) {"]
    args = ["ptr %lock", "ptr %workspace"]
    pointers = scalars = 0
    for llvm_type in params:
        if llvm_type == "ptr":
            lines.append(f"  %p{pointers} = getelementptr [5 x i64], ptr %pointers, i64 {pointers}")
            args.append(f"ptr %p{pointers}")
            pointers += 1
            continue
        name = f"s{scalars}"
        lines.append(f"  %{name}.at = getelementptr i64, ptr %scalars, i64 {scalars}")
        lines.append(f"  %{name}.raw = load i64, ptr %{name}.at")
        lines += _from_raw(name, llvm_type)
        args.append(f"{llvm_type} %{name}")
        scalars += 1
    for table in ("grid", "pid"):
        for axis in range(3):
            lines.append(f"  %{table}{axis}.at = getelementptr i32, ptr %{table}, i64 {axis}")
            lines.append(f"  %{table}{axis} = load i32, ptr %{table}{axis}.at")
            args.append(f"i32 %{table}{axis}")
    lines += [f"  call void @_mlir_ciface_{entry}({', '.join(args)})", "  ret void", "}", ""]
    return "\n".join(lines)


_INT_BITS = {"i1": 1, "i8": 8, "i16": 16, "i32": 32}


def _from_raw(name: str, llvm_type: str) -> list:
    """IR turning the raw i64 `%name.raw` into `%name` of `llvm_type`."""
    if llvm_type == "i64":
        return [f"  %{name} = add i64 %{name}.raw, 0"]
    if llvm_type in _INT_BITS:
        return [f"  %{name} = trunc i64 %{name}.raw to {llvm_type}"]
    if llvm_type == "float":
        return [f"  %{name}.bits = trunc i64 %{name}.raw to i32", f"  %{name} = bitcast i32 %{name}.bits to float"]
    if llvm_type == "double":
        return [f"  %{name} = bitcast i64 %{name}.raw to double"]
    raise Unsupported(f"scalar kernel argument of LLVM type {llvm_type} is not passed by the triton-spike "
                      f"launcher (i1..i64, float, double are)", stage="launch")


def _scalar_bits(name: str, kind: str | None, value, kernel: str) -> int:
    """The 64-bit word the driver passes for a scalar argument of Triton type `kind`."""
    if kind not in _SCALAR_TYPES:
        raise Unsupported(f"scalar argument {name} of {kernel} has Triton type {kind!r}; the triton-spike "
                          f"launcher passes {', '.join(sorted(_SCALAR_TYPES))}", stage="launch")
    if kind == "fp32":
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if kind == "fp64":
        return struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    return int(value)


def _signed64(word: int) -> int:
    word &= (1 << 64) - 1
    return word - (1 << 64) if word >= 1 << 63 else word


def _read(path: str) -> str:
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _instret(log: str) -> int | None:
    """Instructions the driver retired walking the grid (TORCHSIM instret=N), None if absent."""
    retired = re.search(r"TORCHSIM instret=(\d+)", log)
    return int(retired.group(1)) if retired else None
