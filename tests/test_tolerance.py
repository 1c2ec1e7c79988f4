"""Each op's own tolerance: local figures charge an op its own error only, and the tolerance
tables and their PyTorch override export say which op needs what. In-process: the routes are
TorchFunctionModes over eager (tests/route_doubles.py), run on the widened case as a worker
would run it."""
import json
from collections import namedtuple

import pytest
import torch

from tests.conftest import make_case
from tests.route_doubles import HalfSum
from torchsim_diff.case import layout
from torchsim_diff.case.program_check import load_program
from torchsim_diff.judge import comparison, oracle
from torchsim_diff.judge.local_error import node_stats
from torchsim_diff.run.op_figures import carried_figures, local_figures
from torchsim_diff.report import tolerance
from torchsim_diff.results.record import Record
from torchsim_diff.case.transforms import intermediates_as_outputs

SEEDS = range(12)                       # at least tolerance.FEW_CASES cases per row
DOWNSTREAM = ("tanh", "mul")
RTOL16, ATOL16 = comparison.TOLERANCES[torch.float16]


class OffSum(torch.overrides.TorchFunctionMode):
    """A known bug upstream: torch.sum's result 100 too large."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        return result + 100 if func is torch.sum else result


def _chain(seed: int):
    """mul(tanh(sum(x0, dim=1)), x1) in float16: a reduction, then two pointwise ops reading it."""
    return make_case(nodes=[{"id": "v0", "op": "sum", "args": ["x0"], "attrs": {"dim": [1]}},
                            {"id": "v1", "op": "tanh", "args": ["v0"], "attrs": {}},
                            {"id": "v2", "op": "mul", "args": ["v1", "x1"], "attrs": {}}],
                     inputs=[("x0", [8, 256], [256, 1], 0, 2048, {}), ("x1", [8], [1], 0, 8, {})],
                     outputs=["v2"], dtype="float16", seed=seed)


def _run(case, mode):
    """(verdict mismatch or None, carried figures, local figures, node id -> route value) of
    `case` on eager under `mode`, every intermediate an output (as op_figures.measure runs it)."""
    wide, refs = intermediates_as_outputs(case)
    program = load_program(wide.program_source())
    ref = oracle.reference(wide, program)
    inputs = layout.materialize_all(wide.to_dict())
    with mode():
        outputs = program(*inputs)
    mismatch, _stats = oracle.judge_case(wide, ref, outputs, [layout.storage_of(t).clone() for t in inputs])
    values = dict(zip(refs, outputs))
    return mismatch, carried_figures(case, ref, values, refs), local_figures(case, values), values


@pytest.mark.parametrize("mode", [HalfSum, OffSum], ids=["float16 accumulation", "wrong by 100"])
def test_ops_after_an_imprecise_or_wrong_one_keep_their_own_figures(mode):
    runs = [_run(_chain(seed), mode) for seed in SEEDS]
    for _mismatch, _carried, local, _values in runs:
        assert local["sum"]["atol_needed"] > ATOL16                   # the op itself needs more
        for op in DOWNSTREAM:
            # eager's own op on the route's inputs: never worse than eager, no tolerance beyond the default
            assert local[op]["err_ratio"] <= 1.0 and local[op]["atol_needed"] <= ATOL16, op
    for op in DOWNSTREAM:                                            # the old figure charged them the sum's error
        assert max(carried[op]["atol_needed"] for _m, carried, _l, _v in runs) > ATOL16, op


def test_a_wrong_upstream_op_fails_the_case_but_a_reduced_precision_one_passes():
    assert all(_run(_chain(seed), OffSum)[0] is not None for seed in SEEDS[:2])
    assert all(_run(_chain(seed), HalfSum)[0] is None for seed in SEEDS)


def test_nodes_whose_values_an_in_place_node_changed_have_no_local_figure():
    from torchsim_diff.judge.local_error import local_stats, stale_nodes
    nodes = [{"id": "v0", "op": "transpose", "args": ["x0"], "attrs": {"dim0": 0, "dim1": 1}},   # a view of x0
             {"id": "v1", "op": "neg", "args": ["v0"], "attrs": {}},
             {"id": "v2", "op": "tanh", "args": ["v1"], "attrs": {}},                            # a new tensor
             {"id": "v3", "op": "exp", "args": ["x0"], "attrs": {}},                             # x0 before the write
             {"id": "v4", "op": "add_", "args": ["x0", "x1"], "attrs": {}},
             {"id": "v5", "op": "sin", "args": ["x0"], "attrs": {}},                             # x0 after it
             {"id": "v6", "op": "cos", "args": ["x1"], "attrs": {}}]
    inputs = [("x0", [2, 2], [2, 1], 0, 4, {"mutated": True, "classes": ["inout"]}), ("x1", [2, 2], [2, 1], 0, 4, {})]
    case = make_case(nodes=nodes, inputs=inputs, outputs=["v2", "v3", "v5", "v6"])
    # v0 is returned as x0 ends, after add_ wrote through it: neither its own value nor what neg read
    assert stale_nodes(case) == {"v0", "v1", "v4", "v5"}
    x0, x1 = layout.materialize_all(case.to_dict())[:2]
    values = {"v2": torch.tanh(-x0.t()), "v3": torch.exp(x0), "v6": torch.cos(x1)}
    assert set(local_stats(case, values)) == {"v3", "v6"}               # v2 reads v1, whose value is not given
    values["v1"] = -x0.t()
    assert set(local_stats(case, values)) == {"v2", "v3", "v6"}


def test_a_node_s_local_figures_are_the_judge_s_against_the_float64_op_on_the_same_inputs():
    x = torch.tensor([0.1, 1.0, 3.0], dtype=torch.float16)
    got = torch.exp(x) + torch.tensor([0.0, 0.0, 0.25], dtype=torch.float16)
    stats = node_stats("torch.exp(x0)", {"x0": x}, got)
    truth = torch.exp(x.double())
    assert stats.max_abs_err == float((got.double() - truth).abs().max())
    assert stats.eager_abs_err == float((torch.exp(x).double() - truth).abs().max())
    assert stats.eager_atol_needed == float(((torch.exp(x).double() - truth).abs() - RTOL16 * truth.abs())
                                            .clamp(min=0).max())
    assert stats.err_over_eager == stats.max_abs_err / max(stats.eager_abs_err, comparison.scale_ulp(truth,
                                                                                                    torch.float16))


# -- the tables -----------------------------------------------------------------------------------
def _records(mode, route: str) -> list:
    """One record per seed: its verdict, and its carried and local figures."""
    records = []
    for seed in SEEDS:
        case = _chain(seed)
        mismatch, carried, local, _values = _run(case, mode)
        records.append(Record(case_id=f"c{seed}", route=route, status="fail" if mismatch else "pass",
                              kind=mismatch.kind.value if mismatch else None, ops=case.ops, dtypes=case.dtypes,
                              n_nodes=len(case.nodes), case=case.to_dict(), op_errors=carried,
                              op_local_errors=local))
    return records


@pytest.fixture(scope="module")
def half_sum_records():
    return _records(HalfSum, "double-half-sum")


def test_the_tolerance_rows_show_the_reduced_precision_op_and_only_it(half_sum_records):
    rows = {row["op"]: row for row in tolerance.tolerance_rows(half_sum_records)}
    assert [row["op"] for row in tolerance.tolerance_rows(half_sum_records)][0] == "sum"    # worst first
    assert [op for op, row in rows.items() if tolerance.above_default(row)] == ["sum"]
    sums = [r.op_local_errors["sum"] for r in half_sum_records]
    assert rows["sum"]["cases"] == len(SEEDS) and rows["sum"]["note"] == ""
    assert rows["sum"]["eager's atol needed max"] <= ATOL16 < rows["sum"]["atol needed max"]   # the route's, not the inputs'
    assert rows["sum"]["atol needed max"] == max(f["atol_needed"] for f in sums)
    assert rows["sum"]["err/eager p50"] == sorted(f["err_ratio"] for f in sums)[len(SEEDS) // 2 - 1]
    for op in DOWNSTREAM:
        assert rows[op]["carried atol needed max"] > ATOL16 >= rows[op]["atol needed max"]
    (route,) = tolerance.route_tolerance_rows(half_sum_records)
    assert (route["set by (atol)"], route["ops above default"]) == ("sum", "sum")
    assert route["atol needed"] == rows["sum"]["atol needed max"]


def test_failing_cases_are_left_out_and_counted_apart(half_sum_records):
    wrong = _records(OffSum, "double-half-sum")[:2]
    rows = tolerance.tolerance_rows(half_sum_records + wrong)
    passing = {row["op"]: row for row in rows if row["verdict"] == tolerance.PASSING}
    apart = {row["op"]: row for row in rows if row["verdict"] != tolerance.PASSING}
    assert passing == {row["op"]: row for row in tolerance.tolerance_rows(half_sum_records)}
    assert apart["sum"]["cases"] == 2 and "few cases" in apart["sum"]["note"]
    assert rows.index(apart["sum"]) > max(rows.index(row) for row in passing.values())


Override = namedtuple("Override", ["atol", "rtol"])


def _overrides(text: str) -> dict:
    """OVERRIDES of an opinfo text read as data: {route: {op: {dtype: Override}}}, after checking
    that the text is nothing but its imports and that one assignment of literals and calls
    (`toleranceOverride({torch.<dtype>: tol(atol=..., rtol=...)})`)."""
    import ast
    tree = ast.parse(text)
    assert [type(node) for node in tree.body] == [ast.Import, ast.ImportFrom, ast.Assign]
    found = {}
    for route, ops in zip(tree.body[-1].value.keys, tree.body[-1].value.values):
        found[ast.literal_eval(route)] = {ast.literal_eval(op): _override(call) for op, call in zip(ops.keys, ops.values)}
    return found


def _override(call) -> dict:
    import ast
    assert call.func.id == "toleranceOverride" and len(call.args) == 1
    by_dtype = {}
    for dtype, tol in zip(call.args[0].keys, call.args[0].values):
        assert dtype.value.id == "torch" and tol.func.id == "tol"
        by_dtype[getattr(torch, dtype.attr)] = Override(**{k.arg: ast.literal_eval(k.value) for k in tol.keywords})
    return by_dtype


def test_the_opinfo_overrides_make_the_same_cases_pass(half_sum_records):
    text = tolerance.opinfo_text(tolerance.tolerance_rows(half_sum_records))
    overrides = _overrides(text)["double-half-sum"]
    assert list(overrides) == ["sum"] and "12 float16 cases" in text
    override = overrides["sum"][torch.float16]
    failed_at_default = 0
    for seed in SEEDS:
        _m, _c, _l, values = _run(_chain(seed), HalfSum)
        x0 = layout.materialize_all(_chain(seed).to_dict())[0]
        got, truth = values["v0"].double(), torch.sum(x0.double(), dim=(1,))
        torch.testing.assert_close(got, truth, atol=override.atol, rtol=override.rtol)
        failed_at_default += not torch.allclose(got, truth, atol=ATOL16, rtol=RTOL16)
    assert failed_at_default > 0


def test_no_override_is_written_where_every_op_is_within_its_default():
    records = [r.with_fields(op_local_errors={"relu": {"atol_needed": 0.0, "rtol_needed": 0.0, "err_ratio": 0.5}})
               for r in _records_stub()]
    text = tolerance.opinfo_text(tolerance.tolerance_rows(records))
    assert _overrides(text) == {} and "No op needs more" in text


def test_a_route_name_from_a_results_file_cannot_leave_its_comment(half_sum_records):
    """The opinfo text is pasted into test suites: a route named with a line break and code
    stays inside the comment, and the text is still only its imports and OVERRIDES."""
    hostile = "r\nimport os; os.system('echo owned')"
    records = [r.with_fields(route=hostile) for r in half_sum_records]
    text = tolerance.opinfo_text(tolerance.tolerance_rows(records))
    assert list(_overrides(text)) == [hostile] and "\nimport os" not in text


def _records_stub() -> list:
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [4], [1], 0, 4, {})], outputs=["v0"])
    return [Record(case_id="a", route="inductor", status="pass", ops=["relu"], dtypes=["float32"], n_nodes=1,
                   case=case.to_dict())]


@pytest.mark.parametrize("x", [1e-5, 0.0123, 0.99, 7.0, 123456.0, 2.0 ** -20])
def test_a_rounded_up_tolerance_is_never_below_the_need(x):
    assert x <= float(tolerance.round_up(x)) <= x * 1.1 * (1 + 1e-12)      # two significant digits, up


def test_table_writes_overrides_and_refuses_them_for_other_tables(tmp_path, capsys, half_sum_records):
    from torchsim_diff.cli import main
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in half_sum_records))
    assert main(["table", str(run), "--format", "opinfo"]) == 0
    assert "'sum': toleranceOverride({torch.float16: tol(atol=" in capsys.readouterr().out
    assert main(["table", str(run), "--tables", "summary", "--format", "opinfo"]) == 2
    err = capsys.readouterr().err
    assert "--format opinfo writes the tolerance table only" in err and "Traceback" not in err
    assert main(["table", str(run), "--tables", "tolerance", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {row["op"] for row in rows} == {"sum", "tanh", "mul"}


def test_the_end_of_run_preview_leads_with_the_worst_passing_row(half_sum_records):
    from torchsim_diff.report import tables
    lines = tables.tolerance_preview(half_sum_records + _records(OffSum, "double-half-sum")[:2])
    body = [line.split() for line in lines[3:] if line.strip()]               # title, header, rule
    assert [row[1] for row in body] == [row["op"] for row in tolerance.tolerance_rows(half_sum_records)]
    assert body[0][1] == "sum" and not any("FAILING" in line for line in lines)


def test_the_records_table_keeps_give_the_same_tolerance_rows(half_sum_records):
    """`table` streams records and keeps of each what its tables read (tables.table_view): the
    local figures are among them."""
    from torchsim_diff.report.tables import table_view
    shared: dict = {}
    views = [table_view(r, shared) for r in half_sum_records]
    assert tolerance.tolerance_rows(views) == tolerance.tolerance_rows(half_sum_records)
    assert tolerance.tolerance_rows(views)          # rows from local figures, not an empty table
