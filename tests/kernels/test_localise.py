"""Deliberately wrong launchers (tests/doubles/launchers.py) are caught: the route's outputs
differ from eager, and localisation names the kernel whose launch they broke. The real
launcher is the control: it matches eager and nothing is localised."""
import json
import os

import pytest
from doubles.cases import CaseRun, interpreter_route, make_case, tensor_spec
from doubles.launchers import StridedAsContiguous, SwappedGrid, ZeroSeededOutputs

from torchsim_diff.routes.triton.localise import first_divergent_kernel

# Each program runs a full reduction first (grid 1x1x1, untouched by every double), then
# the kernel the double breaks, so localisation has to skip a launch that reproduces.
# Pointwise on a transposed input with a non-square 2-D grid.
TRANSPOSE_AFTER_REDUCE = (
    "import torch\ndef program(x0, x1, x2):\n    s = x2.exp().sum()\n    return (x0.t() + x1 * s,)\n",
    [tensor_spec("x0", [64, 32]), tensor_spec("x1", [32, 64]), tensor_spec("x2", [4, 4])])
# A partial write into a graph input (index_put: rows the indices skip keep their values).
ROW_WRITE_AFTER_REDUCE = (
    "import torch\ndef program(x0, x1, x2, x3):\n    s = x3.exp().sum()\n    x0[x1, :] = x2 * s\n    return ()\n",
    [tensor_spec("x0", [32, 16], mutated=True),
     tensor_spec("x1", [8], dtype="int64", domain={"kind": "unique_index", "high": 32}),
     tensor_spec("x2", [8, 16]), tensor_spec("x3", [4, 4])])
# Pointwise reading a strided (step 3, offset 2) input.
STRIDED_AFTER_REDUCE = (
    "import torch\ndef program(x0, x1):\n    s = x1.exp().sum()\n    return (x0 * s,)\n",
    [tensor_spec("x0", [40], strides=[3], offset=2, storage=130), tensor_spec("x1", [4, 4])])


def launches(run):
    folder = os.path.join(run.artifact_dir, "kernels")
    return [(name, json.load(open(os.path.join(folder, name, "launch.json")))) for name in run.kernels()]


def first_launch(run, affected):
    """Name of the first captured launch the double's bug applies to."""
    return next(name for name, meta in launches(run) if affected(meta))


def grid_not_symmetric(meta):
    gx, gy, _ = meta["grid"]
    return gx != gy


def has_written_buffer_with_old_contents(meta):
    return any(a["kind"] == "tensor" and a["role"] == "inout" for a in meta["args"])


def has_strided_input(meta):
    def contiguous(a):
        expected, stride = 1, []
        for n in reversed(a["size"]):
            stride.insert(0, expected)
            expected *= n
        return all(s == e for s, e, n in zip(a["stride"], stride, a["size"]) if n > 1)
    return any(a["kind"] == "tensor" and "out_ptr" not in a["name"] and not contiguous(a) for a in meta["args"])


CASES = {
    "swapped_grid": (SwappedGrid, TRANSPOSE_AFTER_REDUCE, grid_not_symmetric),
    "zero_seeded_inout": (ZeroSeededOutputs, ROW_WRITE_AFTER_REDUCE, has_written_buffer_with_old_contents),
    "strided_as_contiguous": (StridedAsContiguous, STRIDED_AFTER_REDUCE, has_strided_input),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_wrong_launcher_is_caught_and_localised(name):
    double, (source, inputs), affected = CASES[name]
    run = CaseRun(interpreter_route(double()), source, make_case(*inputs))
    assert not run.matches_eager(), f"{name}: the wrong launcher's outputs equal eager's"
    found = first_divergent_kernel(run.artifact_dir)
    assert found is not None, f"{name}: no kernel localised"
    assert len(run.kernels()) >= 2 and found["index"] >= 1, "the case should localise past a good launch"
    assert found["launch"] == first_launch(run, affected)
    assert found["capture"]["kernel_name"] == found["kernel_name"]
    assert found["buffers"], found["summary"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_launcher_matches_eager_and_localises_nothing(name):
    _, (source, inputs), _ = CASES[name]
    run = CaseRun(interpreter_route(), source, make_case(*inputs))
    assert run.matches_eager()
    assert first_divergent_kernel(run.artifact_dir) is None


def test_localisation_in_a_child_process_names_the_same_launch():
    double, (source, inputs), _ = CASES["swapped_grid"]
    run = CaseRun(interpreter_route(double()), source, make_case(*inputs))
    here = first_divergent_kernel(run.artifact_dir)
    there = first_divergent_kernel(run.artifact_dir, in_child=True)
    assert there is not None and (there["launch"], there["buffers"]) == (here["launch"], here["buffers"])
