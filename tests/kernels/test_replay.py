"""Kernel replay: a captured launch rerun standalone reproduces its captured outputs bit for
bit on the interpreter, and a replay that does not reproduce says where."""
import os
import shutil

import pytest
from doubles.cases import CaseRun, interpreter_route, make_case, tensor_spec

from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders
from torchsim_diff.routes.triton.launch_replay import replay_artifact, replay_launch

# Pointwise with libdevice (exp, tanh), a persistent reduction, a softmax and the mm template.
SOURCE = ("import torch\ndef program(x0, x1):\n    v0 = torch.tanh(x0.t()).exp()\n"
          "    return (v0.sum(1), torch.softmax(x1, -1), x0 @ x1)\n")
CASE = make_case(tensor_spec("x0", [16, 24], strides=[1, 16]), tensor_spec("x1", [24, 20]))


@pytest.fixture(scope="module")
def run():
    return CaseRun(interpreter_route(), SOURCE, CASE)


def test_every_captured_launch_reproduces_bit_for_bit(run):
    report = replay_artifact(run.artifact_dir, executor="interpreter")
    assert report.ok, report.summary()
    assert len(report.launches) == len(run.kernels()) >= 3
    assert all(launch.exact for launch in report.launches)
    assert any("tem_fused_mm" in launch.kernel_name for launch in report.launches)


def test_one_launch_folder_replays_alone(run, tmp_path):
    folder = launch_folders(run.artifact_dir)[-1]
    copy = shutil.copytree(folder, tmp_path / os.path.basename(folder))
    report = replay_artifact(str(copy))
    assert report.ok and len(report.launches) == 1, report.summary()


def test_a_tampered_output_is_reported_with_buffer_and_index(run, tmp_path):
    folder = shutil.copytree(launch_folders(run.artifact_dir)[0], tmp_path / "launch")
    launch = CapturedLaunch(str(folder))
    written = next(a["buffer"] for a in launch.meta["args"] if a["kind"] == "tensor" and a["role"] != "in")
    after = folder / launch.meta["buffers"][written]["after"]
    data = bytearray(after.read_bytes())
    data[4 * 3 + 1] ^= 0x40                                  # flip a bit of element 3
    after.write_bytes(bytes(data))
    report = replay_launch(CapturedLaunch(str(folder)))
    assert not report.ok
    bad = [b for b in report.buffers if not b.ok]
    assert [(b.buffer, b.mismatched, b.first_index) for b in bad] == [(written, 1, 3)]
    assert "DIVERGES" in report.summary() and written in report.summary()


def test_unknown_executor_is_refused(run):
    with pytest.raises(ValueError, match="executor='tpu'"):
        replay_artifact(run.artifact_dir, executor="tpu")


def test_a_capture_shaped_like_a_converted_pytorchsim_kernel_replays(run, tmp_path):
    """What a PyTorchSim converter can produce (1-D args of `span` elements, no strides,
    another executor) still replays: kernels index through the pointer alone."""
    import json
    folder = shutil.copytree(launch_folders(run.artifact_dir)[0], tmp_path / "converted")
    meta = json.loads((folder / "launch.json").read_text())
    meta["executor"] = "pytorchsim"
    for arg in meta["args"]:
        if arg["kind"] == "tensor":
            arg["size"], arg["stride"] = [arg["span"]], [1]
    (folder / "launch.json").write_text(json.dumps(meta))
    report = replay_launch(CapturedLaunch(str(folder)))
    assert report.ok and not report.exact, report.summary()
