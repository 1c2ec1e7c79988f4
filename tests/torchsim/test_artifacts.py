"""Kernel workdirs: stage reached, copies for a failure, TOGSim cycles, unsimulated ops."""
import pathlib

import pytest
import torch

from torchsim_diff.routes.torchsim import artifacts
from torchsim_diff.routes.torchsim.failure_text import classify

LOGS = pathlib.Path(__file__).parent / "logs"

TRITON_C1 = ["kernel.py", "triton_npu_fused_add_0_spec.py", "triton_npu_fused_add_0_triton.py", "meta.json",
             "stage.log", "01-ttir.mlir", "02-ttshared.mlir", "03-adapted.mlir", "04-custom.mlir",
             "05-triton_npu_fused_add_0.elf", "runtime/in_ptr0.raw", "trace.so"]
TRITON_C2 = ["kernel.py", "k_spec.py", "meta.json", "stage.log", "01-ttir.mlir", "07-regularized.mlir",
             "08-transformed.mlir", "09-custom.mlir", "kernel.json", "launch-4242/runtime/in_ptr0.raw"]
MLIR = ["abc.mlir", "abc_llvm.mlir", "abc.ll", "abc.o", "abc.s", "validation_wrapper.c",
        "validation_binary", "runtime_0000/arg0/0.raw", "cycle_binary", "m5out/stats.txt"]


def _workdir(root, name, files):
    wd = root / name
    for rel in files:
        path = wd / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    return str(wd)


@pytest.mark.parametrize("files, name, count, expected", [
    (TRITON_C1, "triton_a1b2c3d4e5f", 1, "codegen"), (TRITON_C1, "triton_a1b2c3d4e5f", 2, "spec"),
    (TRITON_C1, "triton_a1b2c3d4e5f", 6, "ttir"), (TRITON_C1, "triton_a1b2c3d4e5f", 7, "ttshared"),
    (TRITON_C1, "triton_a1b2c3d4e5f", 9, "custom"), (TRITON_C1, "triton_a1b2c3d4e5f", 10, "binary"),
    (TRITON_C1, "triton_a1b2c3d4e5f", 11, "spike"), (TRITON_C1, "triton_a1b2c3d4e5f", 12, "togsim"),
    (TRITON_C2, "triton_f0e1d2c3b4a", 6, "ttshared"), (TRITON_C2, "triton_f0e1d2c3b4a", 9, "binary"),
    (TRITON_C2, "triton_f0e1d2c3b4a", 10, "spike"),
    (MLIR, "q7w8e9r0t1y", 1, "mlir"), (MLIR, "q7w8e9r0t1y", 3, "llvm-ir"), (MLIR, "q7w8e9r0t1y", 7, "binary"),
    (MLIR, "q7w8e9r0t1y", 8, "spike"), (MLIR, "q7w8e9r0t1y", 10, "gem5"),
])
def test_stage_reached_is_the_last_stage_file_present(tmp_path, files, name, count, expected):
    assert artifacts.stage_reached(_workdir(tmp_path, name, files[:count])) == expected


def test_compile_failure_stage_comes_from_the_dump(tmp_path):
    dump = tmp_path / "dump"
    _workdir(dump, "triton_a1b2c3d4e5f", TRITON_C1[:7])       # stopped after 02-ttshared
    text = (LOGS / "triton_linalg_index.log").read_text()
    assert classify(text, reached=artifacts.last_stage(str(dump))).stage == "compile:after-ttshared"


def test_failure_copies_workdirs_wrapper_and_togsim_logs(tmp_path):
    dump = tmp_path / "dump"
    _workdir(dump, "triton_a1b2c3d4e5f", TRITON_C1[:9] + [".compile.lock"])
    (dump / ".torchinductor").mkdir()
    wrapper = tmp_path / "cwrap.py"
    wrapper.write_text("def call(args):\n    pass\n")
    togsim = tmp_path / "20260422_112927_6fb9d704.log"
    togsim.write_text((LOGS / "togsim_result_20260422_112927_6fb9d704.log").read_text())
    log = f'Wrapper Codegen Path = {wrapper}\n[TOGSim] Simulation log is stored to "{togsim}"\n'
    dest = tmp_path / "artifacts"
    copied = artifacts.collect(dump_path=str(dump), inductor_cache=str(dump / ".torchinductor"),
                               log_dir=str(tmp_path / "none"), log_text=log, dest=str(dest))
    for rel in ("pytorchsim/triton_a1b2c3d4e5f/kernel.py", "pytorchsim/triton_a1b2c3d4e5f/meta.json",
                "pytorchsim/triton_a1b2c3d4e5f/stage.log", "pytorchsim/triton_a1b2c3d4e5f/04-custom.mlir",
                "pytorchsim/triton_a1b2c3d4e5f/triton_npu_fused_add_0_spec.py", "wrapper_0.py",
                "togsim/20260422_112927_6fb9d704.log"):
        assert rel in copied and (dest / rel).is_file()
    assert not any(c.endswith(".lock") for c in copied)


def test_cycles_are_read_from_finished_togsim_logs(tmp_path):
    result = LOGS / "togsim_result_20260422_112927_6fb9d704.log"
    assert artifacts.cycles_of(result.read_text()) == 1243
    second = tmp_path / "second.log"
    second.write_text(result.read_text().replace("1243", "200"))
    unfinished = tmp_path / "unfinished.log"
    unfinished.write_text("[info] TOGSim simulation started\n")
    assert artifacts.total_cycles([str(result), str(second), str(unfinished)]) == 1443
    assert artifacts.total_cycles([str(unfinished)]) is None


def _inductor_wrapper(fn, *inputs):
    import torch._inductor.config as inductor_config
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    # Inductor's defaults, whatever other tests in this process configured (the triton
    # route's shims switch GEMMs to Triton templates, which take mm off extern_kernels).
    with inductor_config.patch(max_autotune_gemm=False, max_autotune=False, cpu_backend="cpp"):
        _, codes = run_and_get_code(torch.compile(fn, backend="inductor", dynamic=False), *inputs)
    return "\n".join(codes)


def test_ops_left_on_extern_kernels_are_named():
    """A real Inductor wrapper: mm stays on extern_kernels, so nothing simulated it."""
    wrapper = _inductor_wrapper(lambda a, b: torch.mm(a, b), torch.randn(4, 5), torch.randn(5, 3))
    assert artifacts.extern_ops(wrapper) == ["extern_kernels.mm"]


def test_views_are_not_counted_as_unsimulated_ops():
    wrapper = _inductor_wrapper(lambda a: a.t()[1:], torch.randn(4, 5))
    assert "reinterpret_tensor" in wrapper
    assert artifacts.extern_ops(wrapper) == []
