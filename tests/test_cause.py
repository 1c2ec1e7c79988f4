"""Buckets and known bugs by cause: one trigger through many ops is one bucket, and a known bug
is matched by the cause signature of a failure's own minimal case, never by its raw bucket."""
import pytest
import torch

from tests.conftest import make_case
from torchsim_diff.results.record import Record
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets import signatures
from torchsim_diff.triage import case_edits, refine, trigger_ablations
from torchsim_diff.buckets.corpus import cause_buckets
from torchsim_diff.judge.comparison import Where


# -- signatures --------------------------------------------------------------------------------
def test_a_cause_signature_always_ends_in_its_trigger_so_no_raw_bucket_is_one():
    raw = signatures.signature("triton", "wrong_values", "", "argmax", Where.output(0))
    cause = signatures.refined_signature("triton", "wrong_values", "argmax", [])
    assert cause.endswith("|any") and raw.endswith("|output") and raw != cause
    error = signatures.signature("mlir", "compile_error", "LoweringException: exp")
    assert signatures.with_trigger_or_any(error, []) == error + "|any"


def test_a_hang_is_named_by_its_minimal_cases_ops_and_shape_features():
    zero_d = make_case([{"id": "v0", "op": "softmax", "args": ["x0"], "attrs": {"dim": 0}}],
                       [("x0", [], [], 0, 1, {})], ["v0"])
    long_dim = make_case([{"id": "v0", "op": "softmax", "args": ["x0"], "attrs": {"dim": 0}}],
                         [("x0", [4], [1], 0, 4, {})], ["v0"])
    assert signatures.hang_signature("mlir", zero_d) == "mlir|timeout|softmax|0d"
    assert signatures.hang_signature("mlir", long_dim) == "mlir|timeout|softmax|any"


def test_a_planted_route_is_compared_with_a_real_routes_entries_relabelled():
    cause = "triton|wrong_values|argmax|strided"
    assert signatures.on_route(cause, "zoo-x") == "zoo-x|wrong_values|argmax|strided"
    assert cause_buckets([cause], "zoo-x") == {signatures.bucket_of("zoo-x|wrong_values|argmax|strided")}


@pytest.mark.parametrize("a,b", [
    ("NameError: name '__compiled_fn_3_a1b2c3d4_e5f6_4a7b_8c9d_0e1f2a3b4c5d' is not defined",
     "NameError: name '__compiled_fn_17_9f8e7d6c_5b4a_4c3d_2e1f_0a9b8c7d6e5f' is not defined"),
    ("RuntimeError: cannot read reports/run1/artifacts/triton/c0ffee12/kernel.py",
     "RuntimeError: cannot read reports/pytest-20261202/artifacts/triton/77aa00bb/kernel.py"),
])
def test_random_names_and_run_folders_do_not_split_buckets(a, b):
    assert signatures.normalise(a) == signatures.normalise(b)


# -- known bugs: by the failure's own cause --------------------------------------------------------
def _failed(**fields) -> Record:
    return Record(case_id="c", route="triton", status="fail", kind="wrong_values", **fields)


def test_a_record_is_known_only_by_its_own_reduced_cause():
    cause = "triton|wrong_values|argmax|strided"
    known = cause_buckets([cause])
    reduced_same = _failed(bucket=signatures.bucket_of(cause), signature=cause)
    reduced_other = _failed(bucket=signatures.bucket_of("triton|wrong_values|argmax|inf+nan"),
                            signature="triton|wrong_values|argmax|inf+nan")
    # a record not reduced, even one whose bucket were a known bucket, is never known
    unreduced = _failed(bucket=signatures.bucket_of(cause))
    assert reduced_same.known_by_minimal_case(known).known
    assert not reduced_other.known_by_minimal_case(known).known
    assert not unreduced.known_by_minimal_case(known).known


def test_value_ablations_name_the_special_values_a_case_holds():
    nan_inf = make_case([{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}}], [("x0", [4], [1], 0, 4, {})], ["v0"])
    view = case_edits._materialize(nan_inf, 0)
    view[:] = float("nan")
    view[1] = float("inf")
    view[2] = 1e-40
    case = case_edits._with_values(nan_inf, 0, view)
    found = {feature: variants for feature, variants in trigger_ablations.value_ablations(case)}
    assert set(found) == {"nan", "inf", "subnormal"}
    assert not trigger_ablations._value_classes(case_edits._materialize(found["nan"][0], 0)).get("nan")


def test_negative_values_and_attributes_are_ablated_keeping_magnitude_or_order():
    roll = make_case([{"id": "v0", "op": "roll", "args": ["x0"], "attrs": {"shifts": [-2], "dims": [0]}}],
                     [("x0", [3], [1], 0, 3, {})], ["v0"])
    view = case_edits._materialize(roll, 0)
    view[:] = torch.tensor([-4.0, 0.5, 2.0])
    found = [(feature, variants) for feature, variants in trigger_ablations.value_ablations(case_edits._with_values(roll, 0, view))]
    assert [feature for feature, _ in found] == ["negative", "negative"]
    (magnitudes, shifted), (attrs,) = found[0][1], found[1][1]
    assert case_edits._materialize(magnitudes, 0).tolist() == [4.0, 0.5, 2.0]
    assert case_edits._materialize(shifted, 0).tolist() == [1.0, 5.5, 7.0]
    assert attrs.nodes[0]["attrs"]["shifts"] == [2]


def test_a_negative_dim_is_ablated_to_the_same_dim_counted_from_the_start_and_to_its_magnitude():
    # sum over dim -2 of a 3-d input is the sum over dim 1: a failure that stays there is not
    # the sign's. Dim 2, the magnitude, is another reduction.
    total = make_case([{"id": "v0", "op": "sum", "args": ["x0"], "attrs": {"dim": [-2], "keepdim": False}}],
                      [("x0", [2, 8, 1], [8, 1, 1], 0, 16, {})], ["v0"])
    found = dict(trigger_ablations.value_ablations(total))
    assert sorted(c.nodes[0]["attrs"]["dim"] for c in found["negative"]) == [[1], [2]]


def test_neutral_substitutes_replace_the_divergent_node_by_neutral_ops():
    case = make_case([{"id": "v0", "op": "fmod", "args": ["x0", "x1"], "attrs": {}}],
                     [("x0", [3], [1], 0, 3, {}), ("x1", [3], [1], 0, 3, {"domain": {"kind": "nonzero"}})], ["v0"])
    ops = [[n["op"] for n in c.nodes] for c in trigger_ablations.neutral_substitutes(case, case.nodes[0])]
    assert ["neg"] in ops and ["add"] in ops and all(o != ["fmod"] for o in ops)


# -- with the planted routes -------------------------------------------------------------------
@pytest.fixture
def zoo_routes(monkeypatch):
    from benchmarks.bug_zoo import planted
    for key, value in planted.environment().items():
        monkeypatch.setenv(key, value)


def test_a_layout_bug_through_an_op_names_the_trigger_not_the_op(zoo_routes, tmp_path):
    transposed = ("x0", [4, 3], [1, 4], 0, 12, {"classes": ["transposed"]})
    fmod = make_case([{"id": "v0", "op": "fmod", "args": ["x0", "x1"], "attrs": {}}],
                     [transposed, ("x1", [4, 3], [3, 1], 0, 12, {"domain": {"kind": "nonzero"}})], ["v0"], seed=2)
    exp = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [transposed], ["v0"], seed=4)
    with Checker(out_dir=str(tmp_path)) as checker:
        refiner = refine.ReduceThenBucket(checker, budget_s=60)
        verdicts = [checker.check(case, "zoo-layout-dropped") for case in (fmod, exp)]
        assert all(v.failed for v in verdicts), [v.message for v in verdicts]
        for verdict in verdicts:
            refiner.by_raw.clear()
            refiner.refine(verdict)
    assert verdicts[0].signature == verdicts[1].signature == "zoo-layout-dropped|wrong_values|*|strided"


@pytest.mark.bench    # five zoo campaigns with reduction: about a minute
def test_planted_bugs_in_ops_with_known_bugs_are_all_new(zoo_routes, tmp_path):
    """Five planted bugs whose raw buckets are those of known entries (argmax, fmod, remainder,
    roll, a softmax hang); matched by cause, none is taken for a known bug."""
    from benchmarks.bench_known_by_cause import check_bugs
    rows = check_bugs(str(tmp_path), budget_s=20, timeout_s=5)
    assert len(rows) == 5
    assert all(r["raw_matches"] for r in rows), [(r["bug"], r["kind"]) for r in rows]
    # each planted bug meets at least one re-signed entry (a cause to be compared with)
    assert all(any(r["raw_match_causes"]) for r in rows), rows
    assert [r["bug"] for r in rows if not (r["failed"] and not r["known"])] == [], rows


def test_an_error_the_minimal_case_does_not_repeat_is_named_by_the_error_seen():
    """A worker whose failed compile left a stale program answers NameError __compiled_fn_...
    for the same graph: the cause is the error seen first, not that one."""
    from torchsim_diff.run.checker import Verdict
    from torchsim_diff.results.kinds import Kind, Status
    case = make_case([{"id": "v0", "op": "sqrt", "args": ["x0"], "attrs": {}}], [("x0", [], [], 0, 1, {})], ["v0"])
    seen = Verdict(case, "triton", Status.FAIL, kind=Kind.COMPILE_ERROR, message="InterpreterError: ValueError('fp64')")
    stale = Verdict(case, "triton", Status.FAIL, kind=Kind.COMPILE_ERROR,
                    message="NameError: name '__compiled_fn_1_96d96d0d_90a5' is not defined")
    refiner = refine.ReduceThenBucket(checker=None)
    cause, _op, trigger = refiner._cause(stale, seen)
    assert cause == seen.signature + "|any" and trigger == []
