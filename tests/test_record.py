"""One record type (results/record.py): every field round-trips, unknown keys are kept, lines
written before the schema field existed still load and feed every table and bundle, wrong-typed
fields and newer schemas are refused with their reason, and no other module reads records by
string key.

tests/data/results-v1/results.jsonl holds lines exactly as torchsim-diff wrote them before
records had a schema field (version 1): three passes of `fuzz --routes eager --max-examples 3`
and three reduced failures of a bug-zoo campaign (benchmarks/bug_zoo, zoo-offset-dropped, seed
1). tables.json beside it holds the tables the code of that time made from them.
"""
import dataclasses
import json
import os
import pickle
import re
import shutil

import pytest

import torchsim_diff
from tests.conftest import REPO
from torchsim_diff.report import html_report, tables
from torchsim_diff.results import record as record_module
from torchsim_diff.results.jsonl import ResultsWriter, read_all, read_records
from torchsim_diff.results.record import (FIELD_TYPES, LINE_FIELDS, REQUIRED, SCHEMA, BadRecord, Figures, Record,
                                          problem)

OLD_RUN = os.path.join(REPO, "tests", "data", "results-v1")
OLD_LINES = os.path.join(OLD_RUN, "results.jsonl")
ZOO_ROUTE = "zoo-offset-dropped=benchmarks.bug_zoo.planted:OffsetDropped"
CASE = {"schema": 1, "dtype": "float32", "values": {"seed": 3, "tails": ["odd_sizes"]},
        "inputs": [{"name": "x0", "shape": [2, 3], "dtype": "float32", "domain": {"kind": "real"},
                    "layout": {"classes": ["contiguous"], "strides": [3, 1], "offset": 0, "storage_size": 6},
                    "mutated": False}],
        "nodes": [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], "outputs": ["v0"]}
MINIMAL = {"case_id": "c", "route": "eager", "status": "pass", "kind": None, "bucket": None, "ops": ["relu"],
           "case": CASE}


def _old_lines() -> list:
    with open(OLD_LINES, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _every_field_set() -> Record:
    """A record whose every field holds a value other than its default."""
    values = dict(
        schema=SCHEMA, case_id="c1", seed=7, graph_hash="g", route="inductor", status="fail", kind="wrong_values",
        stage="compare", bucket="b1", op="relu", ops=["relu"], dtypes=["float32"], layouts=["contiguous"],
        n_nodes=1, max_abs_err=0.5, max_rel_err=0.25, max_ulp=4.0, unstable=1, carried_ulp=0.1,
        carried_by_op={"relu": 0.1}, err_ratio=2.0, atol_needed=0.6, rtol_needed=0.3, t_compile=1.0, t_run=0.5,
        t_case=2.0, t_harness=0.25, t_start=0.1, t_diagnose=0.2, cost=1234, divergent_kernel={"launch": 0},
        dynamic=True, second_size={"shapes": [[3, 4]], "status": "pass"}, batch=4, versions={"torch": "2"},
        artifacts="artifacts/inductor/c1", message="output 0: values differ", case=CASE,
        op_errors={"relu": {"max_abs_err": 0.5, "atol_needed": 0.6}},
        op_local_errors={"relu": {"max_abs_err": 0.4, "atol_needed": 0.5}}, known=True, signature="inductor|wrong_values",
        reduced_case=CASE, first_op="relu", trigger=["strided"], reduce_s=1.5, reduce_runs=9,
        reduced_artifacts="artifacts/inductor/c1-min", minimal_bucket="b0", other_failures=["inductor|crash"],
        raw_bucket="b2", reduce_error="flaky",
        node="host/abc", note="a note", upstream="https://example.org/1", project="pytorch", found_on="triton-spike")
    assert set(values) == set(LINE_FIELDS), set(LINE_FIELDS) ^ set(values)
    record = Record(**values)
    for field in dataclasses.fields(Record):
        if field.name in values:
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            assert values[field.name] != default or field.name == "schema", field.name
    return record


# -- the line format -----------------------------------------------------------------------------
def test_every_field_round_trips_through_a_line(tmp_path):
    record = _every_field_set()
    line = json.dumps(record.to_dict())
    assert list(json.loads(line))[0] == "schema" and json.loads(line)["schema"] == SCHEMA
    assert Record.from_dict(json.loads(line)) == record
    run = tmp_path / "run"
    with ResultsWriter(str(run / "results.jsonl")) as writer:      # artifact folders inside the run come back
        writer.write(record.with_fields(artifacts=None, reduced_artifacts=None))
    (read,) = read_records(str(run / "results.jsonl"))
    assert read == record.with_fields(artifacts=None, reduced_artifacts=None)


def test_a_record_made_in_code_writes_every_field_and_no_bookkeeping():
    written = Record(case_id="c", route="eager", status="pass", artifacts_tar=b"tar").to_dict()
    assert list(written) == list(LINE_FIELDS) and written["schema"] == SCHEMA
    assert not {"extra", "absent", "artifacts_tar"} & set(written)


def test_unknown_keys_are_kept_through_reading_and_writing(tmp_path):
    line = {**MINIMAL, "schema": SCHEMA, "from_a_newer_minor": {"x": [1, 2]}, "note_2": "kept"}
    record = Record.from_dict(line)
    assert record.extra == {"from_a_newer_minor": {"x": [1, 2]}, "note_2": "kept"}
    path = tmp_path / "results.jsonl"
    with ResultsWriter(str(path)) as writer:
        writer.write(record)
    written = json.loads(path.read_text())
    assert written["from_a_newer_minor"] == {"x": [1, 2]} and written["note_2"] == "kept"
    assert Record.from_dict(written) == record
    assert record.with_fields(first_op="relu", later_field=3).extra["later_field"] == 3   # unknown names go to extra


def test_records_cross_to_ray_actors_by_pickle():
    record = _every_field_set().with_fields(artifacts_tar=b"\x1f\x8b tar")
    assert pickle.loads(pickle.dumps(record)) == record


# -- lines written before the schema field -------------------------------------------------------
def test_an_old_line_loads_as_version_1_and_writes_back_as_it_was(tmp_path):
    old = _old_lines()
    records, log = read_all([OLD_LINES])
    assert not log.skipped and len(records) == len(old) == 6
    for record, line in zip(records, old):
        assert "schema" not in line and record.schema == 1
        assert record.to_dict() == line                       # nothing gained, nothing lost
    failing = [r for r in records if r.failed]
    assert [r.trigger for r in failing] == [["offset"]] * 3 and all(r.reduced_case for r in failing)
    assert all(r.is_new_failure and not r.known for r in failing)
    path = tmp_path / "results.jsonl"
    with ResultsWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    assert [json.loads(line) for line in path.read_text().splitlines()] == old


def test_a_field_an_old_line_lacks_keeps_its_old_meaning():
    base = {**MINIMAL, "max_abs_err": 1e-3, "max_rel_err": 1e-2}
    old = Record.from_dict(base)                              # before per-op figures and atol/rtol existed
    assert {"op_errors", "atol_needed", "rtol_needed"} <= old.absent
    assert old.per_op_figures() == {"relu": Figures(max_abs_err=1e-3, max_rel_err=1e-2, atol_needed=1e-3,
                                                    rtol_needed=1e-2)}
    measured = Record.from_dict({**base, "op_errors": None, "atol_needed": None, "rtol_needed": None,
                                 "ops": ["relu", "add"]})
    assert measured.per_op_figures() == {}                   # per-op run did not complete: not counted
    changed = old.with_fields(op_errors=None)
    assert "op_errors" not in changed.absent and changed.to_dict()["op_errors"] is None


def test_every_table_reads_the_old_lines_as_before():
    records, _ = read_all([OLD_LINES])
    with open(os.path.join(OLD_RUN, "tables.json"), encoding="utf-8") as handle:
        before = json.load(handle)
    assert tables.summary_rows(records) == before["summary"]
    assert tables.tolerance_rows(records) == before["tolerance"]
    assert tables.bucket_rows(records) == before["buckets"]
    assert tables.coverage_rows(records) == before["coverage"]
    assert tables.new_bucket_rows(records, {r.bucket for r in records if r.bucket}) == before["new_buckets"]
    assert tables.mix_rows(records) and "<svg" in html_report.html_page(records)


def test_every_command_and_bundle_reads_the_old_lines(tmp_path, capsys, monkeypatch):
    from torchsim_diff.cli import main
    from torchsim_diff.campaign.fuzz import write_new_bundles
    from torchsim_diff.routes import EXTRA_ROUTES_ENV
    from torchsim_diff.buckets.bucket_history import BucketStore, smallest_per_bucket
    monkeypatch.setenv(EXTRA_ROUTES_ENV, ZOO_ROUTE)         # the planted bug's route, for the bundle
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    records, _ = read_all([str(run / "results.jsonl")])
    (bucket,) = {r.bucket for r in records if r.bucket}
    lines = tables.end_report(records, {bucket}, {}, str(run))
    assert lines[0] == "NEW buckets (1):" and (run / "report.html").exists()
    bundles = write_new_bundles([r for r in records if r.is_new_failure], None, str(run))
    title = "# pytorch (zoo-offset-dropped): x on a storage-offset input returns wrong values"
    assert open(os.path.join(bundles[bucket], "ISSUE.md")).read().splitlines()[1] == title
    store = BucketStore(str(tmp_path / "buckets.sqlite"))
    assert [store.add(r) for r in records if r.is_new_failure] == [True, False, False]
    assert store.smallest_record(bucket).to_dict() == smallest_per_bucket(records)[bucket].to_dict()
    store.close()
    for fmt in tables.FORMATS:
        assert main(["table", str(run), "--format", fmt, "--tables", "summary,tolerance,buckets,coverage,mix"]) == 0
    assert main(["table", str(run), "--tables", "history", "--buckets", str(tmp_path / "buckets.sqlite")]) == 0
    assert main(["export", bucket, "--from", str(run), "--to", str(tmp_path / "from-run")]) == 0
    assert main(["export", bucket, "--buckets", str(tmp_path / "buckets.sqlite"), "--to", str(tmp_path / "hist")]) == 0
    assert "skipped" not in capsys.readouterr().err
    for folder in ("from-run", "hist"):
        assert open(tmp_path / folder / "ISSUE.md").read().splitlines()[1] == title


# -- lines that are no record --------------------------------------------------------------------
WRONG = {"text": 5, "text or null": 5, "a folder name or null": 5, "a list of op names": "relu",
         "a list of layout classes": [1], "a list of dtype names": None, "a list of names or null": "x",
         "a case object or null": "text", "an object of per-op figures or null": [1],
         "an object or null": [], "true, false or null": "yes", "true or false": None,
         "a number or null": "1s", "a count over 1 or null": 1}


@pytest.mark.parametrize("name", sorted(FIELD_TYPES))
def test_a_wrong_typed_field_is_refused_with_its_reason(name, tmp_path):
    _test, what = FIELD_TYPES[name]
    line = {**MINIMAL, name: WRONG[what]}
    reason = f"a record whose {name} is not {what}"
    assert problem(line) == reason
    with pytest.raises(BadRecord) as caught:
        Record.from_dict(line)
    assert caught.value.reason == reason
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(MINIMAL) + "\n" + json.dumps(line) + "\n")
    records, log = read_all([str(path)])
    assert len(records) == 1 and dict(log.skipped) == {reason: 1}


@pytest.mark.parametrize("line", [[1, 2], "text", {k: v for k, v in MINIMAL.items() if k != "case"}],
                         ids=["a list", "text", "no case"])
def test_json_that_is_no_record_is_refused(line):
    assert problem(line) == "not a record (JSON without the record fields)"
    with pytest.raises(BadRecord, match="not a record"):
        Record.from_dict(line)


def test_a_line_of_a_newer_schema_is_refused_with_one_reason(tmp_path):
    newer = {**MINIMAL, "schema": SCHEMA + 1}
    reworked = {"schema": SCHEMA + 5, "id": "c", "outcome": {"status": "pass"}}     # whatever it holds
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in (MINIMAL, newer, reworked)))
    records, log = read_all([str(path)])
    reason = f"a record of a newer schema than this torchsim-diff reads (schema {SCHEMA})"
    assert len(records) == 1 and dict(log.skipped) == {reason: 2}
    assert reason in log.summary()
    for bad in ("2", 0, True, None):
        assert problem({**MINIMAL, "schema": bad}) == "a record whose schema is not a version number"
    assert Record.from_dict({**MINIMAL, "schema": SCHEMA}).schema == SCHEMA


def test_required_fields_are_what_the_tables_rely_on():
    assert set(REQUIRED) <= set(LINE_FIELDS) and set(FIELD_TYPES) <= set(LINE_FIELDS)


# -- one module reads records by string key ------------------------------------------------------
# Receivers that name other JSON shapes whose keys share names with record fields: a case and
# its parts (nodes, inputs, domains, value settings, views), kernel captures and Triton's
# metadata, the worker protocol (its messages and replies, hello), route options, rows
# (of the tables, of the bucket history's SQLite table and of its legacy JSON), and TOGSim's
# check verdicts. A read on a call's
# result (`settings(options)["dynamic"]`) is not caught.
NOT_RECORDS = {"node", "n", "data", "spec", "domain", "values", "vals", "view", "value", "lay", "i",
               "a", "arg", "meta", "triton_meta", "request", "launch",
               "message", "reply", "hello",
               "chosen", "row", "verdict", "fed_input", "told"}
READS_BY_KEY = re.compile(r'(\w+|\)|\])?(?:\[|\.get\()\s*["\'](' + "|".join(LINE_FIELDS) + r')["\']')


def record_reads_by_string_key() -> dict:
    """module -> lines that read a record field by string key (`x["status"]`, `x.get("bucket")`)."""
    root = os.path.dirname(torchsim_diff.__file__)
    found = {}
    for folder, _dirs, names in os.walk(root):
        for name in sorted(n for n in names if n.endswith(".py")):
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    for match in READS_BY_KEY.finditer(line):
                        if match.group(1) != ")" and match.group(1) not in NOT_RECORDS:
                            found.setdefault(os.path.relpath(path, root), []).append(f"{number}: {line.strip()}")
    return found


def test_only_the_record_module_reads_records_by_string_key():
    found = record_reads_by_string_key()
    assert set(found) == {os.path.relpath(record_module.__file__, os.path.dirname(torchsim_diff.__file__))}, \
        {k: v for k, v in found.items() if not k.endswith("record.py")}


def test_the_scan_finds_a_record_read_by_string_key():
    assert READS_BY_KEY.search('if r["status"] == "fail" and r.get("known"):').group(1) == "r"
    assert READS_BY_KEY.search('first = record.get("first_op") or x').group(2) == "first_op"
    assert READS_BY_KEY.search('ops = [n["op"] for n in nodes]').group(1) in NOT_RECORDS
