"""Kernel capture: each launch's metadata and buffers describe what the kernel really got."""
import json
import os

import pytest
from doubles.cases import CaseRun, interpreter_route, make_case, tensor_spec

from torchsim_diff.case import layout
from torchsim_diff.kernels.capture import (
    CapturedLaunch,
    CaptureFormatError,
    launch_folders,
)

# x0: transposed view with an offset; x1: mutated in place (an inout buffer).
SOURCE = "import torch\ndef program(x0, x1):\n    x1.add_(x0.t())\n    return (x1.exp().sum(0),)\n"
CASE = make_case(tensor_spec("x0", [6, 5], strides=[1, 7], offset=3, storage=60),
                 tensor_spec("x1", [5, 6], mutated=True))


@pytest.fixture(scope="module")
def run():
    return CaseRun(interpreter_route(), SOURCE, CASE)


def captured(run):
    return [CapturedLaunch(f) for f in launch_folders(run.artifact_dir)]


def graph_input_args(launch, index):
    buffers = [b for b, m in launch.meta["buffers"].items() if m["graph_input"] == index]
    return [a for a in launch.meta["args"] if a["kind"] == "tensor" and a["buffer"] in buffers]


def test_every_launch_is_captured_in_order(run):
    index = json.load(open(os.path.join(run.artifact_dir, "kernels", "index.json")))
    assert index["launches"] == run.kernels()
    assert len(index["launches"]) == run.ctx.metrics.kernel_launches


def test_graph_input_buffer_holds_the_input_storage_before_the_launch(run):
    first = captured(run)[0]
    inputs = layout.materialize_all(CASE)
    for buf, meta in first.meta["buffers"].items():
        if meta["graph_input"] is not None:
            expected = layout.storage_of(inputs[meta["graph_input"]]).numpy().tobytes()
            assert first.buffer_bytes(buf, "before") == expected


def test_strided_input_keeps_its_size_stride_and_offset(run):
    args = [a for launch in captured(run) for a in graph_input_args(launch, 0)]
    assert args, "input x0 reached no kernel"
    spec = CASE["inputs"][0]
    for arg in args:
        assert (arg["size"], arg["stride"], arg["storage_offset"]) == (
            spec["shape"], spec["layout"]["strides"], spec["layout"]["offset"])
        assert arg["role"] == "in"
        assert arg["span"] == 1 + sum((n - 1) * s for n, s in zip(arg["size"], arg["stride"]))


def test_mutated_input_is_inout_and_its_after_bytes_are_the_final_values(run):
    writers = [(launch, a) for launch in captured(run) for a in graph_input_args(launch, 1)
               if a["role"] != "in"]
    assert writers and all(a["role"] == "inout" for _, a in writers)
    launch, arg = writers[-1]
    final = layout.storage_of(run.route_inputs[1]).numpy().tobytes()
    assert launch.buffer_bytes(arg["buffer"], "after") == final


def test_meta_parameters_are_recorded(run):
    for launch in captured(run):
        meta = launch.meta
        assert len(meta["grid"]) == 3 and all(g >= 1 for g in meta["grid"])
        assert any(k.endswith("BLOCK") for k in meta["constexprs"]), meta["constexprs"]
        assert meta["numels"] and all(isinstance(v, int) for v in meta["numels"].values())
        assert f"def {meta['kernel_name']}(" in open(launch.source_path).read()


def test_call_args_rebuild_the_captured_views(run):
    launch = captured(run)[0]
    args = launch.call_args(launch.storages("before"))
    for meta, arg in zip(launch.meta["args"], args):
        if meta["kind"] == "tensor":
            assert list(arg.shape) == meta["size"] and list(arg.stride()) == meta["stride"]
            assert str(arg.dtype) == "torch." + meta["dtype"]
        else:
            assert arg == meta["value"]


def test_reading_a_folder_without_capture_says_what_is_expected(tmp_path):
    with pytest.raises(CaptureFormatError, match="index.json"):
        launch_folders(str(tmp_path))


def test_reading_another_format_is_refused(tmp_path):
    (tmp_path / "launch.json").write_text(json.dumps({"format": "other", "schema": 1}))
    with pytest.raises(CaptureFormatError, match="format='other'"):
        CapturedLaunch(str(tmp_path))


def test_the_captured_run_is_the_one_that_matches_eager(run):
    assert run.matches_eager()


def test_kernel_source_is_rebuilt_when_inductor_left_no_file():
    """On CUDA, kernels loaded from Inductor's caches may have no source file: capture
    must rebuild the module from the JIT function's text rather than fail the run."""
    import types

    from torchsim_diff.kernels.capture import _rebuilt_source
    src = "def triton_poi_fused_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):\n    pass\n"
    launch = types.SimpleNamespace(kernel_name="triton_poi_fused_relu_0", jit_fn=types.SimpleNamespace(src=src))
    text = _rebuilt_source(launch)
    compile(text, "kernel.py", "exec")
    assert "@triton.jit\ndef triton_poi_fused_relu_0" in text and "import triton.language as tl" in text
    missing = _rebuilt_source(types.SimpleNamespace(kernel_name="k", jit_fn=object()))
    assert "cannot be replayed" in missing
