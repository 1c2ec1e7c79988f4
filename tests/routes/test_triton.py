"""Route `triton`: Inductor's Triton kernels in Triton's interpreter, on the prototype's five
probe graphs (reduction over a transposed input, softmax, indexed row write into an input,
permute + broadcast, matmul through the Triton template); and the guards around the route."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from doubles.cases import CaseRun, interpreter_route, make_case, tensor_spec  # noqa: E402
from doubles.probes import PROBES  # noqa: E402

from torchsim_diff.routes import make_route  # noqa: E402
from torchsim_diff.routes.base import Unsupported  # noqa: E402
from torchsim_diff.routes.triton.triton import fallback_calls  # noqa: E402

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def route():
    return interpreter_route()


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe_graph_matches_eager_and_launches_triton_kernels(route, name):
    source, inputs = PROBES[name]
    run = CaseRun(route, source, make_case(*inputs))
    assert run.matches_eager()
    assert run.ctx.metrics.kernel_launches >= 1
    assert run.kernels(), "no kernel launch was captured"


def test_matmul_runs_as_triton_template_not_aten(route):
    source, inputs = PROBES["g5_matmul_template"]
    run = CaseRun(route, source, make_case(*inputs))
    assert any("triton_tem_" in k for k in run.kernels())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_matmul_template_matches_eager(route, dtype):
    # bf16 needs shim 9: the interpreter's tl.dot multiplied bf16 bit patterns as integers.
    source = "import torch\ndef program(x0, x1):\n    return (x0 @ x1.t(),)\n"
    case = make_case(tensor_spec("x0", [12, 20], dtype=dtype), tensor_spec("x1", [12, 20], dtype=dtype))
    run = CaseRun(route, source, case)
    assert run.matches_eager() and any("triton_tem_" in k for k in run.kernels())


def test_strided_offset_input_and_inplace_mutation_match_eager(route):
    source = "import torch\ndef program(x0, x1):\n    x1.mul_(x0.t())\n    return (x0 + 1,)\n"
    case = make_case(tensor_spec("x0", [5, 7], strides=[1, 6], offset=3, storage=50),
                     tensor_spec("x1", [7, 5], strides=[10, 2], offset=1, storage=80, mutated=True))
    assert CaseRun(route, source, case).matches_eager()


def test_aten_fallback_is_reported_unsupported_not_passed(route):
    # Inductor has no lowering for kthvalue: the wrapper calls ATen.
    source = "import torch\ndef program(x0):\n    return (torch.kthvalue(x0, 2, dim=0)[0],)\n"
    with pytest.raises(Unsupported, match="aten.kthvalue"):
        CaseRun(route, source, make_case(tensor_spec("x0", [6, 3])))


def test_a_matmul_no_triton_template_fits_is_unsupported_not_a_compile_error(route):
    # Inductor offers no Triton GEMM template for a (1, 128) @ (128, 2); only ATen's GEMM would do.
    source = "import torch\ndef program(x0, x1):\n    return (torch.mm(x0, x1),)\n"
    with pytest.raises(Unsupported, match="no Triton GEMM template"):
        CaseRun(route, source, make_case(tensor_spec("x0", [1, 128]), tensor_spec("x1", [128, 2])))


def test_templates_offered_that_all_fail_to_compile_stay_a_failure():
    from torch._inductor.select_algorithm import NoValidChoicesError
    from torchsim_diff.routes.triton.triton import _no_gemm_choice
    offered_none = NoValidChoicesError("No choices to select. Provided reason: No choices exist for backend. ...")
    all_failed = NoValidChoicesError("No choices to select. Provided reason: All choices failed to compile for backend.")
    wrapped = RuntimeError("InductorError: LoweringException")
    wrapped.__cause__ = offered_none
    assert _no_gemm_choice(wrapped) and _no_gemm_choice(offered_none)
    assert not _no_gemm_choice(all_failed) and not _no_gemm_choice(RuntimeError("CantSplit: 2 not divisible by 0"))


@pytest.mark.parametrize("wrapper,expected", [
    ("def call(args):\n    extern_kernels.mm(arg0_1, arg1_1, out=buf0)\n", ["extern_kernels.mm"]),
    ("def call(args):\n    buf1 = torch.ops.aten.sort.stable(arg0_1, dim=0)\n", ["torch.ops.aten.sort.stable"]),
    ("def call(args):\n    buf0 = empty_strided_cpu((4, ), (1, ), torch.float32)\n"
     "    triton_poi_fused_0.run(arg0_1, buf0, 4, stream=stream0)\n", []),
    ("def call(args):\n    return (reinterpret_tensor(arg0_1, (4, 4), (1, 4), 0), )\n", []),
])
def test_fallback_calls_reads_the_wrapper(wrapper, expected):
    assert fallback_calls(wrapper) == expected


def test_worker_env_sets_interpreter_before_import():
    assert make_route("triton").worker_env({}) == {"TRITON_INTERPRET": "1"}
    assert make_route("triton-cuda").worker_env({}).get("TRITON_INTERPRET") != "1"


def test_triton_cuda_is_unavailable_with_a_reason_without_gpu():
    import torch
    ok, reason = make_route("triton-cuda").available()
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present; the unavailable path is not reachable here")
    assert not ok and ("CUDA" in reason or "GPU" in reason)


def test_unsupported_versions_make_the_route_unavailable(monkeypatch):
    from torchsim_diff.routes.triton import shims
    monkeypatch.delenv(shims.UNCHECKED_ENV, raising=False)
    monkeypatch.setattr(shims, "installed_versions", lambda: {"torch": "2.13.0", "triton": "9.0.0"})
    ok, reason = make_route("triton").available()
    assert not ok and "triton==9.0.0 is not supported" in reason


def run_probes_in_child(route_name, artifact_root, **env):
    """Run the probe graphs on `route_name` in a child process (own TRITON_INTERPRET)."""
    import json
    import subprocess
    repo = os.path.dirname(TESTS_DIR)
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join([repo, TESTS_DIR]), **env)
    done = subprocess.run([sys.executable, "-m", "doubles.probes", route_name, str(artifact_root)],
                          cwd=TESTS_DIR, env=child_env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cuda_probe_run(tmp_path_factory):
    ok, reason = make_route("triton-cuda").available()
    if not ok:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("cuda_probes")
    return root, run_probes_in_child("triton-cuda", root, TRITON_INTERPRET="0")


def test_triton_cuda_runs_the_probe_graphs(cuda_probe_run):
    _, results = cuda_probe_run
    assert results == {name: "pass" for name in PROBES}


@pytest.mark.parametrize("executor", ["cuda", "interpreter"])
def test_cuda_captures_replay_on_gpu_and_in_the_interpreter(cuda_probe_run, executor):
    from torchsim_diff.routes.triton.launch_replay import replay_artifact
    root, _ = cuda_probe_run
    for name in PROBES:
        report = replay_artifact(str(root / name), executor=executor)
        assert report.ok, report.summary()
        assert all(launch.exact == (executor == "cuda") for launch in report.launches)


def test_kernel_sources_are_read_from_the_wrapper(route):
    from torchsim_diff.routes.triton.triton import kernel_sources
    source, inputs = PROBES["g2_softmax"]
    run = CaseRun(route, source, make_case(*inputs))
    sources = kernel_sources(open(os.path.join(run.artifact_dir, "inductor", "wrapper.py")).read())
    for name in run.kernels():
        kernel_name = name.split("_", 1)[1]
        captured = open(os.path.join(run.artifact_dir, "kernels", name, "kernel.py")).read()
        assert captured == sources[kernel_name] and f"def {kernel_name}(" in captured


def test_a_kernel_failing_in_the_first_run_keeps_its_capture_and_the_wrapper(route, tmp_path):
    # Indices up to 99 into 8 rows: Inductor's device_assert fires inside the kernel.
    source = "import torch\ndef program(x0, x1):\n    return (x0[x1] * 2,)\n"
    case = make_case(tensor_spec("x0", [8, 3]),
                     tensor_spec("x1", [6], dtype="int64", domain={"kind": "index", "high": 100}))
    with pytest.raises(Exception, match="index out of bounds|out of bounds|Assert"):
        CaseRun(route, source, case, artifact_dir=str(tmp_path))
    from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders
    launches = [CapturedLaunch(f) for f in launch_folders(str(tmp_path))]
    assert launches and "index" in launches[-1].kernel_name
    assert (tmp_path / "inductor" / "wrapper.py").exists()
