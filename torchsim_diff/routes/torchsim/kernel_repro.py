"""A kernel-level reproducer for PyTorchSim's compiler team, from one converted launch.

    dest/
      ISSUE.md              ready to paste: kernel, generation, expected vs actual, commands
      replay.sh             inputs -> their compiler -> Spike -> compare (run in their env)
      run_spike.py          C2 only: Spike through PyTorchSim's Simulator/spike_run.py launch()
      target.json           C2 only: the machine the kernel was compiled for (TORCHSIM_COMPILE_TARGET)
      compare_outputs.py    numpy-only: runtime/*.raw vs expected/*.raw, exit 1 on mismatch
      outputs.json          the out/inout arguments, dtypes and tolerances compared
      inputs/<arg>.raw      every tensor argument as the launch was given it (outs as zeros)
      expected/<arg>.raw    out/inout arguments as Triton's interpreter computes them
      actual/<arg>.raw      the same arguments as PyTorchSim produced them (when known)
      workdir/              their kernel workdir: kernel.py, spec, meta.json, stage.log, IR
      capture/              torchsim-diff kernel capture; after = interpreter, replays exactly:
                            python -m torchsim_diff.routes.triton.launch_replay capture

The expected outputs fill the gap PyTorchSim's spec leaves (`reference()` returns {}).
"""
from __future__ import annotations

import json
import os
import shutil

from torchsim_diff.judge.comparison import TOLERANCES
from torchsim_diff.routes.torchsim import workdir as workdirs

# The judge's one tolerance table, by dtype name for the numpy-only compare_outputs.py.
COMPARE_TOLERANCE = {str(dtype).replace("torch.", ""): tol for dtype, tol in TOLERANCES.items()}

# How each generation compiles a kernel workdir and runs it on Spike, as PyTorchSim itself
# does it (read-only evidence, PSAL-POSTECH/PyTorchSim):
#   C1  PyTorchSimFrontend/triton_backend/tnpu_bridge.py run_pipeline (4c077b4): `run.py <spec>
#       --from ttir --to binary --workdir <wd>` in the compiler checkout (PSTO_DIR, else
#       TNPU_DIR, else $TORCHSIM_DIR/triton-npu; PSTO_PYTHON, else TNPU_PYTHON), PYTHONPATH
#       unset; functional.py (199cfc4): `-m tnpu.spike <spec> <wd>` over <wd>/runtime/.
#   C2  PyTorchSimCodegen/compiler_bridge.py run_pipeline (5443f03): `$TORCHSIM_COMPILE_PYTHON
#       <TORCHSIM_COMPILE_DIR>/pytorchsim-triton-compiler <spec> --from triton-compile --to
#       torchsim-compile --workdir <wd>`, with TORCHSIM_COMPILE_TARGET naming the machine
#       (target-<config>.json) and no PYTHONPATH; Spike is not a compiler stage there but
#       Simulator/spike_run.py launch(), called in-process by Simulator/functional.py.
REPLAY_COMMANDS = {
    "C1": (': "${TORCHSIM_DIR:?set TORCHSIM_DIR to the PyTorchSim checkout}"\n'
           'COMPILER_DIR="${PSTO_DIR:-${TNPU_DIR:-$TORCHSIM_DIR/triton-npu}}"\n'
           'COMPILER_PY="${PSTO_PYTHON:-${TNPU_PYTHON:-python3}}"\n'
           'cd "$COMPILER_DIR"\n'
           'env -u PYTHONPATH "$COMPILER_PY" run.py "$WD/$SPEC" --from ttir --to binary --workdir "$WD"\n'
           'env -u PYTHONPATH "$COMPILER_PY" -m tnpu.spike "$WD/$SPEC" "$WD"\n'),
    "C2": (': "${TORCHSIM_DIR:?set TORCHSIM_DIR to the PyTorchSim checkout}"\n'
           ': "${TORCHSIM_COMPILE_DIR:?set TORCHSIM_COMPILE_DIR to the pytorchsim-triton-compiler checkout}"\n'
           'export TORCHSIM_COMPILE_TARGET="${TORCHSIM_COMPILE_TARGET:-$HERE/target.json}"\n'
           '(cd "$TORCHSIM_COMPILE_DIR" && env -u PYTHONPATH TORCH_DEVICE_BACKEND_AUTOLOAD=0 '
           '"${TORCHSIM_COMPILE_PYTHON:-python3}" "$TORCHSIM_COMPILE_DIR/pytorchsim-triton-compiler" '
           '"$WD/$SPEC" --from triton-compile --to torchsim-compile --workdir "$WD")\n'
           'PYTHONPATH="$TORCHSIM_DIR" TORCH_DEVICE_BACKEND_AUTOLOAD=0 "${TORCHSIM_PYTHON:-python3}" '
           '"$HERE/run_spike.py" "$WD" "$RUNTIME"\n'),
}
MLIR_GENERATIONS = ("A", "B")

REPLAY_SH = """#!/bin/sh
# Replays kernel {kernel} through PyTorchSim's Triton-route compiler (generation {generation})
# and Spike on the captured inputs, then compares with Triton's interpreter.
# Run inside the PyTorchSim environment (TORCHSIM_DIR set; see docs/pytorchsim.md).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
WD="$HERE/workdir"
SPEC="{spec}"
RUNTIME="$WD/runtime"
rm -rf "$RUNTIME"
mkdir -p "$RUNTIME"
cp "$HERE"/inputs/*.raw "$RUNTIME/"
{commands}python3 "$HERE/compare_outputs.py" "$RUNTIME"
"""

# C2 only: Spike through PyTorchSim's own launcher, one process (no grid split).
RUN_SPIKE_PY = '''"""Run the kernel object in WORKDIR on Spike over RUNTIME/<arg>.raw with PyTorchSim's
own launcher (Simulator/spike_run.py launch), as Simulator/functional.py does.
usage: PYTHONPATH=$TORCHSIM_DIR python3 run_spike.py WORKDIR RUNTIME"""
import json
import os
import sys

from Simulator import spike_run

workdir, runtime = sys.argv[1], sys.argv[2]
with open(os.path.join(workdir, "kernel.json")) as f:
    manifest = json.load(f)
raw_paths = {a["name"]: os.path.join(runtime, a["name"] + ".raw") for a in manifest["args"]}
extra = {}
if hasattr(spike_run, "argv_scalars"):
    extra["scalars"] = spike_run.argv_scalars(manifest, {})
spike_run.launch(workdir, manifest, runtime, raw_paths, print, jobs=1, **extra)
'''

COMPARE_PY = '''"""Compare a launch's output .raw files with expected/ (Triton interpreter). Exit 1 on mismatch.
usage: python3 compare_outputs.py RUNTIME_DIR"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, dtype):
    if dtype == "bfloat16":
        bits = np.fromfile(path, dtype=np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    return np.fromfile(path, dtype=np.bool_ if dtype == "bool" else np.dtype(dtype))


def main(runtime):
    with open(os.path.join(HERE, "outputs.json")) as f:
        outputs = json.load(f)
    failed = 0
    for out in outputs:
        got = load(os.path.join(runtime, out["name"] + ".raw"), out["dtype"])
        want = load(os.path.join(HERE, "expected", out["name"] + ".raw"), out["dtype"])
        if got.shape != want.shape:
            print(f"{out['name']}: {got.size} elements, expected {want.size}")
            failed += 1
            continue
        if out["dtype"] in ("float32", "float16", "bfloat16", "float64"):
            rtol, atol = out["tolerance"]
            bad = ~np.isclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
        else:
            bad = got != want
        if bad.any():
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))[bad]
            print(f"{out['name']}: mismatched elements {int(bad.sum())} / {bad.size}, greatest absolute "
                  f"difference {np.nanmax(diff) if diff.size else 'n/a'} (first at index {int(np.argmax(bad))})")
            failed += 1
        else:
            print(f"{out['name']}: matches the interpreter")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "workdir", "runtime")))
'''


def export_from_artifacts(artifact_dir: str, dest: str) -> str | None:
    """The reproducer of the first diverging kernel of a torchsim-triton case, or None when
    the case has no converted kernels or every kernel reproduces (the divergence is then
    outside the kernels). Meant for `torchsim-diff export` of a torchsim-triton bucket."""
    from torchsim_diff.routes.torchsim.artifacts import WORKDIR_COPIES
    capture = os.path.join(artifact_dir, "kernels")
    if not os.path.isfile(os.path.join(capture, "index.json")):
        return None
    found = workdirs.first_divergent_kernel(capture)
    if found is None:
        return None
    with open(os.path.join(capture, "index.json")) as f:
        generation = json.load(f).get("pytorchsim_generation") or "C1"
    copies = os.path.join(artifact_dir, WORKDIR_COPIES)
    copy = os.path.join(copies, found["capture"].get("pytorchsim_workdir", ""))
    from torchsim_diff.routes.torchsim.artifacts import build_identity
    versions = dict(build_identity(copies), pytorchsim=generation)
    return export_reproducer(found["folder"], dest, generation=generation, versions=versions,
                             pytorchsim_workdir=copy if os.path.isdir(copy) else None)


def export_reproducer(launch_folder: str, dest: str, *, generation: str, pytorchsim_workdir: str | None = None,
                      versions: dict | None = None) -> str:
    """Write a kernel reproducer for one converted launch into `dest`; returns ISSUE.md's path."""
    if generation in MLIR_GENERATIONS:
        raise ValueError(f"generation={generation!r} has only the MLIR route, whose kernels are MLIR, not "
                         f"Triton: there is no kernel capture to replay; export the case's bundle instead")
    if generation not in REPLAY_COMMANDS:
        raise ValueError(f"generation={generation!r}: kernel reproducers exist for the Triton route "
                         f"generations {sorted(REPLAY_COMMANDS)}")
    with open(os.path.join(launch_folder, "launch.json")) as f:
        launch = json.load(f)
    capture = os.path.join(dest, "capture")
    _copy_capture(launch_folder, capture)
    outputs = [a for a in launch["args"] if a["kind"] == "tensor" and a["role"] in ("out", "inout")]
    _write_args(launch_folder, launch, dest, "inputs", "before", launch["args"])
    actual = _write_args(launch_folder, launch, dest, "actual", "after", outputs)
    workdirs.fill_interpreter_outputs(capture)
    expected_launch = os.path.join(capture, os.path.basename(launch_folder))
    with open(os.path.join(expected_launch, "launch.json")) as f:
        expected_meta = json.load(f)
    _write_args(expected_launch, expected_meta, dest, "expected", "after", outputs)
    if pytorchsim_workdir:
        _copy_workdir(pytorchsim_workdir, os.path.join(dest, "workdir"))
        _copy_target(os.path.dirname(os.path.abspath(pytorchsim_workdir)), dest)
    _write_scripts(dest, launch, outputs, generation)
    return _write_issue(dest, launch, outputs, generation, actual, versions or {})


def _copy_capture(launch_folder: str, capture: str) -> None:
    from torchsim_diff.kernels.capture import FORMAT, SCHEMA
    name = os.path.basename(os.path.normpath(launch_folder))
    shutil.copytree(launch_folder, os.path.join(capture, name), dirs_exist_ok=True)
    with open(os.path.join(capture, "index.json"), "w") as f:
        json.dump({"format": FORMAT, "schema": SCHEMA, "executor": "pytorchsim", "launches": [name]}, f, indent=1)


def _write_args(folder: str, launch: dict, dest: str, sub: str, which: str, args: list) -> bool:
    """Each arg's bytes (its buffer's, as PyTorchSim lays one arg per flat file) into dest/sub."""
    written = False
    for arg in (a for a in args if a["kind"] == "tensor"):
        rel = launch["buffers"][arg["buffer"]].get(which)
        if rel is None:
            continue
        os.makedirs(os.path.join(dest, sub), exist_ok=True)
        shutil.copyfile(os.path.join(folder, rel), os.path.join(dest, sub, f"{arg['name']}.raw"))
        written = True
    return written


def _copy_workdir(source: str, target: str) -> None:
    skip = shutil.ignore_patterns("runtime", workdirs.SNAPSHOT_DIR, "*.raw", "*.lock", "launch-*")
    shutil.copytree(source, target, ignore=skip, dirs_exist_ok=True)


def _copy_target(dump_copy: str, dest: str) -> None:
    """C2's machine description (target-<config>.json beside the workdirs) as target.json,
    what replay.sh hands the compiler through TORCHSIM_COMPILE_TARGET."""
    import glob
    from torchsim_diff.routes.torchsim.artifacts import TARGET_FILES
    targets = sorted(glob.glob(os.path.join(dump_copy, TARGET_FILES)))
    if targets:
        shutil.copyfile(targets[0], os.path.join(dest, "target.json"))


def _write_scripts(dest: str, launch: dict, outputs: list, generation: str) -> None:
    spec = f"{launch['kernel_name']}_spec.py"
    with open(os.path.join(dest, "replay.sh"), "w") as f:
        f.write(REPLAY_SH.format(kernel=launch["kernel_name"], generation=generation, spec=spec,
                                 commands=REPLAY_COMMANDS[generation]))
    os.chmod(os.path.join(dest, "replay.sh"), 0o755)
    if generation == "C2":
        with open(os.path.join(dest, "run_spike.py"), "w") as f:
            f.write(RUN_SPIKE_PY)
    with open(os.path.join(dest, "compare_outputs.py"), "w") as f:
        f.write(COMPARE_PY)
    described = [{"name": a["name"], "dtype": a["dtype"], "tolerance": COMPARE_TOLERANCE.get(a["dtype"], (0, 0))}
                 for a in outputs]
    with open(os.path.join(dest, "outputs.json"), "w") as f:
        json.dump(described, f, indent=1)


def _comparison(dest: str, outputs: list) -> list:
    from torchsim_diff.routes.triton.launch_replay import compare_bytes
    lines = []
    for arg in outputs:
        paths = [os.path.join(dest, sub, f"{arg['name']}.raw") for sub in ("actual", "expected")]
        if not all(os.path.isfile(p) for p in paths):
            continue
        got, want = (_read_bytes(p) for p in paths)
        diff = compare_bytes(arg["name"], arg["dtype"], got, want, exact=False)
        lines.append("- " + diff.describe())
    return lines


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write_issue(dest, launch, outputs, generation, actual, versions) -> str:
    with open(os.path.join(_launch_dir(dest), "kernel.py")) as f:
        source = f.read()
    compared = _comparison(dest, outputs) if actual else []
    verdict = ("PyTorchSim's outputs differ from Triton's interpreter on the same inputs:\n" + "\n".join(compared)
               if compared else "Expected outputs from Triton's interpreter are in expected/.")
    body = f"""# [Triton route] kernel {launch['kernel_name']}: outputs differ from Triton's interpreter

Generation {generation}. One launch of an Inductor kernel, with its inputs, reproduced without
torch.compile: grid {launch['grid']} (program_id(0) first), blocks {launch['constexprs']},
numels {launch['numels']}.

## Expected vs actual
{verdict}

## Reproduce
In the PyTorchSim environment: `sh replay.sh` (copies inputs/ into workdir/runtime, runs the
compiler and Spike, compares with expected/). Reference side, anywhere with torch and triton:
`TRITON_INTERPRET=1 python -m torchsim_diff.routes.triton.launch_replay capture` (bit-exact).

## Arguments
{chr(10).join(f"- {a['name']}: {a['role']} {a['dtype']} size {a['size']} stride {a['stride']}" if a['kind'] == 'tensor' else f"- {a['name']} = {a['value']}" for a in launch['args'])}

## Kernel (Inductor source)
```python
{source.strip()}
```

## Versions
{chr(10).join(f"- {k}: {v}" for k, v in sorted(versions.items())) or "- (not recorded)"}
"""
    path = os.path.join(dest, "ISSUE.md")
    with open(path, "w") as f:
        f.write(body)
    return path


def _launch_dir(dest: str) -> str:
    capture = os.path.join(dest, "capture")
    return os.path.join(capture, next(n for n in sorted(os.listdir(capture)) if n != "index.json"))
