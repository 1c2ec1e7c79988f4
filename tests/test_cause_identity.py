"""Which bug a failure is: the trigger is read from the elements that matter, the cause's op is
the first divergent op whatever consumes it, and a reduction ends on the bug it started from."""
import torch

from tests.conftest import make_case
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets import signatures
from torchsim_diff.triage import case_edits, reduce, refine, trigger_ablations
from torchsim_diff.delta import needed_parts

TWO_BUGS = "double-two-value-bugs"     # floor_divide truncates; relu(NaN) is 0


def test_delta_debugging_keeps_only_the_parts_the_failure_needs():
    calls = []

    def still_fails(dropped):
        calls.append(list(dropped))
        return 3 not in dropped and 7 not in dropped

    assert needed_parts(list(range(10)), still_fails, groups=[[0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]) == [3, 7]
    assert calls[0] == [0, 1, 2, 3]            # a whole group first
    # either part alone is enough: the first is dropped, the second then needed
    assert needed_parts(["a", "b"], lambda dropped: len(dropped) < 2) == ["b"]


def _case_with(values_per_input, nodes, outputs):
    inputs = [(f"x{k}", [len(v)], [1], 0, len(v), {}) for k, v in enumerate(values_per_input)]
    case = make_case(nodes, inputs, outputs)
    for k, v in enumerate(values_per_input):
        case = case_edits._with_values(case, k, torch.tensor(v, dtype=torch.float32))
    return case


def test_special_elements_the_failure_does_not_need_are_made_ordinary():
    nan, inf = float("nan"), float("inf")
    case = _case_with([[nan, 2.0, inf, 1e-40], [-inf, 1e-41, 3.0, 4.0]], [{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}], ["v0"])
    assert {c for _k, _e, c in trigger_ablations.special_elements(case)} == {"nan", "inf", "subnormal"}

    def fails(candidate):       # a failure that needs the -inf of x1 and nothing else
        return bool(torch.isneginf(case_edits._materialize(candidate, 1)).any())

    kept = trigger_ablations.needed_specials(case, fails)
    assert trigger_ablations.special_elements(kept) == [(1, 0, "inf")]
    x0 = case_edits._materialize(kept, 0)
    assert torch.isfinite(x0).all() and x0[1] == 2.0 and (x0.abs() >= torch.finfo(torch.float32).tiny).all()


def test_an_element_is_idle_when_either_ordinary_value_keeps_the_failure():
    case = _case_with([[1e-40], [float("-inf")]], [{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}], ["v0"])

    def fails(candidate):       # 1.0 (the first ordinary value) happens to pass, 0.5 fails
        return bool(torch.isinf(case_edits._materialize(candidate, 1)).any()) and case_edits._materialize(candidate, 0)[0] != 1.0

    kept = trigger_ablations.needed_specials(case, fails)
    assert [c for _k, _e, c in trigger_ablations.special_elements(kept)] == ["inf"]
    assert case_edits._materialize(kept, 0).tolist() == [0.5]


def test_a_negative_special_value_made_ordinary_keeps_its_sign():
    """-tiny // inf is -1 in Python's floor division, 1.0 // inf is 0: a negative subnormal made
    1.0 hid a floor division's sign bug, so the subnormal was kept and named its trigger, and a
    known bug (a negative dividend by inf) came back NEW."""
    case = _case_with([[-1.1e-38], [float("inf")]], [{"id": "v0", "op": "floor_divide", "args": ["x0", "x1"],
                                                      "attrs": {}}], ["v0"])

    def fails(candidate):       # a negative dividend of any size, by inf
        return bool((case_edits._materialize(candidate, 0) < 0).all() and torch.isinf(case_edits._materialize(candidate, 1)).all())

    kept = trigger_ablations.needed_specials(case, fails)
    assert [c for _k, _e, c in trigger_ablations.special_elements(kept)] == ["inf"]     # the subnormal was idle
    assert case_edits._materialize(kept, 0).tolist() == [-1.0]
    ablated = dict(trigger_ablations.value_ablations(case))
    assert [case_edits._materialize(c, 0).tolist() for c in ablated["subnormal"]] == [[-1.0]]
    assert all(fails(c) for c in ablated["subnormal"])       # so the ablation does not name it


def _refined(checker, case, route=TWO_BUGS):
    verdict = checker.check(case, route)
    assert verdict.failed, verdict.message
    refiner = refine.ReduceThenBucket(checker, budget_s=60)
    fields = refiner.refine(verdict)
    return verdict.refined, fields


def test_a_reduction_ends_on_the_bug_it_started_from_and_records_the_other(double_routes, tmp_path):
    # floor_divide's truncation is the first divergent op; relu(NaN) on another input fails
    # too. Kept by route, kind and place alone, the reduction took relu's window (the later
    # node's comes first) and became that other bug.
    floor_then_relu = _case_with([[-3.0, 5.0], [2.0, 2.0], [float("nan"), 1.0]],
                                 [{"id": "v0", "op": "floor_divide", "args": ["x0", "x1"], "attrs": {}},
                                  {"id": "v1", "op": "relu", "args": ["x2"], "attrs": {}},
                                  {"id": "v2", "op": "add", "args": ["v0", "v1"], "attrs": {}}], ["v2"])
    with Checker(out_dir=str(tmp_path), timeout_s=30) as checker:
        signature, fields = _refined(checker, floor_then_relu)
        slipped = reduce.reduce_case(floor_then_relu, TWO_BUGS, out_dir=str(tmp_path), checkers=[checker],
                                     key=signatures.reduction_key, budget_s=60)
    assert signature == f"{TWO_BUGS}|wrong_values|floor_divide|negative"
    assert [n["op"] for n in fields["reduced_case"]["nodes"]] == ["floor_divide"]
    assert any("|relu" in key for key in fields["other_failures"]), fields["other_failures"]
    # without the first divergent op in what the reduction keeps, it ends on relu
    assert [n["op"] for n in slipped.reduced.nodes] == ["relu"]


def test_a_bug_seen_through_a_consumer_or_beside_an_idle_special_is_the_same_cause(double_routes, tmp_path):
    nan = float("nan")
    alone = _case_with([[nan, 2.0]], [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], ["v0"])
    consumed = _case_with([[1.5, nan, 2.0]], [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}},
                                              {"id": "v1", "op": "add", "args": ["v0", "v0"], "attrs": {}}], ["v1"])
    beside_inf = _case_with([[nan, 2.0], [1e-40, float("inf")]],
                            [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}},
                             {"id": "v1", "op": "mul", "args": ["v0", "x1"], "attrs": {}}], ["v1"])
    with Checker(out_dir=str(tmp_path), timeout_s=30) as checker:
        found = [_refined(checker, case)[0] for case in (alone, consumed, beside_inf)]
    assert found == [f"{TWO_BUGS}|nonfinite_mismatch|relu|nan"] * 3, found

