"""The command line: one clear line and exit 2 for every user mistake; 0/1 otherwise."""
import json
import subprocess
import sys

import pytest

from torchsim_diff.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("argv,fragment", [
    (["fuzz", "--routes", "nope"], "unknown route 'nope'"),
    (["fuzz", "--routes", "eager", "--ops", "frobnicate"], "ops=['frobnicate']"),
    (["fuzz", "--routes", "eager", "--dtype", "float8"], "dtype='float8'"),
    (["fuzz", "--route-option", "spike-vlen"], "ROUTE.KEY=VALUE"),
    (["replay", "does/not/exist.json"], "no such file"),
    (["table", "does/not/exist"], "no results"),
    (["routes", "--routes", "nope"], "unknown route 'nope'"),
    (["frobnicate"], "invalid choice"),
    (["fuzz", "--max-examples", "many"], "is not an integer"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, fragment):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("torchsim-diff: error:") and fragment in err
    assert "Traceback" not in err + out


@pytest.mark.parametrize("content,fragment", [
    ("{nope", "not valid JSON"),
    (json.dumps({"schema": 1, "dtype": "float32", "inputs": [], "nodes": [{"id": "v0", "op": "bogus", "args": []}],
                 "outputs": []}), "unknown op 'bogus'"),
    (json.dumps([1, 2]), "an entry is an object"),
])
def test_malformed_case_json_is_one_line_and_exit_2(tmp_path, capsys, content, fragment):
    path = tmp_path / "case.json"
    path.write_text(content)
    code, out, err = _run(capsys, "replay", str(path), "--routes", "eager")
    assert code == 2 and err.count("\n") == 1 and str(path) in err and fragment in err


def test_the_console_script_exits_2_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "torchsim_diff", "fuzz", "--routes", "bogus"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "unknown route" in proc.stderr


def test_ops_lists_every_family(capsys):
    code, out, _ = _run(capsys, "ops")
    assert code == 0
    for family in ("pointwise", "reduction", "normalization", "matmul", "view", "indexing", "inplace"):
        assert family in out


def test_table_reads_the_bucket_history_that_fuzz_and_export_use(tmp_path, capsys):
    from tests.conftest import REPO
    from torchsim_diff.results.record import Record
    from torchsim_diff.buckets.bucket_history import BucketStore
    seed_case = json.load(open(f"{REPO}/corpora/seed/seed-00-float32.json"))["case"]
    store = BucketStore(str(tmp_path / "h.sqlite"))
    for bucket, kind in (("b-wrong", "wrong_values"), ("b-crash", "crash"), ("b-wrong", "wrong_values")):
        store.add(Record(bucket=bucket, route="inductor", kind=kind, op="relu", status="fail",
                         message=f"{kind} here", case=seed_case))
    run = tmp_path / "run"
    run.mkdir()
    record = {"case_id": "c", "route": "eager", "status": "pass", "kind": None, "bucket": None, "ops": ["relu"],
              "case": seed_case}
    (run / "results.jsonl").write_text(json.dumps(record) + "\n")
    code, out, _ = _run(capsys, "table", str(run), "--tables", "history", "--buckets", str(tmp_path / "h.sqlite"))
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("b-")}
    assert code == 0 and set(rows) == {"b-wrong", "b-crash"}
    assert rows["b-wrong"][4] == "2" and rows["b-crash"][4] == "1"


def test_a_results_file_named_twice_is_read_once(tmp_path):
    from torchsim_diff.results.jsonl import find_results
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text("")
    (run / "results-gw0.jsonl").write_text("")
    found = find_results([str(run), str(run / "results.jsonl"), str(tmp_path / "run" / ".." / "run")])
    assert found == [str(run / "results-gw0.jsonl"), str(run / "results.jsonl")]
