"""Campaigns: same seed, same cases and verdicts; records written as they are made."""
import json
import os

import pytest

from torchsim_diff.campaign.fuzz import CampaignOptions, run_campaign
from torchsim_diff.cli import main
from torchsim_diff.results.jsonl import read_records
from torchsim_diff.results.record import Record

pytestmark = [pytest.mark.slow, pytest.mark.e2e]   # whole campaigns: the e2e set (.ci/run)
STABLE = ("case_id", "graph_hash", "route", "status", "kind", "bucket", "max_abs_err", "max_ulp")


def _stable(records):
    return [{k: getattr(r, k) for k in STABLE} for r in records]


def test_same_seed_same_cases_and_verdicts(tmp_path):
    runs = [run_campaign(CampaignOptions(routes=["eager"], out_dir=str(tmp_path / name), max_examples=25, seed=7))
            for name in ("a", "b")]
    assert len(runs[0].records) == 25
    assert _stable(runs[0].records) == _stable(runs[1].records)
    other = run_campaign(CampaignOptions(routes=["eager"], out_dir=str(tmp_path / "c"), max_examples=25, seed=8))
    assert _stable(other.records) != _stable(runs[0].records)


def test_results_jsonl_has_every_record_with_the_design_fields(tmp_path):
    out = tmp_path / "run"
    code = main(["fuzz", "--routes", "eager", "--max-examples", "5", "--out", str(out)])
    assert code == 0
    records = list(read_records(os.path.join(out, "results.jsonl")))
    assert len(records) == 5
    for field in ("case_id", "seed", "graph_hash", "route", "status", "kind", "bucket", "ops", "dtypes",
                  "layouts", "n_nodes", "max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "t_compile",
                  "t_run", "t_case", "t_harness", "cost", "artifacts", "message"):
        assert field in records[0].to_dict()


def test_findings_exit_1_and_land_in_buckets(tmp_path, double_routes, capsys):
    out = tmp_path / "run"
    code = main(["fuzz", "--routes", "double-wrong-element", "--max-examples", "4", "--out", str(out),
                 "--ops", "relu,add"])
    assert code == 1
    printed = capsys.readouterr().out
    assert "Buckets" in printed and "wrong_values" in printed
    # the report folder, as a pytest campaign writes it: a page per bucket, linked from report.html
    report = (out / "report.html").read_text()
    pages = list((out / "buckets").glob("*.html"))
    assert pages and all(f"buckets/{page.name}" in report for page in pages)
    assert f"HTML report: {out / 'report.html'}" in printed


def test_a_known_bug_is_recorded_as_known_neither_new_nor_a_finding(tmp_path, double_routes, capsys):
    from torchsim_diff.buckets.signatures import ANY_OP, bucket_of, refined_signature
    common = ["fuzz", "--routes", "double-wrong-element", "--max-examples", "3", "--ops", "relu", "--no-reduce"]
    assert main([*common, "--out", str(tmp_path / "a"), "--buckets", "none"]) == 1
    found = next(r for r in read_records(str(tmp_path / "a" / "results.jsonl")) if r.failed)
    known = tmp_path / "known"
    known.mkdir()
    # a known entry is matched by the cause signature of a failure's own minimal case: this
    # route gets every output wrong, so no op is part of the cause
    cause = refined_signature(found.route, "wrong_values", ANY_OP, [])
    (known / "wrong-element.json").write_text(json.dumps(
        {"route": found.route, "kind": found.kind, "bucket": found.bucket, "cause": cause, "case": found.case}))
    capsys.readouterr()
    out, history = tmp_path / "b", str(tmp_path / "history.sqlite")
    assert main([*common, "--out", str(out), "--known-bugs", str(known), "--buckets", history]) == 0
    failing = [r for r in read_records(str(out / "results.jsonl")) if r.failed]
    assert failing and all(r.known for r in failing)
    assert "known bug bucket(s) " + bucket_of(cause) in capsys.readouterr().out
    assert not os.path.isdir(out / "bundles") or not os.listdir(out / "bundles")


def test_a_truncated_last_line_does_not_lose_earlier_records(tmp_path):
    path = tmp_path / "results.jsonl"
    record = {"case_id": "c", "route": "eager", "status": "pass", "kind": None, "bucket": None, "ops": [], "case": None}
    path.write_text(json.dumps(record) + "\n" + '{"route": ')
    assert list(read_records(str(path))) == [Record.from_dict(record)]


def test_second_campaign_says_which_buckets_are_new(tmp_path, double_routes):
    store = str(tmp_path / "buckets.json")
    common = dict(routes=["double-wrong-element"], max_examples=3, ops=["relu"], bucket_store=store)
    first = run_campaign(CampaignOptions(out_dir=str(tmp_path / "a"), seed=1, **common))
    second = run_campaign(CampaignOptions(out_dir=str(tmp_path / "b"), seed=2, **common))
    assert len(first.new_buckets) == 1 and second.new_buckets == set()
    from torchsim_diff.buckets.bucket_history import BucketStore
    saved = BucketStore(store).buckets
    (entry,) = saved.values()
    failing = [r for run in (first, second) for r in run.records if r.failed]
    assert {r.bucket for r in failing} == set(saved)          # both campaigns' failures, one bucket
    assert entry["count"] == len(failing) and entry["size"][0] == 1


def test_new_buckets_get_bundles_and_export_writes_one(tmp_path, double_routes, capsys):
    out = tmp_path / "run"
    store = tmp_path / "buckets.json"
    code = main(["fuzz", "--routes", "double-wrong-element", "--max-examples", "3", "--out", str(out),
                 "--ops", "relu", "--buckets", str(store)])
    assert code == 1
    (bucket,) = os.listdir(out / "bundles")
    assert {"repro.py", "case.json", "ISSUE.md"} <= set(os.listdir(out / "bundles" / bucket))
    assert main(["export", bucket, "--to", str(tmp_path / "exported"), "--buckets", str(store)]) == 0
    assert (tmp_path / "exported" / "ISSUE.md").exists()
    assert main(["export", "0000000000", "--to", str(tmp_path / "x"), "--from", str(out)]) == 2
    assert "not found" in capsys.readouterr().err


def test_reduce_command_shrinks_and_refuses_a_passing_case(tmp_path, double_routes, capsys):
    from tests.conftest import REPO
    seed_entry = os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")
    assert main(["reduce", seed_entry, "--route", "eager", "--out", str(tmp_path / "a")]) == 2
    assert "does not fail" in capsys.readouterr().err
    output = tmp_path / "reduced.json"
    assert main(["reduce", seed_entry, "--route", "double-wrong-element", "--out", str(tmp_path / "b"),
                 "--output", str(output)]) == 0
    from torchsim_diff.case.graph import Case
    assert len(Case.from_json(output.read_text()).nodes) <= 3


def test_unavailable_route_gets_skipped_records_with_every_field(tmp_path, double_routes):
    result = run_campaign(CampaignOptions(routes=["eager", "double-unavailable"], out_dir=str(tmp_path), max_examples=2))
    skipped = [r for r in result.records if r.route == "double-unavailable"]
    ran = [r for r in result.records if r.route == "eager"]
    assert len(skipped) == 2 and all(r.status == "skipped" and "DOUBLE_HOME" in r.message for r in skipped)
    assert set(skipped[0].to_dict()) == set(ran[0].to_dict())
