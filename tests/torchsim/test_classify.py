"""Every PyTorchSim failure text in the reference lands in the right kind and stage."""
import pathlib

import pytest

from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.torchsim.failure_text import classify

LOGS = pathlib.Path(__file__).parent / "logs"

# fixture -> (kind, stage, their sweep bucket, a fragment the detail/excerpt must carry)
EXPECTED = {
    "triton_wrong_values_after_togsim": (Kind.WRONG_VALUES, "compare", "wrong_values", "Max abs diff: 0.204"),
    "mlir_spike_invalid_spad_access": (Kind.CRASH, "spike", "spike_fault", "exit code 200 (INVALID_SPAD_ACCESS)"),
    "mlir_spike_stack_overflow": (Kind.CRASH, "spike", "spike_fault", "exit code 201 (STACK_OVERFLOW)"),
    "triton_spike_user_load_segfault": (Kind.CRASH, "spike", "spike_fault", "triton_npu_fused_cat_0 failed"),
    "triton_spike_stage_error_255": (Kind.CRASH, "spike", "spike_fault", "constant_pad_nd_0 failed"),
    "togsim_command_failed": (Kind.CRASH, "togsim", "togsim", "exit code 139"),
    "togsim_subprocess_timeout": (Kind.TIMEOUT, "togsim", "timeout", "exceeded timeout"),
    "togsim_vpu_num_lanes": (Kind.TOOL_ERROR, "config", "togsim_config", "vpu_num_lanes"),
    "triton_shape_mismatch": (Kind.SHAPE_MISMATCH, "launch", "dynamic_shape", "spans 2048"),
    "triton_dtype_mismatch": (Kind.DTYPE_MISMATCH, "launch", "dtype_mismatch", "torch.float16"),
    "triton_spad_overflow": (Kind.COMPILE_ERROR, "compile:spad", "spad_overflow", "usage 4194304 > budget 131072"),
    "triton_ttg_barrier": (Kind.COMPILE_ERROR, "compile:stage2", "compiler_stage", "[stage2]"),
    "triton_linalg_index": (Kind.COMPILE_ERROR, "compile", "compiler_stage", "tnpu pipeline failed"),
    "triton_not_vectorisable": (Kind.COMPILE_ERROR, "compile", "compiler_stage", "NotVectorisable"),
    "triton_libdevice_none": (Kind.COMPILE_ERROR, "compile", "compiler_stage", "NoneType"),
    "triton_llvm_intr_assume": (Kind.COMPILE_ERROR, "compile:stage2", "compiler_stage", "[stage2]"),
    "triton_spec_block_unset": (Kind.COMPILE_ERROR, "spec", "spec_incomplete", "R0_BLOCK is unset"),
    "triton_spec_grid": (Kind.COMPILE_ERROR, "spec", "spec_incomplete", "axis 'y'"),
    "convolution_overrideable": (Kind.UNSUPPORTED, "device", "device_op", "op convolution_overrideable"),
    "triton_wrapper_gap": (Kind.COMPILE_ERROR, "wrapper", "wrapper_gap", "estimate_peak"),
    "triton_missing_dep": (Kind.TOOL_ERROR, "environment", "missing_dep", "filelock"),
    "triton_helpers_undefined": (Kind.UNSUPPORTED, "spec", "triton_helpers", "triton_helpers"),
    "triton_reduction_path": (Kind.COMPILE_ERROR, "compile:reduction", "reduction", "no reduction path"),
    "triton_matmul_no_compute_node": (Kind.RUNTIME_ERROR, "togsim:trace", "matmul_timing", "no compute node"),
    "triton_missing_artifact": (Kind.RUNTIME_ERROR, "artifacts", "missing_artifact", "not found"),
    "sweep_timeout_marker": (Kind.TIMEOUT, "run", "timeout", "__timeout__"),
    "ours_spike_timeout": (Kind.TIMEOUT, "spike", "timeout", "after 300 s"),
    "ours_togsim_signal": (Kind.CRASH, "togsim", "togsim", "exit code -11"),
    "privateuse1_missing_kernel": (Kind.UNSUPPORTED, "device", "device_op", "op aten::_fft_r2c"),
    "spec_no_vpu_num_lanes": (Kind.TOOL_ERROR, "config", "togsim_config", "stonne_big"),
    "c2_compiler_pipeline_failed": (Kind.COMPILE_ERROR, "compile:transform", "compiler_stage", "[transform]"),
    "mlir_spike_unknown_error": (Kind.CRASH, "spike", "spike_fault", "exit code 1"),
    "triton_gem5_sampling_failed": (Kind.RUNTIME_ERROR, "gem5", "gem5", "sampling failed"),
    "values_wrong_per_kernel": (Kind.WRONG_VALUES, "compare", "wrong_values", "VALUES WRONG"),
}


def _text(name):
    return (LOGS / f"{name}.log").read_text()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_failure_text_is_classified(name):
    kind, stage, label, fragment = EXPECTED[name]
    verdict = classify(_text(name))
    assert (verdict.kind, verdict.stage, verdict.label) == (kind, stage, label)
    assert fragment in verdict.message()


def test_every_failure_fixture_has_an_expectation():
    fixtures = {p.stem for p in LOGS.glob("*.log")}
    failures = {n for n in fixtures if not n.endswith("_ok") and not n.startswith("togsim_result_")}
    assert failures == set(EXPECTED)


@pytest.mark.parametrize("name", ["mlir_clean_run_ok", "triton_timing_off_ok"])
def test_clean_runs_name_no_failure(name):
    # INFO lines of a normal run ([TOGSim] ..., [Spike] ...) must not look like a fault.
    verdict = classify(_text(name))
    assert verdict.label == "other"


def test_values_win_over_simulator_words():
    """A run that simulated (TOGSim lines everywhere) and compared wrong is wrong_values,
    even when a simulator failure word is in the same log (their classifier misfiled it)."""
    text = _text("triton_wrong_values_after_togsim") + "\n" + _text("togsim_command_failed")
    assert classify(text).kind == Kind.WRONG_VALUES


def test_spike_fault_wins_over_compiler_words():
    text = _text("triton_spike_stage_error_255")
    assert "StageError" in text
    assert classify(text).stage == "spike"


def test_compiler_stage_comes_from_the_files_when_the_text_names_none():
    verdict = classify(_text("triton_linalg_index"), reached="ttshared")
    assert verdict.stage == "compile:after-ttshared"


def test_unmatched_text_keeps_the_callers_default():
    verdict = classify("RuntimeError: something new\n", default_kind=Kind.COMPILE_ERROR,
                       default_stage="compile")
    assert (verdict.kind, verdict.stage, verdict.label) == (Kind.COMPILE_ERROR, "compile", "other")
    assert verdict.excerpt == "RuntimeError: something new"
