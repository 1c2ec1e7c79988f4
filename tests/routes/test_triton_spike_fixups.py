"""The triton-spike chain's pieces that need no tool: the version fix-up table, the generated
program stub, scalar packing and the launch header (fast; no adapter, clang or Spike)."""
import struct

import pytest

from torchsim_diff.routes.base import Unsupported
from torchsim_diff.routes.triton_spike import fixups
from torchsim_diff.routes.triton_spike.launcher import MAGIC, LaunchPlan, _scalar_bits, program_stub

LOAD_39 = ('%x = tt.load %ptr, %mask {cachePolicy = #tt.cache_policy<evict_last>} : tensor<64x!tt.ptr<f32>>\n'
           'tt.store %p, %v, %m {cachePolicy = #tt.cache_policy<evict_first>, boundaryCheck = array<i32>} : t\n')
EXTERN_EXP = ('%e = tt.extern_elementwise %t {libname = "", libpath = "", pure = true, symbol = "__nv_expf"} '
              ': (tensor<64xf32>) -> tensor<64xf32>\n')


def test_cache_policy_attributes_are_dropped_and_the_rest_kept():
    fixed = fixups.apply(fixups.TTIR_FIXUPS, LOAD_39)
    assert "cachePolicy" not in fixed
    assert "tt.load %ptr, %mask : tensor<64x!tt.ptr<f32>>" in fixed
    assert "{boundaryCheck = array<i32>}" in fixed


@pytest.mark.parametrize("symbol,op", [("__nv_expf", "math.exp"), ("__nv_exp", "math.exp"),
                                       ("__nv_tanhf", "math.tanh"), ("__nv_fabsf", "math.absf"),
                                       ("__nv_rintf", "math.roundeven"), ("__nv_powf", "math.powf"),
                                       ("__nv_fmodf", "arith.remf")])
def test_libdevice_calls_become_math_ops(symbol, op):
    fixed = fixups.apply(fixups.TTIR_FIXUPS, EXTERN_EXP.replace("__nv_expf", symbol))
    assert fixed == f"%e = {op} %t : tensor<64xf32>\n"


def test_two_operand_libdevice_call_keeps_both_operands():
    text = ('%r = tt.extern_elementwise %a, %b {libname = "", libpath = "", pure = true, symbol = "__nv_atan2f"} '
            ': (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>\n')
    assert fixups.apply(fixups.TTIR_FIXUPS, text) == "%r = math.atan2 %a, %b : tensor<8xf32>\n"


def test_libdevice_call_without_a_math_op_is_unsupported_with_its_name():
    with pytest.raises(Unsupported, match="__nv_lgammaf has no math-dialect equivalent"):
        fixups.apply(fixups.TTIR_FIXUPS, EXTERN_EXP.replace("__nv_expf", "__nv_lgammaf"))


def test_annotation_marks_are_dropped_from_the_adapters_output():
    text = "  %0 = arith.addf %a, %b : f32\n  annotation.mark %0 {overflow_mode = \"trunc\"} : f32\n  return\n"
    assert fixups.apply(fixups.LINALG_FIXUPS, text) == "  %0 = arith.addf %a, %b : f32\n  return\n"


def test_every_fixup_says_why():
    for fixup in fixups.TTIR_FIXUPS + fixups.LINALG_FIXUPS:
        assert fixup.name and len(fixup.why) > 30


def test_program_stub_passes_arguments_in_order_then_grid_then_program_ids():
    # a 0-d input arrives as a scalar between pointers (Inductor's in_ptr0: fp32)
    stub = program_stub("k", ["float", "ptr", "i32", "ptr", "i64"])
    call = [line for line in stub.splitlines() if "call void" in line][0]
    assert call == ("  call void @_mlir_ciface_k(ptr %lock, ptr %workspace, float %s0, ptr %p0, i32 %s1, ptr %p1, "
                    "i64 %s2, i32 %grid0, i32 %grid1, i32 %grid2, i32 %pid0, i32 %pid1, i32 %pid2)")
    assert "%s0 = bitcast i32 %s0.bits to float" in stub and "getelementptr [5 x i64], ptr %pointers, i64 1" in stub


def test_unknown_scalar_llvm_type_is_unsupported():
    with pytest.raises(Unsupported, match="half"):
        program_stub("k", ["half"])


def test_assume_hints_are_dropped():
    text = "    %0 = arith.cmpi sgt, %s, %c0 : i32\n    llvm.intr.assume %0 : i1 loc(#loc19)\n    tt.return\n"
    assert fixups.apply(fixups.TTIR_FIXUPS, text) == "    %0 = arith.cmpi sgt, %s, %c0 : i32\n    tt.return\n"


@pytest.mark.parametrize("kind,value,bits", [("i32", -3, -3), ("i64", 2**40, 2**40), ("i1", True, 1),
                                              ("fp32", 1.5, 0x3FC00000), ("fp64", -2.0, 0xC000000000000000)])
def test_scalar_bits(kind, value, bits):
    assert _scalar_bits("s", kind, value, "k") == bits


def test_scalar_of_an_unknown_triton_type_is_unsupported():
    with pytest.raises(Unsupported, match="Triton type 'fp16'"):
        _scalar_bits("s", "fp16", 1.0, "k")


def test_launch_header_layout():
    import torch
    storages = [torch.zeros(80, dtype=torch.uint8), torch.zeros(12, dtype=torch.uint8)]
    plan = LaunchPlan(storages, [(0, 8, 18), (1, 0, 3)], [7, 0xC000000000000000], (4, 2, 1))
    words = struct.unpack("<17q", plan.header())
    assert words[:7] == (MAGIC, 2, 2, 2, 4, 2, 1)
    assert words[7:9] == (80, 12) and words[9:15] == (0, 8, 18, 1, 0, 3)
    assert words[15] == 7 and words[16] & (2**64 - 1) == 0xC000000000000000


def test_adapter_messages_lose_locations_and_materialization_types():
    from torchsim_diff.routes.triton_spike.toolchain import error_lines
    one = ("<unknown>:0: error: failed to legalize unresolved materialization from () to 'tensor<1x64xf32>' that "
           "remained live after conversion\n/tmp/x/k.py:17:1: error: failed to apply Conversion Patterns\n")
    other = one.replace("from () to 'tensor<1x64xf32>'", "from ('memref<1x64xf32, strided<[64, 1], offset: ?>>') "
                        "to 'tensor<1x64x!tt.ptr<f32>>'")
    assert error_lines(one) == error_lines(other) == (
        "error: failed to legalize unresolved materialization from <type> to <type> that remained live after "
        "conversion | error: failed to apply Conversion Patterns")


def test_triton_ops_left_in_the_adapters_output_fail_at_the_adapter_stage():
    from torchsim_diff.routes.base import RouteFailure
    from torchsim_diff.routes.triton_spike.toolchain import check_adapter_output
    good = "func.func @k(%arg0: memref<?xi8> {tt.tensor_kind = 0 : i32}) {\n  %0 = arith.addi %a, %b : i64\n"
    check_adapter_output(good)
    with pytest.raises(RouteFailure, match="left Triton op.s. tt.reduce unconverted") as failure:
        check_adapter_output(good + '    %10 = "tt.reduce"(%9) <{axis = 1 : i32}> ({\n      tt.reduce.return %11 : i64\n')
    assert failure.value.stage == "adapter"


def test_a_crashed_tool_is_named_by_its_signal():
    from torchsim_diff.routes.triton_spike.toolchain import _status
    assert _status(-6) == "killed by SIGABRT" and _status(1) == "failed (status 1)"


@pytest.mark.parametrize("symbol,ops", [
    ("__nv_isnanf", ["arith.cmpf uno, %t, %t : tensor<64xf32>"]),
    ("__nv_isinff", ["math.absf %t", "arith.constant dense<0x7F800000> : tensor<64xi32>", "arith.cmpf oeq"]),
    ("__nv_signbitf", ["arith.bitcast %t : tensor<64xf32> to tensor<64xi32>", "arith.cmpi slt"])])
def test_float_predicates_become_exact_ops_widened_to_the_calls_int_result(symbol, ops):
    text = EXTERN_EXP.replace("__nv_expf", symbol).replace("-> tensor<64xf32>", "-> tensor<64xi32>")
    fixed = fixups.apply(fixups.TTIR_FIXUPS, text)
    assert "extern_elementwise" not in fixed and all(op in fixed for op in ops)
    assert fixed.splitlines()[-1] == "    %e = arith.extui %tsd.e.p : tensor<64xi1> to tensor<64xi32>"


def test_double_float_predicate_uses_the_double_infinity():
    text = ('%r = tt.extern_elementwise %x {libname = "", libpath = "", pure = true, symbol = "__nv_isinfd"} '
            ': (f64) -> i32\n')
    assert "arith.constant 0x7FF0000000000000 : i64" in fixups.apply(fixups.TTIR_FIXUPS, text)


def test_a_scan_lowered_to_an_npu_library_call_is_unsupported_at_the_adapter_stage():
    from torchsim_diff.routes.triton_spike.toolchain import check_adapter_output
    text = ("module {\n  func.func private @triton_cumprod_0(tensor<1x256xf32>, i32, i1) -> tensor<1x256xf32>\n"
            "  func.func @k(%arg0: memref<?xi8>) {\n")
    with pytest.raises(Unsupported, match="lowers cumprod to a call of @triton_cumprod_0") as raised:
        check_adapter_output(text)
    assert raised.value.stage == "adapter"


def test_a_ttir_compilation_error_is_summarised_by_what_went_wrong_not_its_location():
    import ast
    from triton.compiler.errors import CompilationError
    from torchsim_diff.routes.triton_spike.ttir import error_summary
    node = ast.parse("x = a + b").body[0]
    try:
        try:
            raise TypeError("invalid operands of type pointer<fp32> and float32\nmore")
        except TypeError as cause:
            raise CompilationError("x = a + b", node, None) from cause
    except CompilationError as error:
        assert error_summary(error) == ("CompilationError: TypeError: invalid operands of type pointer<fp32> "
                                        "and float32")
    assert error_summary(CompilationError("x = a + b", node, "bad\nmore")) == "CompilationError: bad"
    assert error_summary(ValueError("one\ntwo")) == "ValueError: one"


def test_a_value_kept_live_by_a_discrete_access_is_another_adapter_bucket():
    from torchsim_diff.routes.triton_spike.toolchain import error_lines
    log = ("k.py:32:5: error: failed to legalize unresolved materialization from ('memref<1x16xf32>') to "
           "'tensor<1x16x!tt.ptr<f32>>' that remained live after conversion\n"
           "k.py:32:5: note: see existing live user here: tt.store %48, %s, %52 {DiscreteMemAccess} : tensor<1x16>\n")
    tile = log.replace(" {DiscreteMemAccess}", "")
    assert error_lines(log) == error_lines(tile) + " (live user: a discrete memory access)"


def test_a_chain_tool_past_its_time_limit_is_a_timeout_of_its_stage():
    from torchsim_diff.results.kinds import Kind
    from torchsim_diff.routes.base import RouteFailure
    from torchsim_diff.routes.triton_spike.toolchain import run_stage
    from torchsim_diff.results.run_metrics import RunMetrics
    metrics = RunMetrics()
    with pytest.raises(RouteFailure) as failure:
        run_stage("clang", ["sleep", "5"], metrics, timeout_s=0.2)
    assert (failure.value.kind, failure.value.stage) == (Kind.TIMEOUT, "clang")
    assert metrics.stage_s["clang"] >= 0.2


def test_huge_modules_are_compiled_without_optimisation(tmp_path):
    from torchsim_diff.routes.triton_spike.launcher import O3_MAX_LINES, optimisation_level
    small, huge = tmp_path / "small.ll", tmp_path / "huge.ll"
    small.write_text("ret void\n" * 10)
    huge.write_text("ret void\n" * (O3_MAX_LINES + 1))
    assert (optimisation_level(str(small)), optimisation_level(str(huge))) == ("-O3", "-O0")
