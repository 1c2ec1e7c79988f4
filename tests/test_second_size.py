"""Dynamic shapes: a case's second size (same graph, other sizes, same compiled function),
dynamic=mixed, and freezing."""
import os

import pytest
import torch

from tests.conftest import REPO, make_case
from torchsim_diff.run import second_size
from torchsim_diff.run.checker import Checker
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.routes import EXTRA_ROUTES_ENV, compile_options

DOUBLES = {"double-stale-bound": "tests.doubles.dynamic_routes:StaleBoundRoute",
           "double-dynamic-right": "tests.doubles.dynamic_routes:AlwaysRightRoute"}


@pytest.fixture
def dynamic_doubles(monkeypatch):
    monkeypatch.setenv(EXTRA_ROUTES_ENV, ",".join(f"{k}={v}" for k, v in DOUBLES.items()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))


def _matmul_case(attrs_size=None):
    """relu(x0.t() @ x1) + x2 over a transposed, offset x0; K = 5 is shared by x0 and x1."""
    nodes = [{"id": "v0", "op": "transpose", "args": ["x0"], "attrs": {"dim0": 0, "dim1": 1}},
             {"id": "v1", "op": "matmul", "args": ["v0", "x1"], "attrs": {}},
             {"id": "v2", "op": "add", "args": ["v1", "x2"], "attrs": {}}]
    if attrs_size:
        nodes.append({"id": "v3", "op": "reshape", "args": ["v2"], "attrs": {"shape": [-1, attrs_size]}})
    return make_case(nodes=nodes, outputs=[nodes[-1]["id"]], inputs=[
        ("x0", [5, 3], [1, 6], 2, 40, {"classes": ["transposed", "sliced", "offset"]}),
        ("x1", [5, 7], [7, 1], 0, 35, {}),
        ("x2", [1, 7], [0, 1], 0, 7, {"classes": ["contiguous"]})])


def test_second_size_moves_every_free_size_consistently_and_keeps_layouts():
    case = _matmul_case()
    second = second_size.resized(case)
    assert second.program_source() == case.program_source()
    shapes = {spec["name"]: spec["shape"] for spec in second.inputs}
    assert shapes["x0"][0] == shapes["x1"][0] != 5            # K moved on both sides
    assert shapes["x1"][1] == shapes["x2"][1] != 7 and shapes["x2"][0] == 1
    for old, new in zip(case.inputs, second.inputs):
        assert sorted(old["layout"]["classes"]) == sorted(new["layout"]["classes"])
    assert second.values[compile_options.SECOND_SIZE_MARK] == case.case_id


def test_a_size_named_by_an_attribute_stays_and_a_window_below_a_size_does_not_pin_it():
    second = second_size.resized(_matmul_case(attrs_size=7))
    assert {spec["name"]: spec["shape"][-1] for spec in second.inputs}["x1"] == 7
    narrowed = make_case(nodes=[{"id": "v0", "op": "narrow", "args": ["x0"], "attrs": {"dim": 0, "start": 1, "length": 4}}],
                         inputs=[("x0", [5], [1], 0, 5, {})], outputs=["v0"])
    assert second_size.resized(narrowed).inputs[0]["shape"] == [6]


def test_no_free_size_no_second_size():
    case = make_case(nodes=[{"id": "v0", "op": "reshape", "args": ["x0"], "attrs": {"shape": [2, 4]}}],
                     inputs=[("x0", [2, 4], [4, 1], 0, 8, {})], outputs=["v0"])
    assert second_size.resized(case) is None


def test_a_route_that_mishandles_the_second_size_is_caught(dynamic_doubles, tmp_path):
    case = _matmul_case()
    options = {"double-stale-bound": {"dynamic": "true"}, "double-dynamic-right": {"dynamic": "true"}}
    with Checker(out_dir=str(tmp_path), route_options=options) as checker:
        caught = checker.check(case, "double-stale-bound")
        right = checker.check(case, "double-dynamic-right")
    assert caught.status == Status.FAIL and caught.kind == Kind.WRONG_VALUES
    assert caught.stage == second_size.STAGE and caught.message.startswith("at the second size x0 ")
    assert caught.case == case and caught.bucket != checker_bucket_without_second_size(caught)
    record = caught.record()
    assert record.dynamic is True and record.second_size["status"] == "fail"
    assert right.status == Status.PASS and right.record().second_size["status"] == "pass"


def checker_bucket_without_second_size(verdict):
    from torchsim_diff.buckets import signatures
    return signatures.bucket_of(signatures.signature(verdict.route, verdict.kind, verdict.message, verdict.op,
                                                 verdict.where))


def test_static_shapes_run_one_size(dynamic_doubles, tmp_path):
    with Checker(out_dir=str(tmp_path), route_options={"double-stale-bound": {"dynamic": "false"}}) as checker:
        verdict = checker.check(_matmul_case(), "double-stale-bound")
    assert verdict.status == Status.PASS
    assert verdict.record().second_size is None and verdict.record().dynamic is False


def test_mixed_decides_per_graph_for_about_a_third():
    from hypothesis import HealthCheck, given, settings
    from torchsim_diff.generate.strategies import cases
    decisions = []

    @settings(max_examples=150, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(cases(max_nodes=3))
    def draw(case):
        decision = compile_options.dynamic_for({"dynamic": "mixed"}, case.to_dict())
        second = second_size.resized(case)
        if second is not None:
            assert compile_options.dynamic_for({"dynamic": "mixed"}, second.to_dict()) == decision
        decisions.append(decision)
    draw()
    share = sum(decisions) / len(decisions)
    assert 0.2 < share < 0.45, share


def test_mixed_is_a_valid_value_and_bad_ones_say_so():
    assert compile_options.settings({"dynamic": "mixed"})["dynamic"] == "mixed"
    with pytest.raises(ValueError, match="dynamic=mixed"):
        compile_options.settings({"dynamic": "third"})


def _linear(x, w):
    return torch.relu(x @ w) + 1


def test_freezing_folds_the_inputs_never_mutated_into_the_compiled_code():
    from torch._inductor.utils import run_and_get_code
    torch._dynamo.reset()
    case = make_case(nodes=[], inputs=[("x0", [3, 4], [4, 1], 0, 12, {}), ("x1", [4, 5], [5, 1], 0, 20, {})],
                     outputs=[]).to_dict()
    x, w = torch.randn(3, 4), torch.randn(4, 5)
    fn = compile_options.compile_program(_linear, {"freezing": "true"}, case, [x, w])
    got, codes = run_and_get_code(fn, x, torch.zeros(4, 5))     # a frozen input's value is the example's
    torch.testing.assert_close(got, _linear(x, w))
    assert "_frozen_param" in "\n".join(codes)
    assert compile_options.frozen_positions(case) == [1]


@pytest.mark.parametrize("second_status", [Status.PASS, Status.FAIL])
def test_the_second_run_is_route_time_not_harness_time(second_status):
    from torchsim_diff.results.run_metrics import NOT_HARNESS_TIMES, RunMetrics
    from torchsim_diff.run.checker import Verdict
    first = Verdict(_matmul_case(), "r", Status.PASS, metrics=RunMetrics(t_compile=1.0, t_run=0.5, t_start=0.0))

    def check(case, route, timeout_s):
        kind = Kind.WRONG_VALUES if second_status == Status.FAIL else None
        return Verdict(case, route, second_status, kind, message="m", metrics=RunMetrics(t_compile=2.0, t_run=0.25))

    verdict = second_size.replay(check, first, None, NOT_HARNESS_TIMES)
    verdict.t_case = 4.0
    assert verdict.status == second_status
    assert (verdict.metrics.t_compile, verdict.metrics.t_run) == (3.0, 0.75)
    assert verdict.t_harness == pytest.approx(0.25)
