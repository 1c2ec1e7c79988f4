"""Tables over records: every format renders the same rows; figures come from the records."""
import csv
import io
import json

import pytest

from torchsim_diff.report import html_report, tables
from torchsim_diff.results.record import Record


def _record(route, status, ops, err=1e-7, kind=None, bucket=None, case_id="c", n_nodes=2, layouts=("contiguous",)):
    return Record.from_dict({"case_id": case_id, "route": route, "status": status, "kind": kind, "bucket": bucket, "op": ops[0],
            "ops": list(ops), "dtypes": ["float32"], "layouts": list(layouts), "n_nodes": n_nodes,
            "max_abs_err": err, "max_rel_err": err * 10, "max_ulp": 1.0, "err_ratio": 1.5, "t_case": 2.0,
            "t_harness": 0.1, "t_compile": 1.8, "t_run": 0.1, "message": "output 0: values differ\nmore",
            "case": {"dtype": "float32", "inputs": [], "nodes": []}})


RECORDS = [
    _record("inductor", "pass", ["relu", "add"], err=2e-7, case_id="a"),
    _record("inductor", "pass", ["relu"], err=5e-7, case_id="b", layouts=("transposed", "inout")),
    _record("inductor", "fail", ["argmax"], kind="wrong_values", bucket="b1", case_id="c", n_nodes=4),
    _record("inductor", "fail", ["argmax"], kind="wrong_values", bucket="b1", case_id="d", n_nodes=2),
    _record("triton", "unsupported", ["mm"], case_id="e"),
]


def test_summary_counts_statuses_and_buckets():
    (inductor, triton) = tables.summary_rows(RECORDS)
    assert (inductor["cases"], inductor["pass"], inductor["fail"], inductor["buckets"]) == (4, 2, 2, 1)
    assert inductor["harness %"] == 5.0 and triton["unsupported"] == 1


def test_harness_share_leaves_out_worker_start_up_and_localising_failures():
    started = RECORDS[0].with_fields(t_case=6.0, t_start=4.0)            # its first case started the worker
    localised = RECORDS[2].with_fields(t_case=3.0, t_diagnose=1.0)
    (inductor,) = tables.summary_rows([started, RECORDS[1], localised, RECORDS[3]])
    assert inductor["harness %"] == 5.0
    assert (inductor["start-up s"], inductor["localising s"]) == (4.0, 1.0)


def test_tolerance_table_counts_only_judged_cases_and_reads_old_records_carried_only():
    rows = {(r["route"], r["op"], r["verdict"]): r for r in tables.tolerance_rows(RECORDS)}
    relu = rows[("inductor", "relu", "pass")]
    assert relu["carried atol needed max"] == 5e-7         # old records: the case's figures, charged to each op
    assert relu["cases"] == 0 and "2 carried only" in relu["note"]     # no local figures in them
    assert rows[("inductor", "argmax", "FAILING (apart)")]["carried atol needed max"] == 1e-7
    assert not any(route == "triton" for route, _op, _v in rows)      # unsupported: nothing about tolerance


def test_bucket_table_counts_and_keeps_the_smallest_case():
    (row,) = tables.bucket_rows(RECORDS)
    assert (row["bucket"], row["count"], row["smallest (nodes)"]) == ("b1", 2, 2)


def test_bucket_table_tells_a_reduced_failure_by_its_minimal_case():
    # found as hardtanh over 7 nodes, reduced to the mul that diverges first: the row says so,
    # as the bucket's page and bundle do, and marks the bucket known
    found = _record("triton", "fail", ["hardtanh"], kind="wrong_values", bucket="k1", case_id="c").with_fields(
        op="hardtanh", n_nodes=7, first_op="mul", known=True,
        reduced_case={"nodes": [{"id": "v0", "op": "mul", "args": ["x0", "x1"], "attrs": {}}]})
    (row,) = tables.bucket_rows([found])
    assert (row["op"], row["smallest (nodes)"], row["status"]) == ("mul", 1, "known")


def test_every_bucket_says_where_it_stands_and_when_the_history_first_saw_it():
    import types
    from torchsim_diff.results.record import NOT_REACHED
    from torchsim_diff.report.standing import Standing
    records = [_record("inductor", "fail", ["relu"], kind="wrong_values", bucket=bucket, case_id=f"case-{bucket}")
               for bucket in ("k1", "k2", "n1", "u1", "s1", "r1")]
    records = [r.with_fields(known=r.bucket in ("k1", "k2"), reduce_error=NOT_REACHED if r.bucket == "r1" else None)
               for r in records]
    cause = types.SimpleNamespace(name="relu-memory-order", status="reported", fixed_in="",
                                  upstream="https://github.com/pytorch/pytorch/issues/1")
    hostile = types.SimpleNamespace(name="k2-cause", status="fixed", fixed_in="2.12", upstream="javascript:alert(1)")
    standing = Standing(new={"n1"}, unconfirmed={"u1": "flaky: 2 of 2 replays did not fail"},
                        causes={"k1": cause, "k2": hostile}, first_seen={"n1": "2026-12-06 18:00:00",
                                                                         "s1": "2026-12-01 09:30:00"})
    rows = {row["bucket"]: row for row in tables.bucket_rows(records, standing=standing)}
    assert {b: row["status"] for b, row in rows.items()} == {
        "k1": "known: relu-memory-order (reported)", "k2": "known: k2-cause (fixed in 2.12)", "n1": "NEW",
        "u1": "unconfirmed: flaky: 2 of 2 replays did not fail", "s1": "seen before", "r1": "not reduced"}
    assert (rows["s1"]["first seen"], rows["s1"]["first case"]) == ("2026-12-01 09:30:00", "case-s1")
    assert rows["k1"]["first seen"] == "-"                     # known bugs are kept in the ledger, not the history
    page = html_report.html_page(records, standing=standing)
    assert '<a href="https://github.com/pytorch/pytorch/issues/1">known: relu-memory-order (reported)</a>' in page
    assert "javascript:" not in page                           # a ledger's text is never a link of another scheme


def test_a_known_bucket_is_named_by_its_cause_in_the_ledger():
    import os
    from torchsim_diff.report.standing import Standing, cause_status
    from torchsim_diff.buckets.causes import read_causes
    from torchsim_diff.buckets.signatures import bucket_of
    from tests.conftest import REPO
    known = os.path.join(REPO, "corpora", "known")
    causes, _ = read_causes(known)
    standing = Standing.of_run(known_folder=known)
    for cause in causes[:: max(1, len(causes) // 8)]:
        entry = next(e for e in cause.entries if e.cause)
        assert standing.status(bucket_of(entry.cause), known=True) == f"known: {cause.name} ({cause_status(cause)})"


def _refined(bucket, op, trigger, case_id, kind="wrong_values"):
    return _record("triton", "fail", [op], kind=kind, bucket=bucket, case_id=case_id).with_fields(
        first_op=op, trigger=trigger)


def test_bucket_table_puts_distinct_bugs_first():
    # two near-duplicate strided buckets are the most frequent; the unrelated bug ranks second
    records = [_refined("s1", "add", ["strided"], "a"), _refined("s1", "add", ["strided"], "b"),
               _refined("s1", "add", ["strided"], "c"), _refined("s2", "sub", ["strided"], "d"),
               _refined("s2", "sub", ["strided"], "e"), _refined("n1", "minimum", [], "f", "nonfinite_mismatch")]
    assert [row["bucket"] for row in tables.bucket_rows(records)] == ["s1", "n1", "s2"]
    assert [row["bucket"] for row in tables.new_bucket_rows(records, {"s1", "s2", "n1"})] == ["s1", "n1", "s2"]


def test_coverage_counts_op_by_layout_class():
    rows = {r["op"]: r for r in tables.coverage_rows(RECORDS)}
    assert rows["relu"]["transposed"] == 1 and rows["relu"]["contiguous"] == 1 and rows["mm"]["inout"] == 0


@pytest.mark.parametrize("fmt", tables.FORMATS)
def test_every_format_renders_every_row(fmt):
    rows = tables.summary_rows(RECORDS)
    text = tables.render(rows, fmt, "Summary")
    if fmt == "json":
        assert json.loads(text) == rows
    elif fmt == "csv":
        assert list(csv.DictReader(io.StringIO(text)))[1]["route"] == "triton"
    else:
        assert "inductor" in text and "triton" in text


def test_html_page_has_error_distribution_plots():
    page = html_report.html_page(RECORDS)
    assert page.count('aria-label="max abs error distribution') == 1 and "inductor" in page and "<table" in page


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="format='pdf'"):
        tables.render([], "pdf")


def test_failures_left_unreduced_are_listed_once_per_raw_bucket_with_every_case_kept(tmp_path):
    from torchsim_diff.results.record import DEFERRED
    left = [_record("mlir", "fail", ["fmod"], kind="crash", bucket="raw-crash", case_id=f"m{i}") for i in range(3)]
    left.append(_record("mlir", "fail", ["clamp"], kind="wrong_values", bucket="raw-values", case_id="v"))
    left = [r.with_fields(reduce_error=DEFERRED) for r in left]
    lines = tables.unreduced_lines(left + RECORDS, str(tmp_path))
    assert lines[0].startswith("Not reduced by the budget's end (4 in 2 raw bucket(s)")
    assert lines[1:] == [
        f"  mlir: crash in fmod (3 cases): torchsim-diff reduce {tmp_path / 'unreduced' / 'mlir-m0.json'} --route mlir",
        f"  mlir: wrong_values in clamp: torchsim-diff reduce {tmp_path / 'unreduced' / 'mlir-v.json'} --route mlir"]
    assert sorted(p.name for p in (tmp_path / "unreduced").iterdir()) == ["mlir-m0.json", "mlir-m1.json",
                                                                       "mlir-m2.json", "mlir-v.json"]
