"""NEW means real: a new bucket is NEW only when its bundle's repro.py reproduces it in a
fresh process and its case fails again when replayed; campaigns say honestly what ran."""
import json
import os

import pytest

from torchsim_diff.cli import EXIT_CLEAN, EXIT_FINDINGS, EXIT_UNTESTED, build_parser, main
from torchsim_diff.results.jsonl import read_records
from torchsim_diff.buckets.bucket_history import BucketStore

FUZZ = ["fuzz", "--max-examples", "3", "--ops", "relu", "--no-reduce"]


def _fuzz(tmp_path, route: str, capsys) -> tuple:
    history = str(tmp_path / "history.sqlite")
    code = main([*FUZZ, "--routes", route, "--out", str(tmp_path / "run"), "--buckets", history])
    failing = [r for r in read_records(str(tmp_path / "run" / "results.jsonl")) if r.failed]
    return code, capsys.readouterr().out, failing, BucketStore(history).buckets


@pytest.mark.e2e
def test_a_bug_whose_repro_reproduces_is_new_with_its_bundle(tmp_path, double_routes, capsys):
    code, printed, failing, history = _fuzz(tmp_path, "double-wrong-element", capsys)
    assert code == EXIT_FINDINGS and failing
    assert set(history) == {failing[0].bucket}
    assert "NEW" in printed and "Unconfirmed" not in printed
    assert os.path.exists(tmp_path / "run" / "bundles" / failing[0].bucket / "repro.py")
    assert not BucketStore(str(tmp_path / "history.sqlite")).add(failing[0]), "told, then settled: seen from now on"


def test_new_buckets_stay_unsettled_until_told_so_a_run_killed_first_finds_them_again(tmp_path, add_case):
    """kill -9 after the self-check settled a bucket but before the run printed it left the
    bucket seen before, never NEW, to every later run (benchmarks/bench_kill_points.py)."""
    from torchsim_diff.campaign.fuzz import CampaignOptions, CampaignResult, report_new_buckets, settle_told
    from torchsim_diff.results.record import Record
    path = str(tmp_path / "history.sqlite")
    opts = CampaignOptions(routes=["eager"], out_dir=str(tmp_path / "run"), bucket_store=path, self_check=False,
                           settle_when_told=True)
    record = Record(case_id="c", route="eager", status="fail", kind="wrong_values", bucket="b1", message="m",
                    case=add_case.to_dict())
    store = BucketStore(path)
    assert store.add(record)
    result = CampaignResult(records=[record])
    report_new_buckets(result, store, opts)
    assert result.new_buckets == result.untold == {"b1"}
    assert BucketStore(path).add(record), "killed before telling it: new to the next run"
    settle_told(result, opts)
    assert not BucketStore(path).add(record) and not result.untold


@pytest.mark.e2e
def test_a_bug_its_repro_does_not_reproduce_is_unconfirmed_never_new(tmp_path, double_routes, capsys,
                                                                     no_planted_edges):
    """The route is wrong only in a worker that ran earlier cases: the campaign's replays
    fail too, but repro.py, a fresh process running the case alone, prints FIXED."""
    code, printed, failing, history = _fuzz(tmp_path, "double-wrong-when-warm", capsys)
    assert failing, "the double should fail on the campaign's second and third case"
    assert code == EXIT_CLEAN
    assert history == {}, "an unconfirmed bucket stays out of the history, to be checked again"
    assert "Unconfirmed buckets (1)" in printed and "repro.py exits 0" in printed
    kept = json.loads((tmp_path / "run" / "self_check.json").read_text())
    assert [(c["confirmed"], c["reason"].split(":")[0]) for c in kept.values()] == [(False, "its repro.py exits 0, not 1")]
    rows = [line.split() for line in printed.splitlines() if failing[0].bucket in line]
    assert any("unconfirmed:" in row for row in rows) and not any("NEW" in row for row in rows)


def test_a_failure_that_does_not_fail_again_is_a_flake_and_the_campaign_goes_on(tmp_path, double_routes, capsys,
                                                                                no_planted_edges):
    code, printed, failing, history = _fuzz(tmp_path, "double-wrong-on-first-sight", capsys)
    records = list(read_records(str(tmp_path / "run" / "results.jsonl")))
    assert len(records) == 3 and len(failing) == 3, "every case ran, each failing on first sight"
    assert code == EXIT_CLEAN and history == {}
    assert "flaky" in printed and "did not fail" in printed


def test_a_route_that_could_not_be_tested_has_its_own_exit_status(tmp_path, double_routes, capsys):
    code = main(["fuzz", "--routes", "eager,double-unavailable", "--max-examples", "2",
                 "--out", str(tmp_path / "run"), "--buckets", "none"])
    assert code == EXIT_UNTESTED
    assert "2 cases (2 route runs, 2 skipped)" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--help"], ["fuzz", "--help"]])
def test_exit_statuses_are_documented_in_help(capsys, argv):
    with pytest.raises(SystemExit):
        main(argv)
    text = " ".join(capsys.readouterr().out.split())
    for status in ("0 clean", "1 confirmed findings", "3 no confirmed finding but a route could not be tested"):
        assert status in text


@pytest.mark.parametrize("argv, expected", [
    (["--budget", "10m"], "unbounded"),
    (["--budget", "10m", "--max-examples", "7"], 7),
    ([], 100),
])
def test_budget_alone_lifts_the_case_count(argv, expected):
    from torchsim_diff.cli.fuzz_command import UNBOUNDED_EXAMPLES, _max_examples
    args = build_parser().parse_args(["fuzz", *argv])
    assert _max_examples(args) == (UNBOUNDED_EXAMPLES if expected == "unbounded" else expected)


def test_an_error_in_a_visitor_is_raised_as_itself_never_replayed_as_flaky():
    from torchsim_diff.generate.draws import for_each_case
    from torchsim_diff.generate.strategies import cases
    visited = []

    def visit(case):
        visited.append(case.case_id)
        if len(visited) == 2:
            raise ValueError("harness error in handling a result")

    with pytest.raises(ValueError, match="harness error"):
        for_each_case(cases(dtype="float32", max_nodes=2), seed_value=3, count=5, visit=visit)
    assert len(visited) == 2, "Hypothesis replayed the case that raised"


def test_an_error_in_triage_stays_on_its_own_case(tmp_path, double_routes):
    from tests.conftest import make_case
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.run.runner import CaseRunner

    class BrokenReducer:
        def refine(self, verdict, stop_at=None):
            raise RuntimeError("reducer bug")

    case = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        verdict, record = CaseRunner(checker, reducer=BrokenReducer()).run(case, "double-wrong-element")
    assert verdict.failed and record.failed
    assert record.reduce_error == "triage failed: RuntimeError: reducer bug"


@pytest.mark.e2e
def test_only_fresh_cases_count_towards_abandoning_a_route(tmp_path, double_routes):
    """Triage re-runs of a crash (reduction, self-check replays) neither count nor clear the count."""
    from tests.conftest import make_case
    from torchsim_diff.worker.client import RouteWorker
    odd = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"], seed=1)
    worker = RouteWorker("double-segfault", work_root=str(tmp_path), max_crashes=2)
    try:
        run = lambda: worker.run(odd.to_dict(), odd.program_source(), str(tmp_path / "a"))  # noqa: E731
        assert run().kind == "crash" and worker.crashes_in_a_row == 1
        worker.triaging = True
        for _ in range(2):
            run()
        assert worker.crashes_in_a_row == 1 and not worker.abandoned
        worker.triaging = False
        run()
        # the second fresh crash in a row reaches the cap; the route still runs the plainest case
        # (an even seed), so the crashes were the cases' own and the count starts again
        assert worker.crashes_in_a_row == 0 and not worker.abandoned
        assert run().kind == "crash" and worker.crashes_in_a_row == 1
    finally:
        worker.close()


@pytest.mark.e2e
def test_at_the_crash_cap_a_route_that_cannot_run_the_plainest_case_is_abandoned(tmp_path, double_routes,
                                                                                 monkeypatch):
    from tests.conftest import make_case
    from torchsim_diff.worker import client
    monkeypatch.setattr(client, "PLAINEST_CASE", dict(client.PLAINEST_CASE, values={"seed": 1}))  # odd: it crashes
    odd = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"], seed=1)
    worker = client.RouteWorker("double-segfault", work_root=str(tmp_path), max_crashes=2)
    try:
        for _ in range(2):
            assert worker.run(odd.to_dict(), odd.program_source(), str(tmp_path / "a")).kind == "crash"
        assert worker.abandoned and "abandoned after 2 crashes in a row" in worker.abandoned
    finally:
        worker.close()


@pytest.mark.e2e
def test_reducing_a_crash_after_the_drawing_does_not_abandon_its_route(tmp_path, double_routes):
    """A pytest campaign reduces its failures after the drawing (session_refinements). Its re-runs
    of a crash once counted as fresh cases: the reduction abandoned the route, and the route's other
    failures were left unreduced (seen on mlir in a 10-minute default campaign)."""
    import json
    from tests.conftest import make_case
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.triage.session_refinements import refine_verdicts
    odd = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}},
                     {"id": "v1", "op": "neg", "args": ["v0"], "attrs": {}}],
                    [("x0", [3], [1], 0, 3, {})], ["v1"], seed=1)
    with Checker(out_dir=str(tmp_path)) as checker:
        verdict = checker.check(odd, "double-segfault")
        worker = checker.worker("double-segfault")
        assert verdict.kind.value == "crash" and worker.crashes_in_a_row == 1
        worker.max_crashes = 2
        refine_verdicts(checker, [verdict], str(tmp_path / "refined.jsonl"), budget_s=60)
        (line,) = [json.loads(text) for text in open(tmp_path / "refined.jsonl")]
        assert line["reduce_error"] is None and line["reduce_runs"] > worker.max_crashes, line
        assert not worker.abandoned and worker.crashes_in_a_row == 1


def test_lazy_draws_give_the_first_cases_in_order_and_stop_when_closed():
    from torchsim_diff.generate.draws import LazyCases, first_cases
    from torchsim_diff.generate.strategies import cases
    strategy = cases(dtype="float32", max_nodes=2)
    expected = [c.case_id for c in first_cases(strategy, seed_value=5, count=4)]
    same = LazyCases(strategy, seed_value=5, count=4)
    assert [same[k].case_id for k in range(4)] == expected
    with pytest.raises(IndexError):
        same[4]
    unbounded = [LazyCases(strategy, seed_value=5, count=10**9) for _ in range(2)]
    try:
        assert [unbounded[0][k].case_id for k in range(3)] == [unbounded[1][k].case_id for k in range(3)]
    finally:
        for lazy in unbounded:
            lazy.close()
    assert not any(lazy._thread.is_alive() for lazy in unbounded)


def test_a_plain_repro_runs_where_torchsim_diff_cannot_be_imported(tmp_path, monkeypatch):
    """A repro.py that imports torchsim-diff by mistake would fail its self-check, even where
    PYTHONPATH names a checkout of it (as a developer's shell may)."""
    import sys

    from tests.conftest import REPO
    from torchsim_diff.triage.self_check import _ReproRuns
    monkeypatch.setenv("PYTHONPATH", REPO)
    plain, harness = tmp_path / "plain", tmp_path / "harness"
    probe = "import importlib.util as u, torch\nprint(u.find_spec('torchsim_diff'))\n"
    for folder, text in ((plain, probe), (harness, "from torchsim_diff.run.checker import Checker\n")):
        folder.mkdir()
        (folder / "repro.py").write_text(text)
    with _ReproRuns() as runs:
        assert runs.python_for(str(harness)) == sys.executable
        assert runs.python_for(str(plain)) != sys.executable
        assert runs._run(str(plain)) == (0, "None")


def test_the_issue_text_quotes_the_self_checks_run_of_repro_not_the_unreduced_message(tmp_path):
    """A campaign's bundle quotes the recorded message, the unreduced case's; once its repro.py
    (of the reduced case) has run, ISSUE.md quotes what that run printed."""
    from torchsim_diff.report.issue_text import OUTPUT_HEADING
    from torchsim_diff.triage.self_check import run_repro
    (tmp_path / "repro.py").write_text("import sys\nprint('output 0: 1 / 1 elements differ')\nprint('REPRODUCES')\n"
                                       "sys.exit(1)\n")
    recorded = "output 0: non-finite pattern differs\nMismatched elements: 2 / 33 (6.1%)"
    (tmp_path / "ISSUE.md").write_text(f"# title\n\n{OUTPUT_HEADING}\n\n```\n{recorded}\n```\n\n### Versions\n")
    assert run_repro(str(tmp_path)) == (1, "REPRODUCES")
    issue = (tmp_path / "ISSUE.md").read_text()
    assert "2 / 33" not in issue and "### Versions" in issue
    assert f"{OUTPUT_HEADING}\n\n```\noutput 0: 1 / 1 elements differ\nREPRODUCES\n$ echo $?  # 1\n```\n" in issue
