"""PyTorchSim Triton-route kernel workdirs -> kernel captures -> per-kernel reference.

The workdirs are laid out exactly as PyTorchSim writes them (kernel.py, meta.json as
collect_meta records it, runtime/<arg>.raw scattered through as_strided as write_inputs
does, Spike's outputs written over the out/inout files), built from kernels our `triton`
route generated and ran. A correct PyTorchSim is stood in for by the interpreter's own
outputs; a deliberately corrupted output raw must be named as the diverging kernel.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from torchsim_diff.case import layout
from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders, torch_dtype
from torchsim_diff.routes import make_route
from torchsim_diff.routes.base import RunContext
from torchsim_diff.routes.torchsim import kernel_repro, workdir

SOURCE = ("import torch\n"
          "def program(x0, x1, x2):\n"
          "    v0 = torch.add(x0.t(), x1)\n"
          "    x2.mul_(2.0)\n"
          "    return (v0 * 3.0, x2 + 1)\n")


def _input(name, shape, strides, offset, storage, mutated=False):
    return {"name": name, "shape": shape, "dtype": "float32", "domain": {"kind": "real"},
            "layout": {"classes": [], "strides": strides, "offset": offset, "storage_size": storage},
            "mutated": mutated}


CASE = {"schema": 1, "dtype": "float32", "nodes": [], "outputs": [], "values": {"seed": 7, "special": False},
        # x0.t() + x1 tiles over y and x with a grid of (5, 1): a reversed grid computes only
        # the first XBLOCK columns.
        "inputs": [_input("x0", [24, 130], [130, 1], 2, 2 + 24 * 130), _input("x1", [130, 24], [24, 1], 0, 130 * 24),
                   _input("x2", [4, 6], [6, 1], 0, 24, mutated=True)]}


@pytest.fixture(scope="module")
def triton_capture(tmp_path_factory):
    """Kernels of SOURCE as our `triton` route generated and ran them (captured launches)."""
    route = make_route("triton")
    ok, reason = route.available()
    if not ok:
        pytest.skip(f"route triton unavailable: {reason}")
    route.setup()
    namespace = {}
    exec(SOURCE, namespace)
    ctx = RunContext(artifact_dir=str(tmp_path_factory.mktemp("triton-case")), case=CASE)
    compiled = route.compile(namespace["program"], layout.materialize_all(CASE), ctx)
    compiled(layout.materialize_all(CASE), ctx)
    return os.path.join(ctx.artifact_dir, "kernels")


def _flat_through_view(launch, arg, which):
    """What PyTorchSim's write_inputs / Spike leave in <arg>.raw: a flat file of `numel`
    elements holding the argument's view scattered through as_strided(size, stride)."""
    storage = launch.storages(which)[arg["buffer"]]
    view = torch.empty(0, dtype=torch_dtype(arg["dtype"])).set_(
        storage.untyped_storage(), arg["storage_offset"], arg["size"], arg["stride"])
    flat = torch.zeros(arg["span"], dtype=view.dtype)
    flat.as_strided(arg["size"], arg["stride"]).copy_(view)
    return flat


def _pytorchsim_workdir(launch_folder, dump):
    """Lay one captured launch out as PyTorchSim's Triton route writes it, and record one
    Spike run through the route's snapshot hook. Returns the workdir."""
    launch = CapturedLaunch(launch_folder)
    name = launch.kernel_name.replace("triton_poi_", "triton_npu_")
    wd = os.path.join(dump, f"triton_{abs(hash(launch_folder)) % 10**11:011d}")
    os.makedirs(os.path.join(wd, "runtime"))
    with open(launch.source_path) as f:
        source = f.read().replace(launch.kernel_name, name)
    with open(os.path.join(wd, "kernel.py"), "w") as f:
        f.write(source)
    tensors = [a for a in launch.meta["args"] if a["kind"] == "tensor"]
    meta = {"kernel_name": name, "signature": launch.meta["signature"], "constants": {},
            "args": [{"name": a["name"], "role": a["role"], "buffer": a["buffer"], "dtype": a["dtype"],
                      "numel": a["span"], "size": a["size"], "stride": a["stride"]} for a in tensors],
            "numels": launch.meta["numels"], "inside_reduction": False,
            "fixed_config": launch.meta["constexprs"]}
    with open(os.path.join(wd, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(wd, f"{name}_spec.py"), "w") as f:
        f.write(f"# spec of {name}\n")
    for arg in tensors:   # write_inputs: in/inout scattered, out as zeros
        flat = _flat_through_view(launch, arg, "before") if arg["role"] != "out" else torch.zeros(arg["span"])
        flat.numpy().tofile(os.path.join(wd, "runtime", f"{arg['name']}.raw"))
    spike = [sys.executable, "-m", "tnpu.spike", os.path.join(wd, f"{name}_spec.py"), wd]
    workdir.snapshot_spike_run(spike, "before")
    for arg in tensors:   # Spike writes the outputs over the same files
        if arg["role"] != "in":
            _flat_through_view(launch, arg, "after").numpy().tofile(os.path.join(wd, "runtime", f"{arg['name']}.raw"))
    workdir.snapshot_spike_run(spike, "after")
    return wd


@pytest.fixture()
def dump(triton_capture, tmp_path):
    folder = str(tmp_path / "dump")
    workdirs = [_pytorchsim_workdir(f, folder) for f in launch_folders(triton_capture)]
    return folder, workdirs


def test_converted_launches_reproduce_in_the_interpreter(dump, tmp_path):
    folder, workdirs = dump
    launches = workdir.convert_dump(folder, str(tmp_path / "capture"))
    assert len(launches) == len(workdirs) == 2
    records = [json.load(open(os.path.join(folder, "launch.json"))) for folder in launches]
    assert all(r["kernel_name"].startswith("triton_npu_") and r["executor"] == "pytorchsim" for r in records)
    tiled = [r for r in records if "ynumel" in r["numels"]]
    assert tiled and tiled[0]["grid"][0] > tiled[0]["grid"][1]     # program_id(0) is x
    assert workdir.first_divergent_kernel(str(tmp_path / "capture")) is None


def test_corrupted_output_raw_names_the_diverging_kernel(dump, tmp_path):
    folder, workdirs = dump
    target = workdirs[-1]
    meta = workdir.read_meta(target)
    out = next(a for a in meta["args"] if a["role"] == "out")
    after = os.path.join(target, workdir.SNAPSHOT_DIR, "0", "after", f"{out['name']}.raw")
    values = np.fromfile(after, dtype="float32")
    values[3] += 0.5
    values.tofile(after)
    workdir.convert_dump(folder, str(tmp_path / "capture"))
    found = workdir.first_divergent_kernel(str(tmp_path / "capture"))
    assert found is not None and found["kernel_name"] == meta["kernel_name"]
    assert "mismatched elements 1 /" in found["summary"]


def test_grid_is_in_program_id_order():
    meta = {"kernel_name": "k", "numels": {"ynumel": 34, "xnumel": 62},
            "fixed_config": {"YBLOCK": 1, "XBLOCK": 16}}
    assert workdir.grid_of(meta) == [4, 34, 1]   # program_id(0) is x: ceil(62/16)


def test_missing_raw_is_named(dump, tmp_path):
    folder, workdirs = dump
    os.remove(os.path.join(workdirs[0], workdir.SNAPSHOT_DIR, "0", "before",
                           workdir.read_meta(workdirs[0])["args"][0]["name"] + ".raw"))
    with pytest.raises(workdir.WorkdirError, match=r"\.raw does not exist"):
        workdir.convert_dump(folder, str(tmp_path / "capture"))


def test_exported_reproducer_carries_expected_outputs_and_commands(dump, tmp_path, triton_capture):
    folder, workdirs = dump
    target = workdirs[0]
    meta = workdir.read_meta(target)
    out = next(a for a in meta["args"] if a["role"] == "out")
    after = os.path.join(target, workdir.SNAPSHOT_DIR, "0", "after", f"{out['name']}.raw")
    wrong = np.fromfile(after, dtype="float32")
    wrong[0] = -wrong[0] - 1.0
    wrong.tofile(after)
    launches = workdir.convert_dump(folder, str(tmp_path / "capture"))
    dest = str(tmp_path / "repro")
    issue = kernel_repro.export_reproducer(launches[0], dest, generation="C1", pytorchsim_workdir=target,
                                           versions={"pytorchsim": "C1"})
    text = open(issue).read()
    assert meta["kernel_name"] in text and "mismatched elements 1 /" in text
    script = open(os.path.join(dest, "replay.sh")).read()
    assert "run.py" in script and "--from ttir --to binary" in script and "tnpu.spike" in script
    assert os.path.isfile(os.path.join(dest, "workdir", "meta.json"))
    assert not os.path.exists(os.path.join(dest, "workdir", "runtime"))
    # expected/ is the interpreter's answer: the same bytes our triton route produced
    original = CapturedLaunch(launch_folders(triton_capture)[0])
    arg = next(a for a in original.meta["args"] if a["name"] == out["name"])
    want = _flat_through_view(original, arg, "after").numpy().tobytes()
    assert open(os.path.join(dest, "expected", f"{out['name']}.raw"), "rb").read() == want
    compare = [sys.executable, os.path.join(dest, "compare_outputs.py")]
    assert subprocess.run(compare + [os.path.join(dest, "actual")], capture_output=True).returncode == 1
    assert subprocess.run(compare + [os.path.join(dest, "expected")], capture_output=True).returncode == 0


def test_c2_reproducer_uses_their_compiler_command(dump, tmp_path):
    folder, _ = dump
    launches = workdir.convert_dump(folder, str(tmp_path / "capture"))
    dest = str(tmp_path / "repro")
    kernel_repro.export_reproducer(launches[1], dest, generation="C2")
    script = open(os.path.join(dest, "replay.sh")).read()
    assert "pytorchsim-triton-compiler" in script and "--from triton-compile --to torchsim-compile" in script


def test_case_artifacts_export_the_diverging_kernel(dump, tmp_path):
    """As the route leaves a case: workdir copies in pytorchsim/, the capture in kernels/."""
    import shutil

    from torchsim_diff.routes.torchsim.artifacts import WORKDIR_COPIES
    folder, workdirs = dump
    case = tmp_path / "case"
    for wd in workdirs:
        shutil.copytree(wd, case / WORKDIR_COPIES / os.path.basename(wd))
    assert kernel_repro.export_from_artifacts(str(case), str(tmp_path / "none")) is None   # no capture yet
    target = workdirs[-1]
    out = next(a for a in workdir.read_meta(target)["args"] if a["role"] == "out")
    after = os.path.join(target, workdir.SNAPSHOT_DIR, "0", "after", f"{out['name']}.raw")
    values = np.fromfile(after, dtype="float32")
    values[-1] = np.nan
    values.tofile(after)
    workdir.convert_dump(folder, str(case / "kernels"), generation="C2")
    issue = kernel_repro.export_from_artifacts(str(case), str(tmp_path / "repro"))
    assert issue and workdir.read_meta(target)["kernel_name"] in open(issue).read()
    assert "pytorchsim-triton-compiler" in open(tmp_path / "repro" / "replay.sh").read()
    assert (tmp_path / "repro" / "workdir" / "meta.json").is_file()
