"""What PyTorchSim left in a case's dump path: kernel workdirs, the stage each reached,
the wrapper, TOGSim logs and cycles, and copies of all of it for a failing case.

Workdirs (docs/pytorchsim.md, "Artifacts"): the Triton route writes
`<dump>/triton_<hash>/` (kernel.py first, then the spec, meta.json, stage IRs, the ELF,
runtime/*.raw; C2 kernel.json, provenance.json and launch-<pid>/runtime/*.raw); the MLIR
route writes `<dump>/<hash>/` (<key>.mlir first, then LLVM dialect, .ll, .o/.s,
validation_binary, runtime_NNNN/, m5out/), generation A under `<dump>/outputs/<hash>/`
(fe04c9a PyTorchSimFrontend/extension_codecache.py get_write_path). The stage a kernel
reached is the last of those whose file exists; stage numbers in file names are not an
interface, so files are matched by the name after the number.
"""
from __future__ import annotations

import fnmatch
import glob
import json
import os
import re
import shutil

TRITON_STAGES = (
    ("codegen", ("kernel.py",)),
    ("spec", ("*_spec.py",)),
    ("ttir", ("*ttir.mlir",)),
    ("ttshared", ("*ttshared.mlir", "*regularized.mlir")),
    ("adapted", ("*adapted.mlir", "*transformed.mlir")),
    ("custom", ("*custom.mlir",)),
    ("binary", ("*.elf", "kernel.json")),
    ("spike", ("runtime/*.raw", "launch-*/runtime/*.raw")),
    ("togsim", ("trace.so", "trace_cycles.tsv")),
)
MLIR_STAGES = (
    ("mlir", ("*.mlir",)),
    ("llvm-dialect", ("*_llvm.mlir",)),
    ("llvm-ir", ("*.ll",)),
    ("object", ("*.o", "*.s")),
    ("binary", ("validation_binary",)),
    ("spike", ("runtime_*/*/*.raw", "runtime_*/*.raw")),
    ("gem5", ("cycle_binary", "m5out/stats.txt")),
)

WRAPPER_LINE = re.compile(r"Wrapper Codegen Path = (\S+)")
WRAPPER_CALL = re.compile(r"def call\((self, )?args\)")
# Debug mode (TORCHSIM_DEBUG_MODE=1) names the model: `Simulation log of "<onnx>" is stored
# to "<log>"` (fe04c9a Simulator/simulator.py TOGSimulator.simulation).
TOGSIM_LOG_LINE = re.compile(r'Simulation log (?:of "[^"]*" )?is stored to "([^"]+)"')
CYCLES = re.compile(r"Total execution cycles:\s*(\d+)")
# TORCHSIM_FUNCTIONAL_VERIFY_TRACE=1: one line per realized buffer, its error against the
# CPU golden of the whole graph (Simulator/functional_verify.py verify_check).
FUNC_TRACE = re.compile(r"\[FuncTrace\] (?P<buffer>\S+)\s+(?P<op>.*?)\s+max\|d\|=(?P<d>\S+) "
                        r"max\|ref\|=(?P<ref>\S+) rel=(?P<rel>\S+)")
# Calls the wrapper makes itself instead of launching a kernel: eager on the host
# (or the device's CPU fallback), never simulated. Allocation and view helpers compute
# nothing of the program and are not counted.
EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\s*\(")
NOT_COMPUTE = re.compile(r"empty_strided|reinterpret_tensor|as_strided|copy_|aten\.set_|resize|"
                         r"_reinterpret_view|aten\.view|aten\.alias")

WORKDIR_COPIES = "pytorchsim"     # beside `kernels/`, the converted capture
# C2 writes the machine its kernels were compiled for beside the workdirs, and the compiler
# reads it back through TORCHSIM_COMPILE_TARGET (PyTorchSimCodegen/compiler_bridge.py
# target_path): a replay needs it.
TARGET_FILES = "target-*.json"
PROVENANCE_FILE = "provenance.json"     # C2 PyTorchSimCodegen/provenance.py STAMP_NAME
KERNEL_MANIFEST = "kernel.json"         # C2 compiler_bridge.KERNEL_MANIFEST, with "format"
MAX_FILE_BYTES = 8 << 20
MAX_RAW_BYTES = 32 << 20


def _files(workdir: str) -> list:
    found = []
    for root, _dirs, names in os.walk(workdir):
        found += [os.path.relpath(os.path.join(root, n), workdir) for n in names]
    return found


def _matches(files: list, patterns) -> bool:
    return any(fnmatch.fnmatch(f, p) for f in files for p in patterns)


def stage_reached(workdir: str) -> str | None:
    """The last stage whose file exists in a kernel workdir (None: nothing written)."""
    files = _files(workdir)
    stages = TRITON_STAGES if os.path.basename(workdir).startswith("triton_") else MLIR_STAGES
    reached = None
    for name, patterns in stages:
        if _matches(files, patterns):
            reached = name
    return reached


# Generation A nests its kernel folders one level down (fe04c9a extension_codecache.py).
NESTED_DUMP = "outputs"


def kernel_workdirs(dump_path: str) -> list:
    """Kernel workdirs under a dump path in the order they were created (their first file);
    generation A's `<dump>/outputs/<hash>/` each count as one, never `outputs/` as a whole."""
    found = []
    for root in (dump_path, os.path.join(dump_path, NESTED_DUMP)):
        if not os.path.isdir(root):
            continue
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if name.startswith(".") or not os.path.isdir(path) or path == os.path.join(dump_path, NESTED_DUMP):
                continue
            files = [f for f in os.listdir(path)]
            if "kernel.py" in files or _matches(files, ("*.mlir",)):
                found.append(path)
    return sorted(found, key=lambda path: _mtime(path, min))


def _mtime(path: str, pick) -> float:
    times = [os.path.getmtime(os.path.join(path, f)) for f in _files(path)]
    return pick(times, default=os.path.getmtime(path))


def last_stage(dump_path: str) -> str | None:
    """Stage reached by the most recently touched kernel workdir (where work stopped)."""
    workdirs = kernel_workdirs(dump_path)
    if not workdirs:
        return None
    return stage_reached(max(workdirs, key=lambda path: _mtime(path, max)))


def wrapper_paths(log_text: str, inductor_cache: str) -> list:
    """Inductor wrapper modules of this case: named in the log, else found in its cache."""
    named = [p for p in WRAPPER_LINE.findall(log_text) if os.path.isfile(p)]
    if named:
        return list(dict.fromkeys(named))
    found = []
    for root, _dirs, names in os.walk(inductor_cache):
        for n in names:
            path = os.path.join(root, n)
            if n.endswith(".py") and _holds(path, WRAPPER_CALL):
                found.append(path)
    return sorted(found)


def _holds(path: str, pattern: re.Pattern) -> bool:
    try:
        with open(path, errors="replace") as f:
            return pattern.search(f.read()) is not None
    except OSError:
        return False


def extern_ops(wrapper_text: str) -> list:
    """Ops the wrapper's call() runs itself (extern_kernels.*, torch.ops.*, aten.*): not simulated."""
    body = wrapper_text.split("def call(", 1)[-1].split("def benchmark_compiled_module", 1)[0]
    found = [name for name in EXTERN_CALL.findall(body) if not NOT_COMPUTE.search(name)]
    return sorted(set(found))


def togsim_logs(log_text: str, log_dir: str) -> list:
    """TOGSim result logs: those the log points at, plus any in the case's log folder."""
    paths = [p for p in TOGSIM_LOG_LINE.findall(log_text) if os.path.isfile(p)]
    if os.path.isdir(log_dir):
        paths += [os.path.join(log_dir, n) for n in sorted(os.listdir(log_dir)) if n.endswith(".log")]
    return list(dict.fromkeys(paths))


def cycles_of(togsim_log_text: str) -> int | None:
    """Total execution cycles of a TOGSim log (None if it never reported them).

    Read after the last `Simulation finished` when the log has one, so a progress
    figure printed mid-run is never taken for the result.
    """
    start = max(togsim_log_text.rfind("Simulation finished"), 0)
    found = CYCLES.findall(togsim_log_text[start:])
    return int(found[-1]) if found else None


def total_cycles(paths: list) -> int | None:
    """Sum of the cycles of every finished TOGSim run (None when none finished)."""
    counts = []
    for path in paths:
        with open(path, errors="replace") as f:
            count = cycles_of(f.read())
        if count is not None:
            counts.append(count)
    return sum(counts) if counts else None


def collect(*, dump_path: str, inductor_cache: str, log_dir: str, log_text: str, dest: str) -> list:
    """Copy a case's kernel workdirs (to `pytorchsim/`), wrappers and TOGSim logs into `dest`.

    Returns the copied paths relative to `dest`. Files over MAX_FILE_BYTES are left out
    and runtime .raw files stop at MAX_RAW_BYTES in all, so a large tensor cannot fill
    the disk; everything a reproducer needs (sources, spec, meta.json, stage.log, IR,
    logs) is small.
    """
    copied, raw_budget = [], MAX_RAW_BYTES
    for workdir in kernel_workdirs(dump_path):
        for rel in sorted(_files(workdir)):
            src = os.path.join(workdir, rel)
            size = os.path.getsize(src)
            if size > MAX_FILE_BYTES or rel.endswith(".lock"):
                continue
            if rel.endswith(".raw"):
                if size > raw_budget:
                    continue
                raw_budget -= size
            copied.append(_copy(src, dest, os.path.join(WORKDIR_COPIES, os.path.basename(workdir), rel)))
    for path in sorted(glob.glob(os.path.join(dump_path, TARGET_FILES))):
        copied.append(_copy(path, dest, os.path.join(WORKDIR_COPIES, os.path.basename(path))))
    for i, path in enumerate(wrapper_paths(log_text, inductor_cache)):
        copied.append(_copy(path, dest, f"wrapper_{i}.py"))
    for path in togsim_logs(log_text, log_dir):
        copied.append(_copy(path, dest, os.path.join("togsim", os.path.basename(path))))
    return copied


def _copy(src: str, dest_root: str, rel: str) -> str:
    target = os.path.join(dest_root, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(src, target)
    return rel


def build_identity(dump_path: str) -> dict:
    """What built this case's kernels, from the workdirs' own stamps: the compiler commit
    of provenance.json (C2; "dirty" digest appended) and kernel.json's format. {} when no
    workdir carries them (generations A, B, C1)."""
    found: dict = {}
    for workdir in kernel_workdirs(dump_path):
        stamp = _json(os.path.join(workdir, PROVENANCE_FILE))
        compiler = _compiler_of(stamp) if stamp else None
        if compiler:
            found.setdefault("compiler_commit", compiler)
        manifest = _json(os.path.join(workdir, KERNEL_MANIFEST))
        if manifest and "format" in manifest:
            found.setdefault("kernel_format", manifest["format"])
    return found


def _compiler_of(stamp: dict) -> str | None:
    """The compiler's {commit, dirty} entry of a provenance stamp, whatever its key."""
    for value in stamp.values():
        if isinstance(value, dict) and "commit" in value:
            dirty = value.get("dirty")
            return value["commit"][:12] + (f"+dirty.{dirty}" if dirty else "")
    return None


def _json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def traced_divergence(log_text: str, *, rtol: float, atol: float) -> dict | None:
    """The first traced buffer whose error exceeds atol + rtol * max|ref| (NaN counts as
    over), in the shape of a `divergent_kernel` record field; None when all are within."""
    for line in FUNC_TRACE.finditer(log_text):
        d, ref = float(line.group("d")), float(line.group("ref"))
        if not d <= atol + rtol * ref:
            return {"kernel_name": line.group("buffer"), "launch": None, "folder": None,
                    "summary": f"PyTorchSim functional verify: buffer {line.group('buffer')} "
                               f"({line.group('op')}) max|d|={d:.4g} against max|ref|={ref:.4g}"}
    return None
