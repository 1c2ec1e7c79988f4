"""Route `triton-spike`: the prototype's four bit-exact kernels (masked add, runtime-strided 2-D
copy, 3-D grid probe, an Inductor pointwise kernel), the launcher's seams (storages, strides,
in/out contents, grid, block sizes) each broken by a double and caught at its kernel, the
stages' failure kinds, cost and VLEN. Needs the whole chain; skipped with the reason without it."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles import spike_launchers  # noqa: E402
from doubles.cases import CaseRun, make_case, tensor_spec  # noqa: E402

from torchsim_diff.routes.triton.localise import first_divergent_kernel  # noqa: E402
from torchsim_diff.routes.triton.launch_replay import replay_artifact  # noqa: E402
from torchsim_diff.results.kinds import Kind  # noqa: E402
from torchsim_diff.routes import make_route  # noqa: E402
from torchsim_diff.routes.base import RouteFailure, RunContext, Unsupported  # noqa: E402

pytestmark = pytest.mark.slow

POINTWISE = "import torch\ndef program(x0):\n    return (torch.relu(x0.t() * 2.0 + 1.0),)\n"
SOFTMAX = "import torch\ndef program(x0, x1):\n    return (torch.softmax(x0 * 0.5 + x1, dim=-1),)\n"


def spike_route(options=None, share_with=None):
    route = make_route("triton-spike", options)
    ok, reason = route.available()
    if not ok:
        pytest.skip(reason)
    route.setup()
    if share_with is not None:  # one TTIR child for the whole module: it takes seconds to start
        route.spike_launcher.ttir_server.close()
        route.spike_launcher.ttir_server = share_with.spike_launcher.ttir_server
    return route


@pytest.fixture(scope="module")
def route():
    return spike_route()


# ---- the prototype's hand-written kernels, launched directly ---------------------------------
def kernel_launch(name, args, arg_names, signature, grid, constexprs):
    from doubles import spike_kernels
    from torchsim_diff.routes.triton.shims import KernelLaunch
    return KernelLaunch(kernel_name=name, jit_fn=getattr(spike_kernels, name),
                        source_path=spike_kernels.__file__, arg_names=arg_names, args=args,
                        signature=signature, interpreted=True, grid=grid, constexprs=constexprs)


def storage(t):
    return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())


def add_launch():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(1000, generator=g), torch.randn(1000, generator=g)
    out = torch.full((1024,), -7.0)
    return kernel_launch("add_kernel", [x, y, out, 1000], ["x_ptr", "y_ptr", "out_ptr", "n"],
                         {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                         (4, 1, 1), {"BLOCK": 256})


def strided2d_launch():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(40, 50, generator=g)[3:, ::2]                # (37, 25), strides (50, 2), offset 150
    out = torch.full((26, 40), -7.0)[1:, 2:39].t()               # (37, 25), strides (1, 40), offset 42
    names = ["x_ptr", "out_ptr", "M", "N", "sxm", "sxn", "som", "son"]
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", **{n: "i32" for n in names[2:]},
                 "BM": "constexpr", "BN": "constexpr"}
    return kernel_launch("strided2d_kernel", [x, out, 37, 25, *x.stride(), *out.stride()], names, signature,
                         (3, 2, 1), {"BM": 16, "BN": 16})


def grid_probe_launch():
    out = torch.full((360,), -1, dtype=torch.int32)
    return kernel_launch("grid_probe_kernel", [out], ["out_ptr"], {"out_ptr": "*i32"}, (3, 2, 2), {})


@pytest.mark.parametrize("make", [add_launch, strided2d_launch, grid_probe_launch], ids=lambda f: f.__name__)
def test_prototype_kernels_are_bit_exact_with_the_interpreter(route, make, tmp_path):
    from torchsim_diff.routes.triton.shims import run_interpreted
    on_spike, reference = make(), make()
    route.spike_launcher.begin(RunContext(artifact_dir=str(tmp_path), case={}))
    route.spike_launcher.launch(on_spike)
    run_interpreted(reference)
    for got, want in zip(on_spike.args, reference.args):
        if isinstance(got, torch.Tensor):   # whole storages: guards and unwritten elements included
            assert torch.equal(storage(got).view(torch.uint8), storage(want).view(torch.uint8))
    assert on_spike.record_extra["bit_exact_with"] == ["interpreter"]
    assert on_spike.record_extra["spike_instret"] > 0      # the grid walk's, for TOGSim's kernel TOGs


def test_grid_probe_sees_every_program_with_the_grid_size(route, tmp_path):
    launch = grid_probe_launch()
    route.spike_launcher.begin(RunContext(artifact_dir=str(tmp_path), case={}))
    route.spike_launcher.launch(launch)
    out = launch.args[0]
    for x in range(3):
        for y in range(2):
            for z in range(2):
                i = x + 10 * y + 100 * z
                assert out[3 * i:3 * i + 3].tolist() == [3, 2, 2]
    assert int((out == -1).sum()) == 360 - 3 * 12


# ---- Inductor's kernels through the whole route -------------------------------------------------
def test_inductor_pointwise_kernel_replays_bit_exact_in_the_interpreter(route):
    run = CaseRun(route, POINTWISE, make_case(tensor_spec("x0", [40, 30], strides=[1, 45], offset=5, storage=1400)))
    assert run.matches_eager()
    report = replay_artifact(run.artifact_dir, executor="interpreter", in_child=True)  # as check.py does
    assert report.ok and all(launch.exact for launch in report.launches), report.summary()
    assert run.ctx.metrics.cost == sum(run.ctx.metrics.cost_per_launch) > 0
    for name in ("kernel.ttir", "kernel.fixed.ttir", "kernel.adapter.mlir", "kernel.linalg.mlir", "kernel.ll"):
        assert any(name in files for _, _, files in os.walk(os.path.join(run.artifact_dir, "triton-spike")))


def test_strided_offset_input_and_inplace_mutation_match_eager(route):
    source = "import torch\ndef program(x0, x1):\n    x1.mul_(x0.t())\n    return (x0 + 1,)\n"
    case = make_case(tensor_spec("x0", [5, 7], strides=[1, 6], offset=3, storage=50),
                     tensor_spec("x1", [7, 5], strides=[10, 2], offset=1, storage=80, mutated=True))
    assert CaseRun(route, source, case).matches_eager()


def test_reduction_matches_eager_and_is_not_held_to_bit_exactness(route):
    source = "import torch\ndef program(x0, x1):\n    return (torch.relu(x0.t() + x1).sum(1),)\n"
    run = CaseRun(route, source, make_case(tensor_spec("x0", [64, 32]), tensor_spec("x1", [32, 64])))
    assert run.matches_eager()
    report = replay_artifact(run.artifact_dir, executor="interpreter", in_child=True)  # as check.py does
    assert report.ok and not any(launch.exact for launch in report.launches)


def test_float_predicates_run_on_spike_and_match_eager(route):
    # libdevice isnan/isinf/signbit become exact arith/math ops (fixups); log of a negative is NaN,
    # a division by a signed zero is a signed infinity
    source = ("import torch\ndef program(x0, x1):\n    y = torch.log(x0)\n    z = x1 / (x0 * (x0 > 0).float())\n"
              "    return (torch.isnan(y).float() + 2 * torch.isinf(z).float() + 4 * torch.signbit(z).float(),)\n")
    run = CaseRun(route, source, make_case(tensor_spec("x0", [8, 16]), tensor_spec("x1", [8, 16])))
    flags = run.eager_outputs[0].long()
    assert all(((flags & bit) != 0).any() and ((flags & bit) == 0).any() for bit in (1, 2, 4))
    assert run.matches_eager()
    assert run.ctx.metrics.cost > 0


def test_elf_is_built_once_per_kernel_specialisation(route):
    run = CaseRun(route, POINTWISE, make_case(tensor_spec("x0", [24, 16])))
    assert "clang" in run.ctx.metrics.stage_s            # the compiling run built the ELF ...
    before = len(route.spike_launcher._builds)
    again = CaseRun(route, POINTWISE, make_case(tensor_spec("x0", [24, 16]), seed=99))
    assert len(route.spike_launcher._builds) == before and "clang" not in again.ctx.metrics.stage_s  # ... and only it


def test_a_launch_on_the_same_bytes_runs_on_spike_once_per_case(route):
    before = route.spike_launcher._runs, route.spike_launcher.reused
    run = CaseRun(route, POINTWISE, make_case(tensor_spec("x0", [24, 16])))
    assert run.matches_eager()
    runs, reused = route.spike_launcher._runs - before[0], route.spike_launcher.reused - before[1]
    # the compiling run ran it; the checked run reused that answer (and still recorded its cost)
    assert runs == reused == run.ctx.metrics.kernel_launches == len(run.ctx.metrics.cost_per_launch) == 1


# ---- parts the chain cannot take run on the host; the rest still runs on Spike --------------
TOPK_THEN_POINTWISE = ("import torch\ndef program(x0, x1):\n"
                       "    return (torch.topk(x0, 3, dim=1).values * 2.0, torch.relu(x0.t() + 1.0))\n")
CUMSUM_AND_POINTWISE = ("import torch\ndef program(x0, x1):\n"
                        "    return (torch.cumsum(x0, 1), torch.relu(x1 * 2.0 + 1.0))\n")


@pytest.mark.parametrize("source, host_part", [(TOPK_THEN_POINTWISE, "topk"), (CUMSUM_AND_POINTWISE, "cumsum")],
                         ids=["op-left-to-aten", "scan-kernel"])
def test_a_part_the_chain_cannot_take_runs_on_the_host_and_the_rest_on_spike(route, source, host_part):
    run = CaseRun(route, source, make_case(tensor_spec("x0", [6, 20]), tensor_spec("x1", [5, 7])))
    assert run.matches_eager()
    assert any(host_part in part for part in run.ctx.metrics.host_parts), run.ctx.metrics.host_parts
    assert run.ctx.metrics.cost > 0   # the other kernels ran on Spike (check.py makes the case unsupported)


def test_a_case_with_nothing_on_spike_is_unsupported(route):
    only_aten = "import torch\ndef program(x0):\n    return (torch.topk(x0, 3, dim=1).values,)\n"
    with pytest.raises(Unsupported, match="nothing ran on Spike: op ran outside Triton as .*topk"):
        CaseRun(route, only_aten, make_case(tensor_spec("x0", [6, 20])))


# ---- launcher doubles: each caught, and localised to the kernel ---------------------------------
DOUBLE_CASES = {
    "StridesAsContiguous": (POINTWISE, [tensor_spec("x0", [40, 30], strides=[1, 45], offset=5, storage=1400)]),
    "ZeroSeededInOut": ("import torch\ndef program(x0, x1):\n    x1.add_(x0)\n    return ()\n",
                        [tensor_spec("x0", [50, 60]), tensor_spec("x1", [50, 60], mutated=True)]),
    "ReversedGrid": (POINTWISE, [tensor_spec("x0", [70, 50])]),
    "WrongBlockSize": (POINTWISE, [tensor_spec("x0", [70, 50])]),
}


@pytest.mark.e2e    # a case through Triton, the adapter and Spike, then localised
@pytest.mark.parametrize("double", sorted(DOUBLE_CASES))
def test_launcher_double_is_caught_and_localised_to_its_kernel(route, double):
    broken = spike_route({"launcher": getattr(spike_launchers, double)()}, share_with=route)
    source, inputs = DOUBLE_CASES[double]
    run = CaseRun(broken, source, make_case(*inputs))
    assert not run.matches_eager(), f"{double} went unnoticed"
    found = first_divergent_kernel(run.artifact_dir, in_child=True)   # as check.py does
    assert found is not None and found["kernel_name"].startswith("triton_"), found
    assert found["error"] is None and found["buffers"], found   # diverged, not failed to replay
    assert CaseRun(route, source, make_case(*inputs)).matches_eager()   # the right launcher passes it


# ---- stages, kinds, options -------------------------------------------------------------------
def test_xblock1_softmax_fails_in_the_adapter_stage(route):
    # A known triton-adapter-opt bug (corpora/known/adapter-xblock1-splat-scalar-mask/).
    with pytest.raises(RouteFailure) as failure:
        CaseRun(route, SOFTMAX, make_case(tensor_spec("x0", [6, 50]), tensor_spec("x1", [6, 50])))
    assert failure.value.stage == "adapter" and failure.value.kind == Kind.COMPILE_ERROR
    assert "failed to legalize unresolved materialization" in failure.value.message


def test_instruction_budget_is_a_timeout(route):
    short = spike_route({"max_instructions": 2000}, share_with=route)
    with pytest.raises(RouteFailure) as failure:
        CaseRun(short, POINTWISE, make_case(tensor_spec("x0", [40, 30])))
    assert failure.value.kind == Kind.TIMEOUT and failure.value.stage == "run"


def test_vlen_option_reaches_spike_and_changes_the_cost_not_the_values(route):
    costs = {}
    for vlen in (128, 512):
        wide = spike_route({"vlen": vlen}, share_with=route)
        run = CaseRun(wide, POINTWISE, make_case(tensor_spec("x0", [40, 30])))
        assert run.matches_eager() and run.ctx.metrics.vlen == vlen
        costs[vlen] = run.ctx.metrics.cost
    assert costs[128] != costs[512]


def test_unknown_launcher_option_names_the_fix():
    with pytest.raises(ValueError, match="SpikeLauncher subclass"):
        make_route("triton-spike", {"launcher": "doubles.launchers:SwappedGrid"})._make_launcher()
