"""A kernel whose adapter output computes wrong values, reduced at IR level with the adapter
and a run of its linalg on this host as the oracle.

Each candidate TTIR goes the way the kernel bundle's repro.py goes (report.kernel_bundle): the
adapter's pass list, LLVM 19's mlir-opt, mlir-translate and clang into a shared library whose
malloc fills what it hands out, then the captured launch (same buffers, scalars and grid) in a
child process, once with malloc's memory filled with 0x47 and once with 0xC7. What "the wrong
value persists" means depends on what the whole kernel shows, decided once on it:

- `fill`: a buffer the kernel got wrong holds different values under the two fills. A kernel
  that reads only memory it wrote cannot depend on malloc's old bytes, so the dependence is the
  adapter's defect whatever the kernel computes; every op and operand may go (report.ttir_reduce),
  as long as one of those buffers still depends on the fill. A masked load without `other`
  leaves its masked-off lanes undefined in Triton itself, so each gets `other` = 0 first, and
  the mode is `fill` only if the dependence survives that.
- `expected`: the values are wrong but do not depend on the fill. Only Triton's interpreter
  knows the right values, and only for this kernel, so the reduction keeps what the wrong
  buffers are computed from: it removes the stores (and atomics) to the other buffers and the
  ops only they read, while the wrong buffers still differ from the interpreter's values (a
  buffer no longer written is then expected to keep its value from before the launch).

    outcome = reduce_launch(bundle, launch, budget_s=180)     # Reduction, or None (no oracle here)
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from torchsim_diff.report import ttir_reduce
from torchsim_diff.report.kernel_bundle import FILLS
BUDGET_S = 180.0            # per kernel: one candidate compiles with clang and runs twice, ~1-3 s
STEP_TIMEOUT_S = 120
# A candidate is a kernel nobody wrote: a mask or bound made zero can make it loop or allocate
# without end (one took 14 GB before these limits). Each launch gets this much memory and time.
LAUNCH_MEMORY = 1 << 30
LAUNCH_TIMEOUT_S = 20
# The child: load the library, run every program of the grid on the buffers, write them back.
# Standard library only, so that it starts at once; it reads a JSON spec written below.
CHILD = r'''import ctypes, json, os, sys
spec = json.load(open(sys.argv[1]))
kernel = getattr(ctypes.CDLL(spec["so"]), "_mlir_ciface_" + spec["kernel"])
class Memref(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p)] + [(f, ctypes.c_int64) for f in "ots"]
buffers, kept = {}, []
for name in spec["buffers"]:
    with open(os.path.join(spec["dir"], name + ".before"), "rb") as handle:
        data = handle.read()
    buffers[name] = ctypes.create_string_buffer(data, len(data))
def memref(memory, offset, elements):
    base = ctypes.addressof(memory)
    kept.append(Memref(base, base + offset, 0, elements, 1))
    return ctypes.byref(kept[-1])
scratch = ctypes.create_string_buffer(64)
args = [memref(scratch, 0, 64)] * 2 + [memref(buffers[a[1]], a[2], a[3]) if a[0] == "buffer"
                                       else getattr(ctypes, a[0])(a[1]) for a in spec["args"]]
gx, gy, gz = spec["grid"]
for z in range(gz):
    for y in range(gy):
        for x in range(gx):
            kernel(*args, *map(ctypes.c_int32, (gx, gy, gz, x, y, z)))
for name, memory in buffers.items():
    with open(os.path.join(spec["out"], name), "wb") as handle:
        handle.write(memory.raw)
'''


@dataclasses.dataclass
class Launch:
    """One captured launch: the kernel's name, grid, runtime arguments (kernel_bundle.launch_arguments),
    buffers before it and as Triton's interpreter leaves them ({name: tensor}), and whether the
    comparison is exact."""

    kernel: str
    grid: tuple
    args: list
    before: dict
    expected: dict
    exact: bool

    @classmethod
    def from_bundle(cls, bundle: str, kernel: str, grid: tuple, args: list, exact: bool) -> "Launch":
        import torch
        from torchsim_diff.report.kernel_bundle import LAUNCH_FILE
        saved = torch.load(os.path.join(bundle, LAUNCH_FILE), weights_only=True)
        return cls(kernel, tuple(grid), list(args), saved["before"], saved["expected"], exact)


@dataclasses.dataclass
class Reduction:
    """What reduce_launch did: the mode (module docstring), the wrong buffers, the reduced text,
    lines before and after, seconds, and what the two fills gave on the reduced kernel."""

    mode: str
    buffers: list
    text: str
    lines: tuple
    seconds: float
    evidence: str


class HostRun:
    """Builds candidate kernels and runs the launch in a scratch folder of its own."""

    def __init__(self, launch: Launch, tool: str):
        self.launch, self.tool = launch, tool
        self.folder = tempfile.mkdtemp(prefix="torchsim-diff-ttir-value-")
        with open(os.path.join(self.folder, "fill_malloc.c"), "w", encoding="utf-8") as handle:
            from torchsim_diff.report.kernel_bundle import FILL_MALLOC_C
            handle.write(FILL_MALLOC_C)
        with open(os.path.join(self.folder, "child.py"), "w", encoding="utf-8") as handle:
            handle.write(CHILD)
        for name, tensor in launch.before.items():
            with open(os.path.join(self.folder, name + ".before"), "wb") as handle:
                handle.write(tensor.contiguous().view(-1).numpy().tobytes() if tensor.numel() else b"")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def outputs(self, ttir: str) -> dict | None:
        """{fill: {buffer: tensor} or "signal N"} for `ttir`, None where it does not build."""
        so = self._build(ttir)
        if so is None:
            return None
        return {fill: self._run(so, fill) for fill in FILLS}

    def _build(self, ttir: str) -> str | None:
        from torchsim_diff.report.kernel_bundle import RUNNER_UTILS
        from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, MLIR_OPT_PASSES
        at = lambda name: os.path.join(self.folder, name)     # noqa: E731
        done = ttir_reduce.run_adapter(ttir, self.tool, ADAPTER_PASSES)
        if done is None or done.returncode or ttir_reduce.triton_ops(done.stdout):
            return None
        with open(at("kernel.linalg.mlir"), "w", encoding="utf-8") as handle:
            handle.write(re.sub(r"^\s*annotation\.mark [^\n]*\n", "", done.stdout, flags=re.M))
        steps = [["mlir-opt-19", at("kernel.linalg.mlir"), *MLIR_OPT_PASSES, "-o", at("kernel.llvm.mlir")],
                 ["mlir-translate-19", "--mlir-to-llvmir", at("kernel.llvm.mlir"), "-o", at("kernel.ll")],
                 ["clang-19", "-shared", "-fPIC", "-O2", "-Wno-override-module", at("kernel.ll"), at("fill_malloc.c"),
                  RUNNER_UTILS, "-Wl,--wrap=malloc", "-Wl,-rpath," + os.path.dirname(RUNNER_UTILS), "-o", at("kernel.so")]]
        for step in steps:
            try:
                if subprocess.run(step, capture_output=True, timeout=STEP_TIMEOUT_S).returncode:
                    return None
            except subprocess.TimeoutExpired:
                return None
        return at("kernel.so")

    def _run(self, so: str, fill: str):
        import torch
        out = tempfile.mkdtemp(dir=self.folder)
        spec = {"so": so, "kernel": self.launch.kernel, "grid": list(self.launch.grid), "dir": self.folder,
                "out": out, "buffers": sorted(self.launch.before), "args": [list(a) for a in self.launch.args]}
        with open(os.path.join(out, "spec.json"), "w", encoding="utf-8") as handle:
            json.dump(spec, handle)
        try:
            done = subprocess.run([sys.executable, os.path.join(self.folder, "child.py"), os.path.join(out, "spec.json")],
                                  capture_output=True, timeout=LAUNCH_TIMEOUT_S, preexec_fn=_limited,
                                  env={**os.environ, "REPRO_MALLOC_FILL": fill})
        except subprocess.TimeoutExpired:
            return "timeout"
        if done.returncode:
            return f"signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        got = {}
        for name, tensor in self.launch.before.items():
            with open(os.path.join(out, name), "rb") as handle:
                data = bytearray(handle.read())
            got[name] = torch.frombuffer(data, dtype=torch.uint8).view(tensor.dtype).clone() if data else tensor.clone()
        shutil.rmtree(out, ignore_errors=True)
        return got


def _limited() -> None:
    """In the launch's child, before it starts: at most LAUNCH_MEMORY of address space and
    LAUNCH_TIMEOUT_S of CPU."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (LAUNCH_MEMORY, LAUNCH_MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (LAUNCH_TIMEOUT_S, LAUNCH_TIMEOUT_S))


def wrong_buffers(launch: Launch, outputs: dict, expected: dict | None = None) -> list:
    """The buffers some fill leaves different from the interpreter's (all of them where a run crashed)."""
    expected = expected or launch.expected
    wrong = set()
    for got in outputs.values():
        if isinstance(got, str):
            return sorted(expected)
        wrong |= {name for name, want in expected.items() if not _close(got[name], want, launch.exact)}
    return sorted(wrong)


def fill_dependent(outputs: dict, buffers: list) -> list:
    """Those of `buffers` whose bytes differ between the fills."""
    first, second = (outputs[f] for f in FILLS)
    if isinstance(first, str) or isinstance(second, str):
        return []
    return [name for name in buffers if not _close(first[name], second[name], True)]


def _close(got, want, exact: bool) -> bool:
    import torch
    try:
        torch.testing.assert_close(got, want, equal_nan=True, **({"rtol": 0, "atol": 0} if exact else {}))
    except AssertionError:
        return False
    return True


# A masked tt.load with no `other` leaves its masked-off lanes undefined in Triton: the fill may
# show through them with no fault of the adapter's. Such a load gets other = 0 before the `fill`
# mode is chosen, and the reduction starts from that kernel.
_BARE_LOAD = re.compile(r'(?P<head>"tt\.load"\((?P<ptr>%[^,()]+), (?P<mask>%[^,()]+))\)(?P<attrs> <\{[^\n]*'
                        r'operandSegmentSizes = array<i32: 1, 1, )0(?P<rest>>\}> : \((?P<inputs>[^()]*))\) -> '
                        r'(?P<result>\S+)$', re.M)


def with_defined_loads(text: str) -> str:
    """`text` (generic form) with each masked tt.load that has no `other` given a zero `other`."""
    try:
        kernel = ttir_reduce.Kernel.parse(text)
    except ValueError:
        return text
    made: dict = {}
    def defined(match) -> str:
        result = match.group("result")
        if ttir_reduce.zero_constant(result) is None:
            return match.group(0)
        name = made.setdefault(result, f"%other{len(made)}")
        return (f'{match.group("head")}, {name}){match.group("attrs")}1{match.group("rest")}, {result}) -> {result}')
    body = _BARE_LOAD.sub(defined, "".join(op.text for op in kernel.ops))
    if not made:
        return text
    indent = re.match(r"\s*", kernel.ops[0].text).group(0)
    return kernel.head + "".join(f'{indent}{name} = "arith.constant"() <{{value = {ttir_reduce.zero_constant(t)}}}> '
                                 f': () -> {t}\n' for t, name in made.items()) + body + kernel.tail


def reduce_launch(ttir: str, launch: Launch, tool: str, budget_s: float = BUDGET_S) -> Reduction | None:
    """The kernel `ttir` reduced while its wrong values persist (module docstring), or None where
    the whole kernel shows no wrong value here."""
    started = time.monotonic()
    host = HostRun(launch, tool)
    try:
        outputs = host.outputs(ttir)
        if outputs is None:
            return None
        wrong = wrong_buffers(launch, outputs)
        if not wrong:
            return None
        moving = fill_dependent(outputs, wrong)
        generic = ttir_reduce.generic_form(ttir, tool)
        defined = with_defined_loads(generic) if moving and generic else ttir
        if moving and defined != generic:       # is the fill still seen once no lane is undefined?
            given = host.outputs(defined)
            moving = fill_dependent(given, moving) if given is not None else []
        if moving:
            ttir_start = defined if defined != generic else ttir
            def still_fails(text: str) -> bool:
                got = host.outputs(text)
                return got is not None and bool(fill_dependent(got, moving))
            reduced = ttir_reduce.reduce_text(ttir_start, tool, still_fails, budget_s)
            mode, evidence = "fill", _fill_evidence(host.outputs(reduced), moving)
        else:
            reduced, kept = _without_other_stores(ttir, launch, tool, wrong, host, started + budget_s)
            mode, evidence = "expected", f"buffers written: {', '.join(kept)}"
        return Reduction(mode, moving or wrong, reduced, (len(ttir.splitlines()), len(reduced.splitlines())),
                         round(time.monotonic() - started, 1), evidence)
    finally:
        host.close()


def _fill_evidence(outputs: dict | None, buffers: list) -> str:
    """`buf1[0]`: 0.0 with 0x47, -102286.6 with 0xC7 (the first element the fills change)."""
    if outputs is None:
        return ""
    for name in buffers:
        first, second = (outputs[f] for f in FILLS)
        if isinstance(first, str) or isinstance(second, str):
            continue
        differ = (first[name].view(-1) != second[name].view(-1)).nonzero()
        if len(differ):
            k = int(differ[0, 0])
            return (f"`{name}[{k}]`: {first[name].view(-1)[k].item()!r} with malloc's memory filled with {FILLS[0]}, "
                    f"{second[name].view(-1)[k].item()!r} with {FILLS[1]}")
    return ""


def expected_after(launch: Launch, written: list) -> dict:
    """The interpreter's values for the buffers still written, the values from before the launch
    for the others (a kernel that no longer stores to a buffer leaves it as it was)."""
    return {name: want if name in written else launch.before[name] for name, want in launch.expected.items()}


def _without_other_stores(ttir: str, launch: Launch, tool: str, wrong: list, host: HostRun, deadline: float) -> tuple:
    """(text, buffers still written): the `expected` mode's reduction."""
    text = ttir_reduce.generic_form(ttir, tool)
    if text is None:
        return ttir, sorted(launch.expected)
    kernel = ttir_reduce.Kernel.parse(text)
    targets = store_targets(kernel, launch)
    others = [k for k, name in targets.items() if name not in wrong]

    def render(dropped) -> str:
        gone = set(dropped)
        return kernel.render(gone | kernel.dead(gone))

    def still_fails(dropped) -> bool:
        if time.monotonic() > deadline:
            return False
        written = sorted({targets[k] for k in targets if k not in dropped})
        got = host.outputs(render(dropped))
        return got is not None and set(wrong) <= set(wrong_buffers(launch, got, expected_after(launch, written)))
    from torchsim_diff.delta import needed_parts
    kept = needed_parts(others, still_fails)
    dropped = [k for k in others if k not in kept]
    written = sorted({targets[k] for k in targets if k not in dropped})
    if not dropped:
        return ttir, written
    reduced = ttir_reduce.generic_form(render(dropped), tool)
    pretty = ttir_reduce.run_adapter(reduced, tool, ()) if reduced else None
    return (pretty.stdout if pretty is not None and not pretty.returncode else reduced or ttir), written


def store_targets(kernel, launch: Launch) -> dict:
    """{index of a top-level store or atomic: the buffer its pointer is derived from}."""
    defined = {value: op for op in kernel.ops for value, _ in op.results}
    buffer_of_arg = {value: a[1] for (value, _), a in zip(kernel.arguments, launch.args) if a[0] == "buffer"}
    targets = {}
    for k, op in enumerate(kernel.ops):
        if op.name not in ttir_reduce.SIDE_EFFECTS or not op.operands:
            continue
        todo, seen, found = [op.operands[0][0]], set(), set()
        while todo:
            value = todo.pop()
            if value in seen:
                continue
            seen.add(value)
            if value in buffer_of_arg:
                found.add(buffer_of_arg[value])
            elif value in defined:
                todo += [v for v, _ in defined[value].operands]
        if len(found) == 1:
            targets[k] = found.pop()
    return targets
