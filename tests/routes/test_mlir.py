"""Route `mlir` (torch-mlir -> linalg -> LLVM -> ExecutionEngine), run in-process.

Every comparison is element by element against eager on the same materialised inputs, and
covers the whole guarded storage of each input, so a route that reads or writes the wrong
buffer (the prototype once returned 24/24 wrong elements without an error) fails here.
"""
from __future__ import annotations

import pytest
import torch

from tests.routes.helpers import (
    assert_same_as_eager,
    case_of,
    permute_add,
    run_route,
    spec,
)
from torchsim_diff.case import layout
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.routes import make_route
from torchsim_diff.routes.base import RouteFailure, RunContext, Unsupported

ROUTE = make_route("mlir")
AVAILABLE, REASON = ROUTE.available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=REASON)


def _multiply_add(dtype):
    def program(x0, x1):
        return (x0 * x1 + x0, (x0 > x1))
    return program, case_of(spec("x0", [4, 5], dtype=dtype), spec("x1", [4, 5], dtype=dtype))


@pytest.mark.parametrize("dtype", ["float64", "float16", "int64", "int32"])
def test_other_dtypes_match_eager(dtype, tmp_path):
    program, case = _multiply_add(dtype)
    for run in run_route(ROUTE, program, case, tmp_path):
        assert_same_as_eager(*run[:4], exact=not layout.dtype_of(dtype).is_floating_point)


def test_bfloat16_matches_eager_or_is_unsupported_where_the_hosts_libgcc_cannot_round_to_it(tmp_path):
    """x86 without AVX512-BF16 rounds to bfloat16 in libgcc's __truncsfbf2 (GCC 13 on): where
    no library has it, the JIT failed with only "Unknown function", a false compile error."""
    from torchsim_diff.routes.mlir import mlir
    program, case = _multiply_add("bfloat16")
    if mlir._defined("__truncsfbf2", tuple(mlir.helper_libraries())):
        for run in run_route(ROUTE, program, case, tmp_path):
            assert_same_as_eager(*run[:4], exact=False)
    else:
        with pytest.raises(Unsupported, match="lacks __truncsfbf2"):
            list(run_route(ROUTE, program, case, tmp_path))


def test_reduction_and_transcendental_match_eager_closely(tmp_path):
    def program(x0):
        return (torch.softmax(x0, -1), x0.sum(0))
    for run in run_route(ROUTE, program, case_of(spec("x0", [6, 9])), tmp_path):
        assert_same_as_eager(*run[:4], exact=False)


def test_artifacts_hold_linalg_llvm_dialect_and_llvm_ir(tmp_path):
    list(run_route(ROUTE, permute_add, case_of(spec("x0", [2, 3, 4]), spec("x1", [2, 3])), tmp_path))
    assert "linalg" in (tmp_path / "kernel.linalg.mlir").read_text()
    assert "llvm.func" in (tmp_path / "kernel.llvm.mlir").read_text()
    assert "define void @_mlir_ciface_torchsim_kernel" in (tmp_path / "kernel.ll").read_text()


def test_export_keeps_torchs_own_leafspec_deprecation_out_of_the_log(tmp_path, recwarn):
    """run_decompositions deep-copies torch's pytree specs; each copy warned (hundreds of lines
    a case in a campaign's log) about a deprecation only torch can act on."""
    list(run_route(ROUTE, permute_add, case_of(spec("x0", [2, 3, 4]), spec("x1", [2, 3])), tmp_path))
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]


def test_complex_dtype_is_unsupported(tmp_path):
    ctx = RunContext(artifact_dir=str(tmp_path), case={})
    with pytest.raises(Unsupported, match="complex64"):
        ROUTE.compile(lambda x: (x * 2,), [torch.zeros(3, dtype=torch.complex64)], ctx)


def test_export_failure_is_classified_at_import_stage(tmp_path):
    def data_dependent(x0):
        if x0.sum() > 0:  # torch.export cannot trace a branch on a tensor value
            return (x0 + 1,)
        return (x0 - 1,)
    ctx = RunContext(artifact_dir=str(tmp_path), case={})
    with pytest.raises(RouteFailure) as failure:
        ROUTE.compile(data_dependent, [torch.ones(3)], ctx)
    assert (failure.value.kind, failure.value.stage) == (Kind.COMPILE_ERROR, "import")


def test_an_aten_op_without_a_lowering_is_unsupported_and_named(tmp_path):
    # torch-mlir 20261001 has no linalg lowering for aten.erfinv
    ctx = RunContext(artifact_dir=str(tmp_path), case={})
    with pytest.raises(Unsupported, match="torch.aten.erfinv") as failure:
        ROUTE.compile(lambda x0: (torch.erfinv(x0),), [torch.zeros(3)], ctx)
    assert failure.value.stage == "import"


def test_a_lowering_that_returns_results_instead_of_out_parameters_is_refused(monkeypatch):
    """The prototype's silent wrong-buffer bug: without modify-public-functions the C wrapper
    takes the result descriptor first and a harness passing inputs first reads garbage."""
    from torchsim_diff.routes.mlir import lowering
    pipeline = lowering.LINALG_TO_LLVM.replace("buffer-results-to-out-params{modify-public-functions=1}",
                                                    "buffer-results-to-out-params")
    monkeypatch.setattr(lowering, "LINALG_TO_LLVM", pipeline)
    with pytest.raises(RouteFailure) as failure:
        lowering.lower_program(lambda x0: (x0.t() + 1.0,), [torch.ones(2, 3)], RunMetrics())
    assert (failure.value.kind, failure.value.stage) == (Kind.TOOL_ERROR, "lowering")
    assert "returns a value" in failure.value.message


def test_half_precision_graph_needing_double_to_half_helper_runs(tmp_path):
    """x86 code for this graph calls __truncdfhf2, which the JIT finds only in libgcc_s."""
    def program(x0, x1, x2):
        return (torch.argmax(x0), torch.nn.functional.gelu(x0), torch.relu(torch.mm(x1, x2)))
    inputs = [spec("x0", [4, 6], dtype="float16"), spec("x1", [5, 3], dtype="float16"),
              spec("x2", [3, 4], dtype="float16")]
    for outputs, route_inputs, eager_outputs, eager_inputs, _ in run_route(ROUTE, program, case_of(*inputs), tmp_path):
        assert torch.equal(outputs[0], eager_outputs[0])
        torch.testing.assert_close(outputs[1], eager_outputs[1], atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(outputs[2], eager_outputs[2], atol=2e-3, rtol=2e-3)
