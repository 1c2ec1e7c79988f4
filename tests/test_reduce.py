"""The reducer: failing cases shrink, keep their bucket, and stay valid."""
import math
import tempfile
import types

import pytest
import torch

from tests.conftest import make_case
from torchsim_diff.case import layout
from torchsim_diff.case.program_check import load_program
from torchsim_diff.buckets import signatures
from torchsim_diff.triage import case_edits, graph_passes, reduce, refine, session_refinements, trigger_ablations, value_passes
from torchsim_diff.run.checker import Checker
from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.base import Compiled, Route


def _padded_case(with_exp: bool = False):
    """Seven nodes: the output goes through sigmoid, log and a transposed input; two more
    nodes feed an in-place write that the failure does not need."""
    nodes = [
        {"id": "v0", "op": "transpose", "args": ["x0"], "attrs": {"dim0": 0, "dim1": 1}},
        {"id": "v1", "op": "add", "args": ["v0", "x1"], "attrs": {}},
        {"id": "v2", "op": "exp" if with_exp else "tanh", "args": ["v1"], "attrs": {}},
        {"id": "v3", "op": "sigmoid", "args": ["v2"], "attrs": {}},
        {"id": "v4", "op": "log", "args": ["v3"], "attrs": {}},
        {"id": "v5", "op": "mul", "args": ["x1", "x1"], "attrs": {}},
        {"id": "v6", "op": "add_", "args": ["x2", "v5"], "attrs": {}},
    ]
    inputs = [("x0", [6, 5], [1, 6], 2, 33, {"classes": ["transposed", "offset"]}),
              ("x1", [5, 6], [6, 1], 0, 30, {}),
              ("x2", [5, 6], [6, 1], 0, 30, {"mutated": True, "classes": ["inout"]})]
    return make_case(nodes=nodes, inputs=inputs, outputs=["v4"], seed=7)


def _buckets(route, *cases):
    """Buckets of cases on `route`, checked afresh (one Checker, outside the reducer)."""
    with Checker(out_dir=tempfile.mkdtemp()) as checker:
        return [checker.check(case, route).bucket for case in cases]


def _runs_in_eager(case) -> bool:
    try:
        load_program(case.program_source())(*layout.materialize_all(case.to_dict()))
    except RuntimeError:
        return False
    return True


def test_wrong_element_case_shrinks_to_few_nodes_in_same_bucket(double_routes, tmp_path, monkeypatch):
    case = _padded_case()
    sent = []
    first_keeping = reduce._Evaluator.first_keeping

    def spy(self, candidates, bucket):
        sent.extend(candidates)
        return first_keeping(self, candidates, bucket)
    monkeypatch.setattr(reduce._Evaluator, "first_keeping", spy)
    result = reduce.reduce_case(case, "double-wrong-element", out_dir=str(tmp_path), jobs=2)
    assert len(case.nodes) == 7
    assert len(result.reduced.nodes) <= 3, result.reduced.program_source()
    assert result.size_after < result.size_before
    assert result.size_after[2] < result.size_before[2]
    assert _buckets("double-wrong-element", result.reduced, case) == [result.bucket] * 2
    assert _runs_in_eager(result.reduced)
    assert result.runs > 1
    assert sent and all(_runs_in_eager(c) for c in sent)    # no invalid candidate reaches the route
    assert f"{result.runs} route runs" in result.summary()


def test_other_bucket_is_never_accepted(double_routes, tmp_path):
    case = _padded_case(with_exp=True)
    route = "double-wrong-unless-exp"
    result = reduce.reduce_case(case, route, out_dir=str(tmp_path), jobs=1)
    # Dropping exp would turn the compile failure into a wrong-values failure: another bucket.
    assert "exp" in result.reduced.ops, result.reduced.program_source()
    assert _buckets(route, result.reduced, case) == [result.bucket] * 2
    assert len(result.reduced.nodes) < len(case.nodes)
    assert _runs_in_eager(result.reduced)


@pytest.mark.e2e
def test_a_hang_is_cut_to_the_hanging_nodes_window_before_anything_else(double_routes, tmp_path):
    # Each candidate that still hangs costs a timeout: dropping the outputs one by one would
    # pay one per output, the window of the hanging node pays one in all.
    nodes = [{"id": "v0", "op": "tanh", "args": ["x0"], "attrs": {}},
             {"id": "v1", "op": "sigmoid", "args": ["x0"], "attrs": {}},
             {"id": "v2", "op": "exp", "args": ["x1"], "attrs": {}}]
    inputs = [("x0", [3], [1], 0, 3, {}), ("x1", [3], [1], 0, 3, {})]
    case = make_case(nodes=nodes, inputs=inputs, outputs=["v0", "v1", "v2"])
    steps = []
    result = reduce.reduce_case(case, "double-hang-on-exp", out_dir=str(tmp_path), jobs=1, timeout_s=2,
                                max_runs=4, progress=steps.append)
    assert result.reduced.ops == ["exp"], result.reduced.program_source()
    assert steps[0].startswith("keep windows: (3, 2, 6) -> (1, 1, 3)"), steps


@pytest.mark.e2e
def test_a_hangs_layout_is_simplified_right_after_its_window(double_routes, tmp_path):
    # A hang's minimal case is not ablated: the offset it kept would name another bucket than
    # the contiguous hang's (a known softmax hang of torch-mlir came back NEW that way).
    nodes = [{"id": "v0", "op": "tanh", "args": ["x0"], "attrs": {}},
             {"id": "v1", "op": "exp", "args": ["x1"], "attrs": {}}]
    inputs = [("x0", [3], [1], 0, 3, {}), ("x1", [3], [1], 2, 5, {"classes": ["offset"]})]
    case = make_case(nodes=nodes, inputs=inputs, outputs=["v0", "v1"])
    steps = []
    result = reduce.reduce_case(case, "double-hang-on-exp", out_dir=str(tmp_path), jobs=1, timeout_s=2,
                                max_runs=5, progress=steps.append)
    assert [s.split(":")[0] for s in steps[:2]] == ["keep windows", "simplify layouts"], steps
    assert signatures.hang_features(result.reduced) == set(), result.reduced.to_dict()["inputs"]


@pytest.mark.parametrize("kind, checks", [(Kind.TIMEOUT, 0), (Kind.WRONG_VALUES, 1)])
def test_a_hangs_values_are_pinned_without_a_run_that_would_cost_a_timeout(kind, checks):
    sent = []
    evaluator = types.SimpleNamespace(original_kind=kind, first_keeping=lambda cases, bucket: sent.append(cases))
    case = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    pinned = reduce._Reducer(evaluator, "bucket", print).pinned(case)
    assert len(sent) == checks
    if kind == Kind.TIMEOUT:
        assert all("data" in spec for spec in pinned.to_dict()["inputs"])


def _verdict(kind, case, t_case=90.0):
    return types.SimpleNamespace(kind=kind, case=case, signature=f"r|{kind.value}|no answer within # s", t_case=t_case)


def test_a_hang_is_given_two_timeouts_of_budget_and_reuses_only_the_reduction_of_a_hang_of_the_same_ops():
    refiner = refine.ReduceThenBucket(types.SimpleNamespace(timeout_s=90.0), budget_s=60.0)
    tanh, exp = (make_case([{"id": "v0", "op": op, "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
                 for op in ("tanh", "exp"))
    assert refiner._budget_for(_verdict(Kind.TIMEOUT, tanh)) == 180.0
    assert refiner._budget_for(_verdict(Kind.TIMEOUT, tanh, t_case=45.0)) == 90.0   # the limit it hung under
    assert refiner._budget_for(_verdict(Kind.CRASH, tanh)) == 60.0
    assert refine.raw_key(_verdict(Kind.TIMEOUT, tanh)) != refine.raw_key(_verdict(Kind.TIMEOUT, exp))
    assert refine.raw_key(_verdict(Kind.CRASH, tanh)) == refine.raw_key(_verdict(Kind.CRASH, exp))


def test_a_hangs_candidates_run_under_the_limit_it_was_found_under():
    """A hang found under a campaign's adaptive limit (42 s) was reduced with each candidate that
    kept hanging run to the checker's whole timeout (120 s): one known torch-mlir hang took 494 s
    to reduce. Its candidates now get the limit it hung under; other failures the checker's."""
    limits = []
    checker = types.SimpleNamespace(timeout_s=120.0, check=lambda case, route, timeout_s: limits.append(timeout_s))
    refiner = refine.ReduceThenBucket(checker, budget_s=60.0)
    case = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    assert refiner._hang_limit(_verdict(Kind.TIMEOUT, case, t_case=42.6)) == 42.6
    assert refiner._hang_limit(_verdict(Kind.TIMEOUT, case, t_case=2.0)) == refine.MIN_HANG_LIMIT_S
    assert refiner._hang_limit(_verdict(Kind.WRONG_VALUES, case)) is None
    for run_limit_s in (42.6, None):
        evaluator = reduce._Evaluator("any", out_dir="unused", jobs=1, timeout_s=120.0, max_runs=5,
                                      checkers=[checker], run_limit_s=run_limit_s)
        evaluator._check(case)
    assert limits == [42.6, 120.0]


def test_a_hangs_minimal_case_is_confirmed_by_the_deadline_never_under_less_than_it_hung_under(monkeypatch):
    """A 10-minute campaign confirmed a hang's minimal case under the checker's whole timeout,
    69 s past its closing share's deadline. Now the confirming run ends by the deadline; where
    less than the limit the hang was found under is left, the reduction is left for later."""
    refiner = refine.ReduceThenBucket(types.SimpleNamespace(timeout_s=120.0), budget_s=60.0)
    case = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    hang = _verdict(Kind.TIMEOUT, case, t_case=42.0)
    monkeypatch.setattr(refine.time, "time", lambda: 1000.0)
    assert refiner._confirming_limit(hang, stop_at=1060.0) == 60.0
    assert refiner._confirming_limit(hang, stop_at=1500.0) == 120.0
    assert refiner._confirming_limit(hang, stop_at=None) is None
    assert refiner._confirming_limit(_verdict(Kind.WRONG_VALUES, case), stop_at=1001.0) is None
    with pytest.raises(refine._Deferred):
        refiner._confirming_limit(hang, stop_at=1030.0)


def test_a_sessions_hangs_are_reduced_after_its_other_failures():
    from torchsim_diff.triage.session_refinements import _in_reduction_order
    cases = [make_case([{"id": "v0", "op": op, "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
             for op in ("tanh", "exp", "relu")]
    hang = types.SimpleNamespace(failed=True, **vars(_verdict(Kind.TIMEOUT, cases[0])))
    crash, again = (types.SimpleNamespace(failed=True, **vars(_verdict(Kind.CRASH, c))) for c in cases[1:])
    assert _in_reduction_order([hang, crash, again]) == [crash, again, hang]


def test_the_closing_time_reduces_the_first_failure_of_each_raw_signature_first():
    from torchsim_diff.triage.session_refinements import _in_reduction_order
    tanh, exp = (make_case([{"id": "v0", "op": op, "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
                 for op in ("tanh", "exp"))
    def failure(signature, case):
        return types.SimpleNamespace(failed=True, kind=Kind.WRONG_VALUES, case=case, signature=signature)
    first, same, other_key, second = (failure("r|wrong_values|tanh|output", tanh), failure("r|wrong_values|tanh|output", tanh),
                                      failure("r|wrong_values|tanh|output", make_case(
                                          [{"id": "v0", "op": "tanh", "args": ["x0"], "attrs": {}}],
                                          [("x0", [3], [1], 0, 3, {})], ["v0"], dtype="float16")),
                                      failure("r|wrong_values|exp|output", exp))
    assert _in_reduction_order([first, same, other_key, second]) == [first, second, other_key, same]


def test_cut_input_keeps_consumer_domain():
    case = _padded_case()
    cuts = [c for c in graph_passes._cut_nodes(case)]
    # Cutting sigmoid (v3) leaves log reading a new input: it must hold positive values.
    cut_v3 = [c for c in cuts if not any(n["id"] == "v3" for n in c.nodes)]
    assert cut_v3
    new_input = cut_v3[0].inputs[-1]
    assert new_input["domain"] == {"kind": "positive"}


def test_a_cut_keeps_the_values_eager_computed_in_a_wider_domain_where_the_narrowest_lacks_them():
    """max(log(x)) of x = [1, 1, 1, 1, -1.5] (seen on triton): cutting log gave an input of positive
    values drawn afresh, since log's zeros are not positive. The NaN was lost, the cut rejected, and
    the minimal case kept log with "negative" as its trigger: a known NaN bug of max filed as NEW."""
    import math
    from torchsim_diff.case import values
    case = make_case([{"id": "v0", "op": "log", "args": ["x0"], "attrs": {}},
                      {"id": "v1", "op": "max_dim", "args": ["v0"], "attrs": {"dim": 1, "keepdim": True}}],
                     [("x0", [1, 5], [5, 1], 0, 5, {"storage": [1.0, 1.0, 1.0, 1.0, -1.5]})], ["v1"])
    (cut_log,) = [c for c in graph_passes._cut_nodes(case) if [n["op"] for n in c.nodes] == ["max_dim"]]
    kept = values.decode(cut_log.inputs[-1]["data"], torch.float32, 5).tolist()
    assert kept[:4] == [0.0] * 4 and math.isnan(kept[4])
    assert cut_log.inputs[-1]["domain"]["kind"] != "positive"


def test_invalid_candidates_are_rejected():
    case = _padded_case()
    data = case.to_dict()
    data["inputs"][1]["shape"] = [4, 6]          # x0.t() + x1 no longer broadcasts
    data["inputs"][1]["layout"]["strides"] = [6, 1]
    bad = type(case).from_dict(data)
    assert not case_edits._is_valid(bad)
    assert case_edits._is_valid(case)


def test_a_candidate_with_more_unique_indices_than_their_range_is_rejected():
    """A shrunk target dim leaves index_put_'s 2 indices a range of 1: duplicates, whose write
    wins is the route's choice (seen as a false triton-cuda finding)."""
    case = make_case([{"id": "v0", "op": "index_put_", "args": ["x0", "x1", "x2"],
                       "attrs": {"view": None, "accumulate": False}}],
                     [("x0", [2, 2, 1], [2, 1, 1], 0, 4, {"mutated": True}),
                      ("x1", [2], [1], 0, 2, {"dtype": "int64", "domain": {"kind": "unique_index", "high": 2, "dim": 0}}),
                      ("x2", [2, 2, 1], [2, 1, 1], 0, 4, {})], ["v0"])
    assert case_edits._is_valid(case)
    data = case.to_dict()
    data["inputs"][0]["shape"], data["inputs"][0]["layout"]["storage_size"] = [1, 2, 1], 2
    data["inputs"][1]["domain"]["high"] = 1
    assert not case_edits._is_valid(type(case).from_dict(data))


def test_a_special_value_is_ablated_to_a_value_its_neighbours_do_not_hold():
    """A subnormal among ones made 1.0 would hide a roll that moved it: the value it takes
    must be new to the view, and inside every value domain."""
    view = torch.tensor([1.0, 1.0, 1e-40, 0.5])
    (without,) = trigger_ablations._without("subnormal", view == 1e-40, view)
    replaced = without[2].item()
    assert replaced not in (1.0, 0.5) and 0.5 <= replaced <= 1.0
    assert without[[0, 1, 3]].tolist() == [1.0, 1.0, 0.5]
    (plain,) = trigger_ablations._without("nan", torch.tensor([float("nan"), 2.0]).isnan(), torch.tensor([float("nan"), 2.0]))
    assert plain.tolist() == [trigger_ablations.PLAIN_VALUE, 2.0]


def test_passing_case_is_refused(double_routes, tmp_path):
    case = _padded_case()
    with pytest.raises(reduce.ReduceError, match="does not fail"):
        reduce.reduce_case(case, "double-raising", out_dir=str(tmp_path), jobs=1)


def test_float16_case_is_raised_to_float32_when_bucket_holds(double_routes, tmp_path):
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}},
                            {"id": "v1", "op": "neg", "args": ["v0"], "attrs": {}}],
                     inputs=[("x0", [3, 4], [4, 1], 0, 12, {})], outputs=["v1"], dtype="float16", seed=3)
    result = reduce.reduce_case(case, "double-wrong-element", out_dir=str(tmp_path), jobs=1)
    assert result.reduced.dtype == "float32"
    assert result.reduced.ops == ["neg"]
    assert case.dtype == "float16"
    assert _buckets("double-wrong-element", result.reduced) == [result.bucket]


def test_tidy_drops_dead_nodes_and_unused_inputs_and_renumbers():
    case = _padded_case()
    data = case.to_dict()
    data["nodes"] = data["nodes"][:5]               # no in-place write: x2 and mul are dead
    data["outputs"] = ["v4"]
    data["nodes"][4]["args"] = ["v2"]              # sigmoid v3 is now dead too (log of tanh)
    tidy = case_edits._tidy(type(case).from_dict(data))
    assert [n["id"] for n in tidy.nodes] == ["v0", "v1", "v2", "v3"]
    assert [i["name"] for i in tidy.inputs] == ["x0", "x1"]
    assert tidy.outputs == ["v3"] and tidy.nodes[-1]["op"] == "log"


def test_layout_simplification_keeps_explicit_values():
    case = _padded_case()
    with_data = case_edits._with_values(case, 0, torch.arange(30.0).reshape(6, 5))
    candidates = list(graph_passes._simplify_layouts(with_data))
    contiguous = candidates[0]
    assert contiguous.inputs[0]["layout"]["strides"] == [5, 1]
    assert contiguous.inputs[0]["layout"]["classes"] == ["contiguous"]
    assert torch.equal(case_edits._materialize(contiguous, 0), case_edits._materialize(with_data, 0))


def test_layout_simplification_of_a_pinned_aliasing_input_keeps_its_values():
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3, 4], [0, 1], 2, 8, {"classes": ["broadcast", "offset"]})], outputs=["v0"], seed=5)
    pinned = reduce._pinned(case)
    candidates = [c for c in graph_passes._simplify_layouts(pinned) if c is not None]   # a stride-0 copy_ used to raise
    assert [c.inputs[0]["layout"]["strides"] for c in candidates] == [[4, 1], [0, 1], [0, 1]]
    assert all(torch.equal(case_edits._materialize(c, 0), case_edits._materialize(case, 0)) for c in candidates)


def test_eager_runner_used_by_these_tests_detects_invalid_cases():
    case = _padded_case()
    data = case.to_dict()
    data["inputs"][1]["shape"], data["inputs"][1]["layout"]["strides"] = [4, 6], [6, 1]
    assert not _runs_in_eager(type(case).from_dict(data))
    assert _runs_in_eager(case)


def test_dimension_shrinking_filters_out_candidates_eager_rejects():
    case = _padded_case()
    raw = list(graph_passes._shrink_dims(case))
    kept = [c for _, c in reduce._valid_candidates(iter(raw), case)]
    assert any(not _runs_in_eager(c) for c in raw)       # x1 alone shrunk no longer broadcasts
    assert kept and all(_runs_in_eager(c) for c in kept)
    assert all(c.size()[2] < case.size()[2] for c in kept)


def test_dropping_a_whole_input_write_rewires_its_readers_to_the_input():
    case = make_case(nodes=[{"id": "v0", "op": "add_", "args": ["x0", "x1"], "attrs": {"view": None}},
                            {"id": "v1", "op": "relu", "args": ["v0"], "attrs": {}}],
                     inputs=[("x0", [2, 3], [3, 1], 0, 6, {"mutated": True, "classes": ["inout"]}),
                             ("x1", [2, 3], [3, 1], 0, 6, {})], outputs=["v1"])
    dropped = [case_edits._tidy(c) for c in graph_passes._drop_nodes(case)]
    assert [n["op"] for n in dropped[0].nodes] == ["relu"]
    assert dropped[0].nodes[0]["args"] == ["x0"] and len(dropped[0].inputs) == 1


def test_value_simplification_of_an_aliasing_input_writes_its_storage_elements():
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3, 4], [0, 1], 0, 4, {"classes": ["broadcast"]})], outputs=["v0"], seed=5)
    candidates = [c for c in value_passes._simplify_values(case) if c is not None]   # used to raise on the stride-0 view
    assert candidates and all(c.inputs[0]["layout"] == case.inputs[0]["layout"] for c in candidates)
    constant = case_edits._materialize(next(c for c in candidates if "data" in c.inputs[0]), 0)
    assert constant.stride() == (0, 1) and torch.equal(constant, torch.zeros(3, 4))


# -- time budget, values, and the figures of a reduced case -------------------------------------
class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_time_budget_grows_with_the_case_and_with_progress_under_a_ceiling():
    clock = _Clock()
    one_node = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    assert reduce.TimeBudget.for_case(one_node, 60, clock).deadline == 60
    budget = reduce.TimeBudget.for_case(_padded_case(), 60, clock)         # 7 nodes, 3 inputs
    assert budget.deadline == 60 * 10 / reduce.SIZE_PER_BASE
    clock.now = budget.deadline - 1
    budget.progress()                                                      # a step near the end earns more
    assert budget.deadline == clock.now + 60 * reduce.PROGRESS_GRANT
    for _ in range(100):
        clock.now = budget.deadline - 1
        budget.progress()
    assert budget.deadline == 60 * reduce.CEILING_FACTOR and not budget.late
    clock.now += 2
    assert budget.late
    assert not reduce.TimeBudget.for_case(_padded_case(), None, clock).late


def _noisy_log_div_case():
    """log(x0) / x1 with noise in both inputs: x0 must stay positive, x1 nonzero."""
    nodes = [{"id": "v0", "op": "log", "args": ["x0"], "attrs": {}},
             {"id": "v1", "op": "div", "args": ["v0", "x1"], "attrs": {}}]
    case = make_case(nodes, [("x0", [4], [1], 0, 4, {"domain": {"kind": "positive"}}),
                             ("x1", [4], [1], 0, 4, {"domain": {"kind": "nonzero"}})], ["v1"], seed=3)
    noisy = torch.tensor([3.8147e-06, 71.2, 0.3, 1.7])
    return case_edits._with_values(case_edits._with_values(case, 0, noisy), 1, -noisy)


def test_simpler_values_stay_in_the_domains_their_readers_need():
    candidates = [c for c in value_passes._simplify_values(_noisy_log_div_case()) if c is not None]
    assert len(candidates) > 20
    x0s = [case_edits._materialize(c, 0) for c in candidates]
    assert all((x > 0).all() for x in x0s)
    assert all((case_edits._materialize(c, 1) != 0).all() for c in candidates)
    offered = {tuple(x.tolist()) for x in x0s}
    assert {(1.0, 1.0, 1.0, 1.0), (1.0, 4.0, 1.0, 2.0), (1.0, 71.0, 1.0, 2.0)} <= offered


def _bits(view: torch.Tensor) -> torch.Tensor:
    return layout.storage_of(view).view(torch.int32)


def test_pinned_values_keep_every_bit_and_the_special_flag_says_whether_they_hold_nan_or_inf():
    data = make_case([{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}],
                     [("x0", [8, 8], [8, 1], 0, 64, {}), ("x1", [8], [0], 0, 1, {"classes": ["broadcast"]})],
                     ["v0"], seed=4).to_dict()
    data["values"]["special"] = True
    drawn = type(_padded_case()).from_dict(data)
    views = layout.materialize_all(drawn.to_dict())
    assert any(not torch.isfinite(v).all() for v in views)                 # this seed draws NaN or Inf
    settled = reduce._settled(drawn)
    assert all("data" in spec for spec in settled.inputs) and settled.values["special"] is True
    for before, after in zip(views, layout.materialize_all(settled.to_dict())):
        assert torch.equal(_bits(before), _bits(after))
    finite = case_edits._with_values(drawn, 0, torch.ones(8, 8))
    storage, covered = case_edits._storage_and_cover(finite, 1)             # x1's one storage element
    finite = case_edits._with_covered(finite, 1, storage, covered, torch.tensor([2.0]))
    assert finite.values["special"] is True and reduce._settled(finite).values["special"] is False
    with_nan = case_edits._with_values(_noisy_log_div_case(), 1, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    assert with_nan.values.get("special") is None and reduce._settled(with_nan).values["special"] is True


class WrongOnNanRoute(Route):
    """Output 0 comes back as sevens when some input holds a NaN; right otherwise."""

    name = "double-wrong-on-nan"

    def compile(self, program, example_inputs, ctx):
        class _Run(Compiled):
            def __call__(self, inputs, ctx):
                outputs = list(program(*inputs))
                if any(x.is_floating_point() and torch.isnan(x).any() for x in inputs):
                    outputs[0] = torch.full_like(outputs[0], 7.0)
                return tuple(outputs)
        return _Run()


@pytest.fixture
def nan_route(double_routes, monkeypatch):
    import os
    from torchsim_diff.routes import EXTRA_ROUTES_ENV
    extra = f"{WrongOnNanRoute.name}=tests.test_reduce:{WrongOnNanRoute.__name__}"
    monkeypatch.setenv(EXTRA_ROUTES_ENV, ",".join([os.environ[EXTRA_ROUTES_ENV], extra]))
    return WrongOnNanRoute.name


def test_values_shrink_to_zeros_and_the_one_nan_the_failure_needs(nan_route, tmp_path):
    case = make_case([{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}},
                      {"id": "v1", "op": "relu", "args": ["v0"], "attrs": {}}],
                     [("x0", [2, 3], [3, 1], 0, 6, {}), ("x1", [2, 3], [3, 1], 0, 6, {})], ["v1"])
    nan, inf = float("nan"), float("inf")
    case = case_edits._with_values(case, 0, torch.tensor([[3.8147e-06, nan, -71.2], [inf, 0.3, nan]]))
    case = case_edits._with_values(case, 1, torch.tensor([[1.25, -0.7, 5.5], [nan, 2.0, -3.1]]))
    result = reduce.reduce_case(case, nan_route, out_dir=str(tmp_path), jobs=1)
    floats = torch.cat([v.reshape(-1) for v in layout.materialize_all(result.reduced.to_dict())])
    assert int(torch.isnan(floats).sum()) == 1, result.reduced.to_json()
    assert torch.equal(floats[~torch.isnan(floats)], torch.zeros(floats.numel() - 1))
    assert result.reduced.values["special"] is True
    assert len(result.reduced.nodes) <= 1
    assert _buckets(nan_route, result.reduced) == [result.bucket]


def test_the_new_bucket_line_reads_the_minimal_case_the_record_holds():
    from torchsim_diff.report.tables import new_bucket_rows
    from torchsim_diff.results.record import Record
    found, minimal = _padded_case(), _noisy_log_div_case()
    record = Record(case_id=found.case_id, route="inductor", status="fail", kind="wrong_values", bucket="b1",
                    case=found.to_dict(), reduced_case=minimal.to_dict())
    assert new_bucket_rows([record], {"b1"})[0]["reduced"] == "2 nodes, 2 inputs, 8 elements"


# -- reduce, then bucket -----------------------------------------------------------------------
@pytest.fixture
def zoo_routes(monkeypatch):
    """The bug zoo's planted routes (benchmarks/bug_zoo) for this process and its workers."""
    from benchmarks.bug_zoo import planted
    for key, value in planted.environment().items():
        monkeypatch.setenv(key, value)


def _refined(route, cases, tmp_path):
    with Checker(out_dir=str(tmp_path)) as checker:
        refiner = refine.ReduceThenBucket(checker, budget_s=60)
        verdicts = [checker.check(case, route) for case in cases]
        assert all(v.failed for v in verdicts), [v.status for v in verdicts]
        fields = [refiner.refine(v) for v in verdicts]
    return verdicts, fields


def test_one_layout_bug_through_two_ops_lands_in_one_bucket(zoo_routes, tmp_path):
    transposed = ("x0", [4, 3], [1, 4], 0, 12, {"classes": ["transposed"]})
    sin = make_case([{"id": "v0", "op": "sin", "args": ["x0"], "attrs": {}}], [transposed], ["v0"])
    mul = make_case([{"id": "v0", "op": "mul", "args": ["x0", "x1"], "attrs": {}}],
                    [transposed, ("x1", [4, 3], [3, 1], 0, 12, {})], ["v0"], seed=3)
    verdicts, fields = _refined("zoo-layout-dropped", [sin, mul], tmp_path)
    assert verdicts[0].bucket == verdicts[1].bucket, [v.signature for v in verdicts]
    assert "strided" in fields[0]["trigger"]
    assert fields[0]["raw_bucket"] != fields[1]["raw_bucket"]           # the old key split them by op
    assert len(fields[0]["reduced_case"]["nodes"]) <= 1


def test_a_failure_that_reduces_to_a_known_bugs_case_is_that_known_bug(zoo_routes, tmp_path):
    from torchsim_diff.run.runner import CaseRunner
    transposed = ("x0", [4, 3], [1, 4], 0, 12, {"classes": ["transposed"]})
    sin = make_case([{"id": "v0", "op": "sin", "args": ["x0"], "attrs": {}}], [transposed], ["v0"])
    sin_then_relu = make_case([{"id": "v0", "op": "sin", "args": ["x0"], "attrs": {}},
                               {"id": "v1", "op": "relu", "args": ["v0"], "attrs": {}}], [transposed], ["v1"])
    with Checker(out_dir=str(tmp_path)) as checker:
        refiner = refine.ReduceThenBucket(checker, budget_s=60)
        first, found = (checker.check(case, "zoo-layout-dropped") for case in (sin, sin_then_relu))
        # a known entry carries the cause signature of its minimal case
        known = {signatures.bucket_of(refiner.refine(first)["signature"])}
        assert found.failed and found.bucket not in known       # filed under relu before reduction
        record = CaseRunner(checker, known=known, reducer=refiner).record(found)
        assert record.known and record.bucket in known
        assert not CaseRunner(checker, reducer=refiner).record(found).known


def test_two_bugs_on_one_op_and_layout_keep_two_buckets(zoo_routes, tmp_path):
    """A lost write and a zero-seeded write both break x.add_(y); the symptom keeps them apart."""
    case = make_case([{"id": "v0", "op": "add_", "args": ["x0", "x1"], "attrs": {}}],
                     [("x0", [5], [1], 0, 5, {"mutated": True, "classes": ["inout"]}), ("x1", [5], [1], 0, 5, {})], [])
    lost, _ = _refined("zoo-lost-mutation", [case], tmp_path / "lost")
    zeroed, _ = _refined("zoo-inout-zero-seeded", [case], tmp_path / "zeroed")
    assert lost[0].signature.split("|")[1:] != zeroed[0].signature.split("|")[1:], lost[0].signature


def test_a_read_bug_seen_as_a_nan_and_as_a_wrong_value_is_one_bucket(zoo_routes, tmp_path):
    """An offset lost on the way in: log(x) shows it as a NaN, neg(x) as a wrong value."""
    offset = ("x0", [4], [1], 3, 8, {"classes": ["offset"]})
    log = make_case([{"id": "v0", "op": "log", "args": ["x0"], "attrs": {}}], [offset], ["v0"])
    neg = make_case([{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}}], [offset], ["v0"], seed=5)
    verdicts, fields = _refined("zoo-offset-dropped", [log, neg], tmp_path)
    assert {v.kind.value for v in verdicts} == {"nonfinite_mismatch", "wrong_values"}, [v.message for v in verdicts]
    assert verdicts[0].bucket == verdicts[1].bucket, [v.signature for v in verdicts]
    assert "offset" in fields[0]["trigger"]


def test_a_dropped_tail_seen_as_a_nan_lost_and_as_a_wrong_sum_is_one_bucket(zoo_routes, tmp_path):
    """K = 1 is all tail: [[0]] @ [[NaN]] loses the NaN, [[0.5]] @ [[2]] the product. The first
    needs its NaN only because the other operand is 0; with both made ordinary it fails as wrong
    values, and is that bug (one kind whichever values a reduction ends on)."""
    def mm(left, right, seed):
        return make_case([{"id": "v0", "op": "mm", "args": ["x0", "x1"], "attrs": {}}],
                         [("x0", [1, 1], [1, 1], 0, 1, {"storage": [left]}),
                          ("x1", [1, 1], [1, 1], 0, 1, {"storage": [right]})], ["v0"], seed=seed)
    verdicts, fields = _refined("zoo-k-tail-dropped", [mm(0.0, math.nan, 1), mm(0.5, 2.0, 2)], tmp_path)
    assert [v.kind.value for v in verdicts] == ["nonfinite_mismatch", "wrong_values"], [v.message for v in verdicts]
    assert verdicts[0].bucket == verdicts[1].bucket, [f["signature"] for f in fields]
    assert fields[0]["signature"].split("|")[1] == "wrong_values" and "nan" not in fields[0]["trigger"]


def test_a_nan_made_zero_keeps_its_kind_and_its_nan_trigger(zoo_routes, tmp_path):
    relu = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     [("x0", [2], [1], 0, 2, {"storage": [math.nan, 0.0]})], ["v0"])
    _verdicts, fields = _refined("zoo-relu-nan-to-zero", [relu], tmp_path)
    assert fields[0]["signature"].split("|")[1] == "nonfinite_mismatch" and "nan" in fields[0]["trigger"], fields


def test_a_bug_in_var_seen_through_std_is_one_bucket(zoo_routes, tmp_path):
    """std is var's computation then a sqrt (OpSpec.kernel): the bucket names the kernel."""
    def of(op, seed):
        return make_case([{"id": "v0", "op": op, "args": ["x0"], "attrs": {"correction": 0, "keepdim": False}}],
                         [("x0", [3], [1], 0, 3, {"storage": [1.0, 2.0, 4.0]})], ["v0"], seed=seed)
    verdicts, fields = _refined("zoo-var-correction-ignored", [of("var", 1), of("std", 2)], tmp_path)
    assert verdicts[0].bucket == verdicts[1].bucket, [f["signature"] for f in fields]
    assert [f["first_op"] for f in fields] == ["var", "std"]


def test_a_failure_another_process_reduced_is_not_reduced_again(zoo_routes, tmp_path, monkeypatch):
    """The processes of one run share their reductions (triage.shared_reductions): a second
    checker that meets the failure takes the first one's minimal case and cause."""
    case = make_case([{"id": "v0", "op": "erf", "args": ["x0"], "attrs": {}}],
                     [("x0", [2], [1], 0, 2, {"storage": [-1.0, 0.5]})], ["v0"])
    shared = str(tmp_path / "reductions.sqlite")
    fields = []
    for k in range(2):
        with Checker(out_dir=str(tmp_path / f"worker{k}")) as checker:
            verdict = checker.check(case, "zoo-erf-sign-lost")
            fields.append(refine.ReduceThenBucket.of_checker(checker, shared_path=shared).refine(verdict))
        monkeypatch.setattr(refine, "reduce_case", lambda *a, **k: pytest.fail("reduced a second time"))
    assert fields[0]["signature"] == fields[1]["signature"] and fields[0]["signature"].endswith("|erf|negative")
    assert fields[1]["reduced_case"] == fields[0]["reduced_case"]


def test_shared_reductions_that_cannot_be_stored_cost_only_the_sharing(tmp_path):
    from torchsim_diff.triage.shared_reductions import SharedReductions
    (tmp_path / "reductions.sqlite").write_text("not a database")
    for path in (tmp_path, tmp_path / "reductions.sqlite"):
        shared = SharedReductions(str(path))
        shared.put("key", {"signature": "s"})
        assert shared.get("key") is None
    working = SharedReductions(str(tmp_path / "run" / "reductions.sqlite"))
    working.put("key", {"signature": "s"})
    assert working.get("key") == {"signature": "s"} and working.get("other") is None


def test_every_declared_kernel_is_an_op_of_its_own_computation():
    from torchsim_diff.ops import all_ops
    ops = all_ops()
    kernels = {name: spec.kernel for name, spec in ops.items() if spec.kernel}
    assert kernels and all(kernel in ops and ops[kernel].kernel is None for kernel in kernels.values()), kernels
    assert all(signatures.op_key(name) == kernel for name, kernel in kernels.items())


def test_two_layout_bugs_ending_in_one_index_error_keep_two_buckets(zoo_routes, tmp_path):
    """An index read past its offset and one walked past a stride-0 dim both end in torch's
    index error; the ablation trigger (offset, broadcast) keeps them apart."""
    weight = ("x1", [3, 2], [2, 1], 0, 6, {})

    def embedding(index):
        return make_case([{"id": "v0", "op": "embedding", "args": ["x0", "x1"], "attrs": {}}],
                         [index, weight], ["v0"])
    index = {"dtype": "int64", "domain": {"kind": "index", "high": 3}}
    offset, _ = _refined("zoo-offset-dropped", [embedding(("x0", [2], [1], 2, 4, {**index, "classes": ["offset"]}))],
                         tmp_path / "offset")
    walked, _ = _refined("zoo-stride0-past-storage",
                         [embedding(("x0", [2], [0], 0, 1, {**index, "classes": ["broadcast"]}))], tmp_path / "walked")
    assert [v.kind.value for v in offset + walked] == ["runtime_error"] * 2, [v.message for v in offset + walked]
    assert offset[0].signature.endswith("|offset") and walked[0].signature.endswith("|broadcast"), \
        (offset[0].signature, walked[0].signature)


def test_session_end_refinements_replace_the_buckets_of_their_records(tmp_path):
    import json
    (tmp_path / f"{session_refinements.REFINED_PREFIX}gw0.jsonl").write_text(json.dumps(
        {"case_id": "c1", "route": "triton", "bucket": "new", "raw_bucket": "old", "first_op": "add",
         "trigger": ["strided"]}) + "\n")
    from torchsim_diff.results.record import Record
    records = [Record(case_id="c1", route="triton", status="fail", bucket="old"),
               Record(case_id="c1", route="inductor", status="fail", bucket="other"),
               Record(case_id="c2", route="triton", status="pass", bucket=None)]
    out = session_refinements.apply_refinements(records, str(tmp_path))
    assert [r.bucket for r in out] == ["new", "other", None]
    assert out[0].trigger == ["strided"] and out[0].raw_bucket == "old" and out[0].first_op == "add"


def test_ctrl_c_during_a_reduction_does_not_wait_for_the_hanging_candidate(double_routes, tmp_path):
    """A candidate hangs in the evaluator's pool (60 s limit); Ctrl-C comes 2 s in: the
    reduction ends at once, its checkers stopped, instead of waiting out the hang."""
    import os
    import signal
    import threading
    import time
    hang = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [("x0", [2], [1], 0, 2, {})], ["v0"])
    # Python's own Ctrl-C handler: a process started in the background by a shell (as CI's may
    # be) inherits SIGINT ignored
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    ctrl_c = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    started = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            with reduce._Evaluator("double-hang-on-exp", out_dir=str(tmp_path), jobs=1, timeout_s=60.0,
                                   max_runs=10) as evaluator:
                ctrl_c.start()
                evaluator.first_keeping([hang], "any")
    finally:
        ctrl_c.cancel()
        signal.signal(signal.SIGINT, before)
    assert time.perf_counter() - started < 30.0
    assert all(checker.stopped for checker in evaluator.every_checker)


def test_the_edge_cells_a_removed_node_meant_go_with_it(add_case):
    from torchsim_diff.triage.case_edits import _candidate
    data = add_case.to_dict()
    data["values"] = {**data["values"], "meant": [["v2", "x0=nan"], ["v9", "x1 0-d"]]}
    assert _candidate(data).values["meant"] == [["v2", "x0=nan"]]


def test_shared_reductions_are_kept_apart_by_the_code_that_made_them(tmp_path):
    from torchsim_diff.triage.shared_reductions import SharedReductions, code_scope
    path = str(tmp_path / "reductions.sqlite")
    SharedReductions(path, code_scope()).put("key", {"signature": "s"})
    assert SharedReductions(path, code_scope()).get("key") == {"signature": "s"}
    assert SharedReductions(path, "other code").get("key") is None
    assert len(code_scope()) == 16 and code_scope() == code_scope()
