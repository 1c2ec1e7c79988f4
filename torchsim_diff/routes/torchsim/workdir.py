"""PyTorchSim Triton-route kernel workdirs -> torchsim-diff kernel captures, per-kernel
reference outputs from Triton's interpreter, and kernel reproducers for the compiler team.

A workdir (`<dump>/triton_<hash>/`) holds Inductor's unmodified kernel source
(`kernel.py`), what `collect_meta` recorded (`meta.json`: kernel_name, signature,
constants, args {name, role, buffer, dtype, numel, size, stride}, numels, fixed_config,
template_grid) and the launch's `runtime/<arg>.raw` files: each in/inout argument scattered
through `as_strided(size, stride)` into a flat file of `numel` elements, each out argument
as zeros. That is a launch, minus the grid (computed here from the numels and the pinned
block sizes, program_id(0) = x first) and the expected outputs, which PyTorchSim does not
have: its spec's `reference()` returns {}. Converting it to the capture format of
`torchsim_diff.kernels.capture` lets `torchsim_diff.routes.triton.launch_replay` run the same kernel on
the same inputs under Triton's interpreter, which is that missing per-kernel reference.

The route snapshots the launch's .raw files around every Spike run into
`<workdir>/torchsim-diff-launches/<n>/{before,after}/`, because Spike writes its outputs
over the same files; a converted launch then carries PyTorchSim's outputs as "after" and
replaying it names the kernel whose outputs diverge (`first_divergent_kernel`). Where the
files are, per generation:
    C1 (early)  <workdir>/runtime/, Spike started as `python -m tnpu.spike <spec> <workdir>`
                (PyTorchSimFrontend/triton_backend/functional.py, PSAL-POSTECH 199cfc4):
                the subprocess hook `snapshot_spike_run` sees the workdir in the command.
    C1 (later), C2  `spike_run.launch(workdir, manifest, runtime, ...)` in-process, one
                command per grid range, runtime = <workdir>/launch-<pid>/runtime
                (Simulator/spike_run.py, Simulator/session.py): the command names only
                `--base-path=<runtime>` (or a part of it), so the route wraps `launch`
                itself (`wrap_launch`).

    launches = convert_dump(dump_path, "capture")        # one launch per Spike run
    found = first_divergent_kernel("capture")            # None: every kernel reproduces
    export_reproducer(launches[0], "repro", generation="C1")
"""
from __future__ import annotations

import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys

META_FILE = "meta.json"
SOURCE_FILE = "kernel.py"
RUNTIME_DIR = "runtime"
LAUNCH_DIRS = "launch-*"        # C2 Simulator/session.py: <workdir>/launch-<pid>/runtime
SNAPSHOT_DIR = "torchsim-diff-launches"
PYTORCHSIM_EXECUTOR = "pytorchsim"
ITEM_SIZES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
              "int16": 2, "int8": 1, "uint8": 1, "bool": 1}
PID_AXES = ("x", "y", "z")     # program_id(0), (1), (2)


class WorkdirError(ValueError):
    """A workdir that cannot be converted; the message names the file and the fix."""


# ---------------------------------------------------------------------------------------
# Reading a workdir
def read_meta(workdir: str) -> dict:
    path = os.path.join(workdir, META_FILE)
    if not os.path.isfile(path):
        raise WorkdirError(f"{path} does not exist: not a PyTorchSim Triton-route kernel workdir "
                           f"(expected kernel.py, meta.json and runtime/ under triton_<hash>/)")
    with open(path) as f:
        return json.load(f)


def grid_of(meta: dict) -> list:
    """Launch grid in program-id order (x first), from the numels and the pinned blocks."""
    if meta.get("template_grid"):
        return (list(meta["template_grid"]) + [1, 1])[:3]
    numels, config = meta.get("numels") or {}, meta.get("fixed_config") or {}
    grid = []
    for axis in PID_AXES:
        n = numels.get(f"{axis}numel")
        if n is None:
            continue
        block = config.get(f"{axis.upper()}BLOCK")
        if not block:
            raise WorkdirError(f"{meta.get('kernel_name')}: {axis.upper()}BLOCK is unset in fixed_config "
                               f"({config}); the grid cannot be computed")
        grid.append(math.ceil(n / block))
    if not grid:
        raise WorkdirError(f"{meta.get('kernel_name')}: meta.json numels {numels} name no x/y/z axis")
    return (grid + [1, 1])[:3]


def constexpr_values(meta: dict, source: str) -> dict:
    """Values of the kernel's tl.constexpr parameters: pinned blocks, then constants."""
    names = [n for n, token in (meta.get("signature") or {}).items() if token == "constexpr"]
    names += [n for n in re.findall(r"(\w+)\s*:\s*tl\.constexpr", source) if n not in names]
    values = {}
    for name in names:
        value = (meta.get("fixed_config") or {}).get(name)
        if value is None:
            value = (meta.get("constants") or {}).get(name)
        if value is None:
            raise WorkdirError(f"{meta.get('kernel_name')}: no value for constexpr {name!r} in "
                               f"fixed_config or constants")
        values[name] = value
    return values


def _tensor_arg(meta_arg: dict, token: str) -> dict:
    dtype = meta_arg.get("dtype") or _dtype_of_token(token)
    numel = meta_arg.get("numel")
    if numel is None:
        raise WorkdirError(f"arg {meta_arg['name']!r} has no numel in meta.json (dynamic shape?)")
    size, stride = meta_arg.get("size"), meta_arg.get("stride")
    if not size or stride is None:
        size, stride = [numel], [1]
    return {"name": meta_arg["name"], "kind": "tensor", "role": meta_arg.get("role") or "in",
            "buffer": meta_arg.get("buffer") or meta_arg["name"], "dtype": dtype,
            "size": list(size), "stride": list(stride), "storage_offset": 0, "span": numel}


def _dtype_of_token(token: str) -> str:
    names = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64",
             "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "u8": "uint8", "i1": "bool"}
    return names.get(token.lstrip("*"), "float32")


def launch_args(meta: dict) -> list:
    """Positional kernel arguments in signature order (constexprs are passed by keyword)."""
    by_name = {a["name"]: a for a in meta.get("args") or []}
    values = dict(meta.get("constants") or {}, **(meta.get("numels") or {}))
    args = []
    for name, token in (meta.get("signature") or {}).items():
        if token == "constexpr":
            continue
        if token.startswith("*"):
            if name not in by_name:
                raise WorkdirError(f"{meta.get('kernel_name')}: pointer {name!r} is in the signature but "
                                   f"not in meta.json args")
            args.append(_tensor_arg(by_name[name], token))
        elif name in values and values[name] is not None:
            args.append({"name": name, "kind": "scalar", "dtype": token, "value": values[name]})
        else:
            raise WorkdirError(f"{meta.get('kernel_name')}: no value for scalar {name!r} in numels/constants")
    return args


def _read_raw(path: str, nbytes: int) -> bytes:
    if not os.path.isfile(path):
        raise WorkdirError(f"{path} does not exist; the launch wrote one .raw per tensor argument")
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != nbytes:
        raise WorkdirError(f"{path} holds {len(data)} bytes, expected {nbytes} (numel x element size)")
    return data


def buffer_bytes(args: list, inputs_dir: str, outputs_dir: str | None) -> dict:
    """{buffer: {"dtype", "nbytes", "before", "after"}} from the launch's raw files.

    before: the first in/inout argument's file (out-only buffers start as zeros, as
    PyTorchSim's write_inputs seeds them); after: the out/inout argument's file in
    `outputs_dir` (in-only buffers are unchanged), None without outputs.
    """
    buffers: dict = {}
    for arg in (a for a in args if a["kind"] == "tensor"):
        nbytes = arg["span"] * ITEM_SIZES[arg["dtype"]]
        entry = buffers.setdefault(arg["buffer"], {"dtype": arg["dtype"], "nbytes": nbytes,
                                                   "before": None, "after": None})
        raw = os.path.join(inputs_dir, f"{arg['name']}.raw")
        if entry["before"] is None and arg["role"] in ("in", "inout"):
            entry["before"] = _read_raw(raw, nbytes)
        if outputs_dir and arg["role"] in ("out", "inout"):
            entry["after"] = _read_raw(os.path.join(outputs_dir, f"{arg['name']}.raw"), nbytes)
    for entry in buffers.values():
        if entry["before"] is None:
            entry["before"] = bytes(entry["nbytes"])
        if outputs_dir and entry["after"] is None:
            entry["after"] = entry["before"]
    return buffers


# ---------------------------------------------------------------------------------------
# Writing the capture
def write_launch(workdir: str, folder: str, *, inputs_dir: str, outputs_dir: str | None = None,
                 executor: str = PYTORCHSIM_EXECUTOR) -> str:
    """Write one capture launch folder for the workdir's kernel on the given raw files."""
    from torchsim_diff.kernels.capture import LAUNCH_FILE, LAUNCH_FORMAT, SCHEMA
    meta = read_meta(workdir)
    with open(os.path.join(workdir, SOURCE_FILE)) as f:
        source = f.read()
    args = launch_args(meta)
    buffers = buffer_bytes(args, inputs_dir, outputs_dir)
    os.makedirs(os.path.join(folder, "buffers"), exist_ok=True)
    shutil.copyfile(os.path.join(workdir, SOURCE_FILE), os.path.join(folder, "kernel.py"))
    buffer_meta = {}
    for name, entry in buffers.items():
        buffer_meta[name] = {"dtype": entry["dtype"], "nbytes": entry["nbytes"], "graph_input": None}
        for which in ("before", "after"):
            if entry[which] is not None:
                rel = f"buffers/{name}.{which}.bin"
                with open(os.path.join(folder, rel), "wb") as f:
                    f.write(entry[which])
                buffer_meta[name][which] = rel
    record = {"format": LAUNCH_FORMAT, "schema": SCHEMA, "kernel_name": meta["kernel_name"],
              "source": "kernel.py", "executor": executor, "grid": grid_of(meta),
              "constexprs": constexpr_values(meta, source), "numels": dict(meta.get("numels") or {}),
              "launch_options": {}, "signature": dict(meta.get("signature") or {}), "args": args,
              "buffers": buffer_meta, "pytorchsim_workdir": os.path.basename(os.path.abspath(workdir))}
    with open(os.path.join(folder, LAUNCH_FILE), "w") as f:
        json.dump(record, f, indent=1)
    return folder


def launch_sources(workdir: str) -> list:
    """(inputs_dir, outputs_dir) of every recorded Spike run of a workdir, else its runtime
    folders as inputs only (C1 runtime/, C2 launch-<pid>/runtime/)."""
    root = os.path.join(workdir, SNAPSHOT_DIR)
    if os.path.isdir(root):
        runs = sorted((n for n in os.listdir(root) if n.isdigit()), key=int)
        return [(os.path.join(root, r, "before"), os.path.join(root, r, "after")) for r in runs]
    launches = sorted(glob.glob(os.path.join(workdir, LAUNCH_DIRS, RUNTIME_DIR)))
    return [(path, None) for path in launches] or [(os.path.join(workdir, RUNTIME_DIR), None)]


def convert_workdirs(workdirs: list, capture_dir: str, *, generation: str | None = None) -> list:
    """Write a capture (index.json + one folder per launch) for the given workdirs.

    `generation` (C1, C2) is kept in index.json for the reproducer's replay commands."""
    from torchsim_diff.kernels.capture import FORMAT, INDEX_FILE, SCHEMA
    os.makedirs(capture_dir, exist_ok=True)
    names, folders = [], []
    for workdir in workdirs:
        kernel = read_meta(workdir)["kernel_name"]
        for inputs_dir, outputs_dir in launch_sources(workdir):
            name = f"{len(names):03d}_{kernel}"
            folders.append(write_launch(workdir, os.path.join(capture_dir, name),
                                        inputs_dir=inputs_dir, outputs_dir=outputs_dir))
            names.append(name)
    with open(os.path.join(capture_dir, INDEX_FILE), "w") as f:
        json.dump({"format": FORMAT, "schema": SCHEMA, "executor": PYTORCHSIM_EXECUTOR,
                   "launches": names, "pytorchsim_generation": generation}, f, indent=1)
    return folders


def convert_dump(dump_path: str, capture_dir: str, *, generation: str | None = None) -> list:
    """Convert every Triton kernel workdir with a meta.json under a dump path (oldest first)."""
    from torchsim_diff.routes.torchsim.artifacts import kernel_workdirs
    workdirs = [w for w in kernel_workdirs(dump_path) if os.path.isfile(os.path.join(w, META_FILE))]
    return convert_workdirs(workdirs, capture_dir, generation=generation) if workdirs else []


def first_divergent_kernel(capture_dir: str) -> dict | None:
    """The first converted launch whose PyTorchSim outputs Triton's interpreter does not
    reproduce on the same inputs (None: every kernel agrees)."""
    from torchsim_diff.routes.triton.localise import first_divergent_kernel as localise
    return localise(capture_dir, executor="interpreter")


# ---------------------------------------------------------------------------------------
# Snapshots around Spike (called by the route through timeouts.limited_subprocesses)
def snapshot_spike_run(command_args, phase: str) -> None:
    """Copy runtime/*.raw of the workdir a Spike command names, before or after it runs."""
    for workdir in _workdirs_named(command_args):
        snapshot_runtime(workdir, os.path.join(workdir, RUNTIME_DIR), phase)


def snapshot_runtime(workdir: str, runtime: str, phase: str) -> None:
    """Copy the launch's .raw files in `runtime` into the workdir's next (before) or
    current (after) recorded run."""
    if not os.path.isdir(runtime):
        return
    root = os.path.join(workdir, SNAPSHOT_DIR)
    os.makedirs(root, exist_ok=True)
    existing = sorted(int(n) for n in os.listdir(root) if n.isdigit())
    last = existing[-1] if existing else -1
    run = last + 1 if phase == "before" else max(last, 0)
    target = os.path.join(root, str(run), phase)
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(runtime):
        if name.endswith(".raw") and os.path.isfile(os.path.join(runtime, name)):
            shutil.copyfile(os.path.join(runtime, name), os.path.join(target, name))


def wrap_launch(launch):
    """`spike_run.launch(obj_dir, manifest, runtime, ...)` that records its inputs and
    outputs in obj_dir (the kernel workdir) around the whole grid, however many Spike
    processes the grid is split over."""
    if getattr(launch, "torchsim_diff_wrapped", False):
        return launch

    def recorded(obj_dir, manifest, runtime, *args, **kwargs):
        snapshot_runtime(obj_dir, runtime, "before")
        try:
            return launch(obj_dir, manifest, runtime, *args, **kwargs)
        finally:
            snapshot_runtime(obj_dir, runtime, "after")
    recorded.torchsim_diff_wrapped = True
    return recorded


def clear_snapshots(dump_path: str) -> None:
    """Forget recorded Spike runs under a dump path (before a new run of the program)."""
    if not os.path.isdir(dump_path):
        return
    for name in os.listdir(dump_path):
        shutil.rmtree(os.path.join(dump_path, name, SNAPSHOT_DIR), ignore_errors=True)


def _workdirs_named(command_args) -> list:
    words = command_args.split() if isinstance(command_args, str) else [str(a) for a in command_args]
    return [w for w in words if os.path.isfile(os.path.join(w, META_FILE))]


# ---------------------------------------------------------------------------------------
# Interpreter reference and the reproducer for the compiler team
def fill_interpreter_outputs(capture_dir: str) -> None:
    """Replace every launch's "after" bytes with what Triton's interpreter computes from its
    "before" bytes (runs in a child Python when this process cannot interpret)."""
    from torchsim_diff.routes.triton import launch_replay
    if not launch_replay._fits_this_process("interpreter"):
        command = [sys.executable, "-m", "torchsim_diff.routes.torchsim.workdir", "fill-reference", capture_dir]
        done = subprocess.run(command, capture_output=True, text=True, env=launch_replay.executor_env("interpreter"))
        if done.returncode != 0:
            raise RuntimeError(f"interpreter reference failed: {done.stderr.strip()[-2000:]}")
        return
    from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders
    for folder in launch_folders(capture_dir):
        launch = CapturedLaunch(folder)
        outputs = launch_replay.run_launch(launch, executor="interpreter")
        for buf, data in outputs.items():
            with open(os.path.join(folder, f"buffers/{buf}.after.bin"), "wb") as f:
                f.write(data)
            launch.meta["buffers"][buf]["after"] = f"buffers/{buf}.after.bin"
        launch.meta["executor"] = "interpreter"
        with open(os.path.join(folder, "launch.json"), "w") as f:
            json.dump(launch.meta, f, indent=1)
    _set_index_executor(capture_dir, "interpreter")


def _set_index_executor(capture_dir: str, executor: str) -> None:
    path = os.path.join(capture_dir, "index.json")
    if os.path.isfile(path):
        with open(path) as f:
            index = json.load(f)
        index["executor"] = executor
        with open(path, "w") as f:
            json.dump(index, f, indent=1)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "fill-reference":
        print("usage: python -m torchsim_diff.routes.torchsim.workdir fill-reference CAPTURE_DIR", file=sys.stderr)
        return 2
    fill_interpreter_outputs(argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
