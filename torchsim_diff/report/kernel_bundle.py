"""repro.py for a value bug of one Triton kernel on `triton-spike`: the first launch whose
result differs from Triton's interpreter, run on this host without torchsim-diff.

What the adapter writes is target-independent linalg, so a wrong value it computes on Spike
shows on the host as well. The bundle ships:

    kernel.ttir   the kernel as the route fed it to the adapter (after the TTIR fix-ups)
    kernel.py     Inductor's Triton source of it, to read
    launch.pt     each buffer the launch sees, before it runs and as Triton's interpreter
                  leaves it (torch.save of two {buffer: tensor} dicts; weights_only loads it)
    kernel.linalg.mlir  the adapter's output (repro.py writes it again)

and a repro.py that runs the adapter's pass list, lowers its linalg with LLVM 19's mlir-opt,
mlir-translate and clang into a shared library (memrefCopy from libmlir-19's runner utils),
walks the grid through ctypes in the adapter's calling convention (lock and workspace, then
the kernel's arguments, then num_programs and program_id, x fastest, as the route's Spike
driver does) and compares every buffer with the interpreter's. The launch runs twice, with
every byte the kernel mallocs filled first with 0x47, then with 0xC7 (large floats and ints
of either sign), so that a kernel reading memory before writing it cannot pass by luck. The
fill wraps malloc at link time: glibc's MALLOC_PERTURB_ skips the chunks its tcache hands
back, whose old bytes made the verdict depend on the host's heap. It exits 1 while they
differ, 0 once they agree, 2 when a tool is missing or a stage fails.

    written = write_kernel_bundle(case_artifacts, bundle, head)   # False: no such launch
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

from torchsim_diff.report.script_text import check_script, docstring
from torchsim_diff.results.kinds import Kind

KERNEL_FILE = "kernel.ttir"
SOURCE_FILE = "kernel.py"
LAUNCH_FILE = "launch.pt"
LINALG_FILE = "kernel.linalg.mlir"              # the adapter's output, which repro.py writes
SHIPPED = (KERNEL_FILE, SOURCE_FILE, LAUNCH_FILE, LINALG_FILE)
FILLS = ("0x47", "0xC7")     # each launch's malloc fill: 0x47474747 is 51015.3 or 1195853639, 0xC7C7C7C7 -102286.6 or < 0
BUILT = ("kernel.llvm.mlir", "kernel.ll", "fill_malloc.c", "kernel.so",     # what repro.py makes on the way: not shipped
         *(f"after.{fill}.pt" for fill in FILLS))
RUNNER_UTILS = "/usr/lib/llvm-19/lib/libmlir_c_runner_utils.so.19.1"   # Debian's libmlir-19
# Linked into kernel.so (-Wl,--wrap=malloc): every byte the kernel mallocs filled with $REPRO_MALLOC_FILL.
FILL_MALLOC_C = r"""#include <stdlib.h>
#include <string.h>
void *__real_malloc(size_t);
void *__wrap_malloc(size_t size) {
    void *memory = __real_malloc(size);
    const char *fill = getenv("REPRO_MALLOC_FILL");
    if (memory && fill) memset(memory, (int) strtol(fill, NULL, 16), size);
    return memory;
}
"""
# Scalar kernel arguments by Triton type, as ctypes passes them.
CTYPES = {"i1": "c_bool", "i8": "c_int8", "i16": "c_int16", "i32": "c_int32", "i64": "c_int64",
          "u8": "c_uint8", "u16": "c_uint16", "u32": "c_uint32", "u64": "c_uint64",
          "fp32": "c_float", "fp64": "c_double"}
# The kinds whose first divergent launch is looked for, and a crash: Spike stops at one launch.
LAUNCH_KINDS = Kind.values_where("localised") | {Kind.CRASH.value}


def is_kernel_value_bug(record) -> bool:
    """Whether `record` is a value failure or crash on triton-spike, which one launch may show alone."""
    return record.route == "triton-spike" and record.kind in LAUNCH_KINDS


class NoKernelRepro(Exception):
    """The failure cannot be shown by one launch on the host (the reason is the message)."""


def write_kernel_bundle(artifact_dir: str, bundle: str, head: str) -> tuple:
    """Write kernel.ttir, kernel.py, launch.pt and repro.py for the first launch under
    `artifact_dir` (a case's triton-spike artifacts) that Triton's interpreter computes
    differently; `head` is the docstring's first lines. (kernel name, grid, arguments, exact),
    what report.ttir_value_reduce needs to run the launch. Raises NoKernelRepro."""
    from torchsim_diff.routes.triton.localise import first_divergent_kernel
    capture = os.path.join(artifact_dir, "kernels")
    if not os.path.isdir(capture):
        raise NoKernelRepro("the run captured no kernel launch")
    found = first_divergent_kernel(capture, executor="interpreter", in_child=True)
    if found is None or found.get("error"):
        raise NoKernelRepro("every captured launch matches Triton's interpreter" if found is None
                            else f"Triton's interpreter cannot run the launch: {found['error']}")
    return write_launch(artifact_dir, found["folder"], bundle, head)


def write_launch(artifact_dir: str, launch_folder: str, bundle: str, head: str) -> tuple:
    """The bundle's files for the captured launch in `launch_folder` (see write_kernel_bundle)."""
    from torchsim_diff.report.adapter_bundle import record_provenance, without_folders
    from torchsim_diff.kernels.capture import CapturedLaunch
    meta = CapturedLaunch(launch_folder).meta
    chain = _chain_folder(artifact_dir, meta)
    args = launch_arguments(meta)
    expected = _interpreter_outputs(launch_folder)
    _write_launch(launch_folder, meta, expected, os.path.join(bundle, LAUNCH_FILE))
    _copy(os.path.join(chain, "kernel.fixed.ttir"), os.path.join(bundle, KERNEL_FILE), without_folders)
    _copy(os.path.join(launch_folder, meta["source"]), os.path.join(bundle, SOURCE_FILE))
    from torchsim_diff.routes.triton_spike.launcher import NOT_BIT_EXACT   # the route's own test
    exact = not NOT_BIT_EXACT.search(_read(os.path.join(bundle, KERNEL_FILE)))
    text = render_script(head, meta["kernel_name"], tuple(meta["grid"]), args, exact)
    with open(os.path.join(bundle, "repro.py"), "w", encoding="utf-8") as handle:
        handle.write(text)
    record_provenance(os.path.join(chain, "kernel.fixed.ttir"), bundle)
    return meta["kernel_name"], tuple(meta["grid"]), args, exact


def remove_built(bundle: str) -> None:
    """Remove what a run of repro.py compiled (BUILT): a bundle ships sources and IR."""
    for name in BUILT:
        if os.path.exists(os.path.join(bundle, name)):
            os.unlink(os.path.join(bundle, name))


def launch_arguments(meta: dict) -> list:
    """The launch's runtime arguments in order: ("buffer", name, byte offset, elements) per
    pointer, (ctypes type name, value) per scalar; constexprs are compiled into the kernel."""
    from torchsim_diff.kernels.capture import torch_dtype
    import torch
    arguments = []
    for arg in meta["args"]:
        kind = meta["signature"].get(arg["name"])
        if kind == "constexpr":
            continue
        if arg["kind"] == "tensor":
            item = torch.empty((), dtype=torch_dtype(arg["dtype"])).element_size()
            buffer = meta["buffers"][arg["buffer"]]
            offset = arg["storage_offset"] * item
            arguments.append(("buffer", arg["buffer"], offset, (buffer["nbytes"] - offset) // item))
        elif kind in CTYPES:
            value = float(arg["value"]) if kind.startswith("fp") else int(arg["value"])
            arguments.append((CTYPES[kind], value))
        else:
            raise NoKernelRepro(f"scalar argument {arg['name']} of Triton type {kind!r} has no ctypes form here")
    return arguments


def _chain_folder(artifact_dir: str, meta: dict) -> str:
    """The route's folder for the launch's kernel specialisation (same name and constexprs)."""
    for spec_path in sorted(glob.glob(os.path.join(artifact_dir, "triton-spike", "*", "specialisation.json"))):
        with open(spec_path, encoding="utf-8") as handle:
            spec = json.load(handle)
        same = all(spec.get("constexprs", {}).get(k) == v for k, v in meta.get("constexprs", {}).items())
        folder = os.path.dirname(spec_path)
        if spec.get("kernel") == meta["kernel_name"] and same and os.path.exists(os.path.join(folder, "kernel.fixed.ttir")):
            return folder
    raise NoKernelRepro(f"the route left no TTIR for {meta['kernel_name']}")


def _interpreter_outputs(launch_folder: str) -> dict:
    """{buffer: bytes} after Triton's interpreter runs the captured launch (in a child Python,
    which keeps the interpreter's shims out of this process)."""
    import tempfile
    from torchsim_diff.routes.triton.launch_replay import executor_env
    out = tempfile.mkdtemp(prefix="torchsim-diff-expected-")
    command = [sys.executable, "-m", "torchsim_diff.routes.triton.launch_replay", "--executor", "interpreter",
               "--outputs-to", out, launch_folder]
    done = subprocess.run(command, capture_output=True, text=True, env=executor_env("interpreter"))
    if done.returncode not in (0, 1):
        raise NoKernelRepro(f"Triton's interpreter could not run the launch: {done.stderr.strip()[-300:]}")
    return {name[:-len(".bin")]: open(os.path.join(out, name), "rb").read() for name in os.listdir(out)}


def _write_launch(launch_folder: str, meta: dict, expected: dict, path: str) -> None:
    import torch
    from torchsim_diff.kernels.capture import CapturedLaunch, torch_dtype
    launch = CapturedLaunch(launch_folder)
    def typed(data: bytes, dtype_name: str):
        return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(torch_dtype(dtype_name)).clone()
    before = {name: typed(launch.buffer_bytes(name, "before"), b["dtype"]) for name, b in meta["buffers"].items()}
    after = {name: typed(expected[name], b["dtype"]) for name, b in meta["buffers"].items()}
    torch.save({"before": before, "expected": after}, path)


def render_script(head: str, kernel: str, grid: tuple, arguments: list, exact: bool, fill_judged: tuple = ()) -> str:
    """repro.py for one launch of `kernel` (see the module docstring). fill_judged: buffers whose
    values must not depend on malloc's fill; repro.py then compares the two fills' values of them
    with each other, not every buffer with Triton's interpreter (a reduced kernel, whose right
    values nobody knows, shows a defect that way: report.ttir_value_reduce's `fill` mode)."""
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, MLIR_OPT_PASSES
    doc = (f"{head}\nExit 1: reproduces, 0: fixed, 2: cannot run here (needs torch, triton-adapter-opt, and LLVM 19's "
           f"mlir-opt-19, mlir-translate-19, clang-19 and libmlir-19).")
    fixed = ("FIXED: the buffers do not depend on malloc's fill" if fill_judged else
             "FIXED: every buffer matches Triton's interpreter")
    tolerance = ("dict(rtol=0, atol=0)  # exact: the kernel has no reduction, dot or inexact math" if exact else
                 "{}  # torch.testing's default for the dtype: a reduction or libm may round differently")
    text = f'''{docstring(doc)}
import ctypes
import os
import re
import shutil
import subprocess
import sys
try:
    import torch
except ImportError as exc:
    sys.exit(print(f"cannot run here: {{exc}}") or 2)

PASSES = {_wrapped(ADAPTER_PASSES)}  # triton-ascend 3.2.0's ttir_to_linalg, its CPU path
LOWER = {_wrapped(MLIR_OPT_PASSES)}  # its linalg_to_llir, with C wrappers for the entry
RUNNER_UTILS = "{RUNNER_UTILS}"  # memrefCopy
FILLS = {FILLS!r}  # each launch's malloc fill: 0x47474747 is 51015.3 or 1195853639, 0xC7C7C7C7 -102286.6 or < 0
FILL_MALLOC = r"""{FILL_MALLOC_C}"""
GRID = {tuple(grid)!r}
ARGS = {arguments!r}  # ("buffer", name, byte offset, elements) or (ctypes type, value)
TOLERANCE = {tolerance}
FILL_JUDGED = {tuple(fill_judged)!r}  # buffers that must come out the same under both fills; (): judged by the interpreter
os.chdir(os.path.dirname(os.path.abspath(__file__)))
if "REPRO_MALLOC_FILL" not in os.environ:  # compile, then launch once per fill
    tools = [os.environ.get("TRITON_ADAPTER_OPT") or shutil.which("triton-adapter-opt"),
             *map(shutil.which, ("mlir-opt-19", "mlir-translate-19", "clang-19"))]
    if not all(tools) or not os.path.exists(RUNNER_UTILS):
        sys.exit(print("cannot run here: needs triton-adapter-opt, mlir-opt-19, mlir-translate-19, clang-19, libmlir-19") or 2)
    open("fill_malloc.c", "w").write(FILL_MALLOC)
    for step in ([tools[0], "{KERNEL_FILE}", *PASSES, "-o", "{LINALG_FILE}"], "drop annotation.mark",
                 [tools[1], "{LINALG_FILE}", *LOWER, "-o", "kernel.llvm.mlir"],
                 [tools[2], "--mlir-to-llvmir", "kernel.llvm.mlir", "-o", "kernel.ll"],
                 [tools[3], "-shared", "-fPIC", "-O2", "-Wno-override-module", "kernel.ll", "fill_malloc.c",
                  RUNNER_UTILS, "-Wl,--wrap=malloc", "-Wl,-rpath," + os.path.dirname(RUNNER_UTILS), "-o", "kernel.so"]):
        if isinstance(step, str):  # hints for the adapter's NPU back end, a dialect mlir-opt does not know
            text = re.sub(r"^\\s*annotation\\.mark [^\\n]*\\n", "", open("{LINALG_FILE}").read(), flags=re.M)
            open("{LINALG_FILE}", "w").write(text)
        elif (done := subprocess.run(step, capture_output=True, text=True)).returncode:
            sys.exit(print(f"cannot run here: {{os.path.basename(step[0])}} failed:", done.stderr[-1500:]) or 2)
    codes = [subprocess.run([sys.executable, __file__], env={{**os.environ, "REPRO_MALLOC_FILL": fill}}).returncode
             for fill in FILLS]
    for fill, code in zip(FILLS, codes):
        if code < 0:
            print(f"malloc's memory filled with {{fill}}: the launch died of signal {{-code}}")
    verdict = 2 if 2 in codes else 1 if any(codes) else 0
    if FILL_JUDGED and verdict == 0:
        after = [torch.load(f"after.{{fill}}.pt", weights_only=True) for fill in FILLS]
        for name in FILL_JUDGED:
            first, second = after[0][name].view(-1), after[1][name].view(-1)
            nans = first.isnan() & second.isnan() if first.is_floating_point() else torch.zeros_like(first, dtype=torch.bool)
            differ = ((first != second) & ~nans).nonzero()[:5, 0].tolist()
            verdict = 1 if differ else verdict
            for i in differ:
                print(f"{{name}}[{{i}}]: {{first[i].item()!r}} with malloc's memory filled with {{FILLS[0]}}, "
                      f"{{second[i].item()!r}} with {{FILLS[1]}}")
    print({{0: "{fixed}", 1: "REPRODUCES"}}.get(verdict, "cannot run here"))
    sys.exit(verdict)
kernel = getattr(ctypes.CDLL(os.path.abspath("kernel.so")), "_mlir_ciface_{kernel}")
launch = torch.load("{LAUNCH_FILE}", weights_only=True)  # buffers before the launch; Triton's interpreter's after it
buffers = launch["before"]
class Memref(ctypes.Structure):  # memref<?xT>: allocated, aligned, offset, size, stride
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p)] + [(f, ctypes.c_int64) for f in "ots"]
def memref(data, byte_offset, elements):
    return ctypes.byref(Memref(data.data_ptr(), data.data_ptr() + byte_offset, 0, elements, 1))
scratch = torch.zeros(64, dtype=torch.uint8)  # the adapter's lock and workspace arguments
args = [memref(scratch, 0, 64)] * 2 + [memref(buffers[a[1]], *a[2:]) if a[0] == "buffer" else getattr(ctypes, a[0])(a[1])
                                       for a in ARGS]
for z, y, x in ((z, y, x) for z in range(GRID[2]) for y in range(GRID[1]) for x in range(GRID[0])):
    kernel(*args, *map(ctypes.c_int32, (*GRID, x, y, z)))
if FILL_JUDGED:  # the parent compares the two fills' values
    sys.exit(torch.save({{name: buffers[name] for name in FILL_JUDGED}}, f"after.{{os.environ['REPRO_MALLOC_FILL']}}.pt"))
failed = False
for name, want in launch["expected"].items():
    try:
        torch.testing.assert_close(buffers[name], want, equal_nan=True, **TOLERANCE)
    except AssertionError as error:
        failed, got = True, buffers[name]
        print(f"{{name}}, malloc's memory filled with {{os.environ['REPRO_MALLOC_FILL']}}:", str(error).strip(),
              "index, interpreter, compiled here:", sep="\\n")
        for i in (~torch.isclose(got.double(), want.double(), equal_nan=True, **TOLERANCE)).nonzero()[:5, 0].tolist():
            print(f"  [{{i}}] {{want[i].item()!r}} {{got[i].item()!r}}")
print(f"malloc's memory filled with {{os.environ['REPRO_MALLOC_FILL']}}:",
      "values differ" if failed else "every buffer matches Triton's interpreter")
sys.exit(1 if failed else 0)
'''
    return check_script(text, doc)


def _wrapped(items, width: int = 110) -> str:
    """A list literal of `items`, packed into lines of at most `width` characters."""
    lines, line = [], ""
    for item in map(repr, items):
        if line and len(line) + len(item) + 2 > width - 4:
            lines.append(line)
            line = ""
        line += (", " if line else "") + item
    lines.append(line)
    return "[" + lines[0] + "]" if len(lines) == 1 else "[\n    " + ",\n    ".join(lines) + ",\n]"


def _copy(source: str, target: str, transform=lambda text: text) -> None:
    with open(target, "w", encoding="utf-8") as handle:
        handle.write(transform(_read(source)))


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()
