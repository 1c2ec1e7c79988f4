"""The PyTorchSim routes end to end, and their driver on a real Inductor.

End-to-end tests need a PyTorchSim environment (TORCHSIM_PYTHON, TORCHSIM_DIR; see
docs/pytorchsim.md) and skip with route.available()'s reason elsewhere. The driver tests
run TorchSimProgram, the part that is ours (per-program dump, log capture, classification,
write-back, coverage check), on Inductor's CPU backend here: they say nothing about
PyTorchSim itself.
"""
import os
import sys

import pytest
import torch

from torchsim_diff.case import layout
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.routes import make_route
from torchsim_diff.routes.base import RouteFailure, RunContext, Unsupported
from torchsim_diff.routes.torchsim.torchsim import TorchSimProgram, TorchSimTritonRoute
from torchsim_diff.routes.torchsim import config, generation

ROUTES = ["torchsim-mlir", "torchsim-triton"]


def _input(name, shape, strides=None, offset=0, storage=None, mutated=False):
    strides = strides or [shape[1], 1]
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return {"name": name, "shape": shape, "dtype": "float32", "domain": {"kind": "real"},
            "layout": {"classes": ["contiguous"], "strides": strides, "offset": offset,
                       "storage_size": storage or offset + span}, "mutated": mutated}


def _case(nodes, outputs, *inputs):
    return {"schema": 1, "dtype": "float32", "inputs": list(inputs), "nodes": nodes, "outputs": outputs,
            "values": {"seed": 11, "special": False}}


ADD = _case([{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}], ["v0"],
            _input("x0", [4, 8]), _input("x1", [4, 8]))


def _require(route_name, options=None):
    route = make_route(route_name, options)
    ok, reason = route.available()
    if not ok:
        pytest.skip(f"{route_name} unavailable: {reason}")
    return route


@pytest.mark.parametrize("route_name", ROUTES)
def test_add_passes_on_pytorchsim(route_name, tmp_path):
    _require(route_name)
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.case.graph import Case
    with Checker(out_dir=str(tmp_path), timeout_s=1800) as checker:
        verdict = checker.check(Case.from_dict(ADD), route_name)
    assert verdict.status == Status.PASS, verdict.message


@pytest.mark.parametrize("route_name", ROUTES)
def test_timing_reports_togsim_cycles_as_cost(route_name, tmp_path):
    _require(route_name, {"timing": "1"})
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.case.graph import Case
    with Checker(out_dir=str(tmp_path), timeout_s=3600, route_options={route_name: {"timing": "1"}}) as checker:
        verdict = checker.check(Case.from_dict(ADD), route_name)
    assert verdict.status == Status.PASS, verdict.message
    assert isinstance(verdict.metrics.cost, int) and verdict.metrics.cost > 0


# -- the driver on Inductor's CPU backend ---------------------------------------------------
@pytest.fixture()
def cpu_driver(tmp_path):
    """A TorchSimTritonRoute whose device is the CPU: setup() is bypassed on purpose."""
    route = TorchSimTritonRoute({})
    route.device, route.timing, route.limits = torch.device("cpu"), False, {}
    route.torchsim_dir, route.work_root, route.machine_config = str(tmp_path), str(tmp_path), "m.yml"
    route.generation = generation.Generation("C1", "driver test: no checkout")

    def run(source, case):
        namespace = {}
        exec(source, namespace)
        env = config.CaseEnvironment(root=str(tmp_path / "program"), torchsim_dir=str(tmp_path),
                                     machine_config="m.yml", timing=False)
        program = TorchSimProgram(route, namespace["program"], env)
        ctx = RunContext(artifact_dir=str(tmp_path / "artifacts"), case=case)
        inputs = layout.materialize_all(case)
        import torch._inductor.config as inductor_config
        # Inductor's defaults, whatever other tests in this process configured (the triton
        # route's shims switch GEMMs to Triton templates and the CPU backend to Triton).
        with inductor_config.patch(max_autotune_gemm=False, max_autotune=False, cpu_backend="cpp"):
            return program(inputs, ctx), inputs, ctx
    return run


def test_driver_reports_extern_kernels_as_unsupported(cpu_driver):
    case = _case([], [], _input("x0", [4, 5]), _input("x1", [5, 3]))
    with pytest.raises(Unsupported, match="extern_kernels.mm"):
        cpu_driver("import torch\ndef program(x0, x1):\n    return (torch.mm(x0, x1),)\n", case)


def test_driver_writes_mutations_back_and_keeps_the_log(cpu_driver):
    case = _case([], [], _input("x0", [3, 4], strides=[1, 3], offset=2, storage=16, mutated=True))
    eager = layout.materialize_all(case)
    expected = eager[0].mul_(2.0) + 1
    outputs, inputs, ctx = cpu_driver(
        "import torch\ndef program(x0):\n    x0.mul_(2.0)\n    return (x0 + 1,)\n", case)
    torch.testing.assert_close(outputs[0], expected)
    torch.testing.assert_close(layout.storage_of(inputs[0]), layout.storage_of(eager[0]))
    assert os.path.isfile(os.path.join(ctx.artifact_dir, "torchsim.log"))
    assert any(n.startswith("wrapper_") for n in os.listdir(ctx.artifact_dir))


def test_driver_classifies_a_failure_from_the_captured_log(cpu_driver, monkeypatch):
    """PyTorchSim logs "[Spike] Command failed with exit code 200" and raises a bare
    RuntimeError("INVALID_SPAD_ACCESS"); the kind and stage must come from the log line."""
    from torchsim_diff.routes.torchsim import device

    def failing_launch(view, dev):
        print("[ERROR] [simulator.simulator] [Spike] Command failed with exit code 200", file=sys.stderr)
        raise RuntimeError("INVALID_SPAD_ACCESS")
    monkeypatch.setattr(device, "to_device", failing_launch)
    with pytest.raises(RouteFailure) as failure:
        cpu_driver("import torch\ndef program(x0):\n    return (x0 + 1,)\n", _case([], [], _input("x0", [2, 2])))
    assert (failure.value.kind, failure.value.stage) == (Kind.CRASH, "spike")
    assert "exit code 200 (INVALID_SPAD_ACCESS)" in failure.value.message
    assert "torchsim.log" in failure.value.artifacts


def test_driver_reports_a_graph_break_as_unsupported(cpu_driver):
    source = ("import torch\n"
              "def program(x0):\n"
              "    print('graph break')\n"
              "    return (x0 + 1,)\n")
    with pytest.raises(Unsupported, match="dynamo cannot trace"):
        cpu_driver(source, _case([], [], _input("x0", [2, 2])))
