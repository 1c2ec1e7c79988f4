"""The pytest plugin, driven through pytester in a subprocess (as users run it)."""
import json
import os

import pytest

from tests.conftest import REPO
from torchsim_diff.judge.comparison import Where
from torchsim_diff.results.record import DEFERRED, Record

pytest_plugins = ["pytester"]
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SUITE = '''
from hypothesis import given, seed
from torchsim_diff.generate.strategies import cases

def test_fuzz(torchsim_session, fuzz_route):
    torchsim_session.require(fuzz_route)

    @seed(torchsim_session.fuzz_seed(fuzz_route))
    @torchsim_session.settings()
    @given(case=cases(ops=["relu", "add"], max_nodes=2))
    def run_case(case):
        torchsim_session.check(case, fuzz_route)
    run_case()
'''


@pytest.fixture
def suite(pytester, double_routes, monkeypatch):
    monkeypatch.chdir(pytester.path)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _records(folder):
    found = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("results"):
            with open(os.path.join(folder, name)) as handle:
                found += [Record.from_dict(json.loads(line)) for line in handle if line.strip()]
    return found


def test_bug_fails_with_its_bucket_type_and_the_report_puts_new_buckets_first(suite):
    report = suite.path / "run"
    result = suite.runpytest_subprocess("--routes", "eager,double-wrong-element,double-unavailable",
                                        "--hypothesis-profile=ci", "--report-dir", str(report), "-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, failed=1)         # the unavailable route gets no items
    result.stdout.fnmatch_lines(["torchsim-diff: route double-unavailable unavailable, not fuzzed:*DOUBLE_HOME*",
                                 # one planted bug met through two ops: reduced, then bucketed, it is one bucket
                                 "*WrongValues_*", "*torchsim-diff*", "NEW buckets (1):",
                                 "*pytorch (double-wrong-element): * returns wrong values",   # ISSUE.md's title
                                 "*reduced to 0 nodes*bundle: *bundles*", "Summary*", "*double-wrong-element*",
                                 "Error tolerance*", "route double-unavailable was not fuzzed:*DOUBLE_HOME*",
                                 f"HTML report: {report / 'report.html'}"])
    assert {r.route for r in _records(report)} == {"eager", "double-wrong-element"}
    assert "NEW buckets" in (report / "report.html").read_text()
    # the failure section is short: the unreduced case and Hypothesis's report went to the run folder
    result.stdout.fnmatch_lines(["* reduced case, bucket and bundle: the torchsim-diff report below",
                                 f"*Hypothesis's traceback: {report / 'failures'}*.txt (or run with -v)"])
    unreduced = "case=Case("                           # Hypothesis's failing example, as it prints it
    assert unreduced not in result.stdout.str()
    kept, = (report / "failures").iterdir()
    assert unreduced in kept.read_text()
    # every table tells the bucket alike: the terminal's NEW list, the report's NEW and Buckets
    # tables, and the bucket's page
    bucket, title = next(line.split(None, 1) for line in result.stdout.lines if "returns wrong values" in line)
    page = (report / "report.html").read_text()
    new_row, = _html_table(page, "NEW buckets")
    bucket_row = next(row for row in _html_table(page, "Buckets") if row["bucket"] == bucket)
    facts = dict(_html_rows((report / "buckets" / f"{bucket}.html").read_text())[0:8])
    assert (new_row["bucket"], new_row["title"], new_row["reduced"]) == (bucket, title, "0 nodes, 1 input, 1 element")
    assert new_row["bundle"].endswith(f"bundles/{bucket}/")
    assert (bucket_row["status"], bucket_row["kind"], bucket_row["smallest (nodes)"]) == ("NEW", "wrong_values", "0")
    assert bucket_row["reproducer"] == new_row["bundle"]
    assert bucket_row["first seen"][:2] == "20" and bucket_row["first case"] != bucket_row["first seen"]
    assert (facts["status"], facts["kind"]) == ("NEW", "wrong_values")


def _html_table(page: str, title: str) -> list:
    """The rows (header -> cell text, a link's href for a linked bundle) of the table after <h3>title</h3>."""
    table = page.split(f"<h3>{title}</h3>", 1)[1].split("</table>", 1)[0]
    header, *rows = _html_rows(table)
    return [dict(zip(header, row)) for row in rows]


def _html_rows(text: str) -> list:
    """The cells of each <tr> of `text`, as their text (an <a>'s href where the text is a link to a folder)."""
    from html.parser import HTMLParser

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.rows, self.href = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                self.rows.append([])
            elif tag in ("td", "th") and self.rows:
                self.rows[-1].append("")
            elif tag == "a":
                self.href = dict(attrs).get("href")

        def handle_data(self, data):
            if self.rows and self.rows[-1]:
                self.rows[-1][-1] += self.href if self.href and self.href.endswith("/") else data

        def handle_endtag(self, tag):
            if tag == "a":
                self.href = None

    parser = Rows()
    parser.feed(text)
    return parser.rows


def test_a_bucket_whose_bundle_does_not_reproduce_is_listed_apart_never_new(suite):
    """The route is wrong only in a worker that ran earlier cases."""
    report = suite.path / "run"
    result = suite.runpytest_subprocess("--routes", "double-wrong-when-warm", "--hypothesis-profile=ci",
                                        "--report-dir", str(report), "-p", "no:cacheprovider")
    # the summary's checker is a fresh one: its replays already pass, before repro.py would
    result.stdout.fnmatch_lines(["NEW buckets: none", "Unconfirmed buckets (1)*",
                                 "*flaky: the case failed once, then 2 of 2 replays*did not fail*"])
    assert any(r.failed for r in _records(report))


def test_a_budget_ends_items_as_passed_and_progress_lines_are_printed(suite):
    report = suite.path / "run"
    result = suite.runpytest_subprocess("--routes", "eager,double-slow-start", "--fuzz-examples", "100000",
                                        "--fuzz-budget", "30s", "--fuzz-route-weights", "double-slow-start=3",
                                        "--report-dir", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    from torchsim_diff.campaign.route_shares import spent_by_route
    records = _records(report)
    cases = {route: sum(r.route == route for r in records) for route in ("eager", "double-slow-start")}
    assert all(0 < n < 100000 for n in cases.values()), cases
    spent = spent_by_route(str(report / "shares.sqlite"))
    assert spent["double-slow-start"] > 2 * spent["eager"], spent           # its weight: three times eager's time
    result.stdout.fnmatch_lines(["*budget=30s*", f"progress: double-slow-start*{cases['double-slow-start']} cases*left",
                                 "Drawing time per route*", f"eager *{cases['eager']} *"])


# A closing time no slow machine uses up: the outcome is not a race.
LONG_CLOSING_TIME = '''
from torchsim_diff.campaign import budget
budget.SHRINK_SHARE = 0.8
'''
NO_TIME_TO_SELF_CHECK = '''
from torchsim_diff.triage import self_check
self_check.MIN_REPLAY_S = 1e9
'''


@pytest.mark.parametrize("self_checked", [True, False], ids=["self-checked", "no-time-to-self-check"])
def test_under_a_budget_a_failure_is_reduced_after_the_drawing_and_its_item_goes_on_drawing(suite, self_checked):
    suite.makeconftest(LONG_CLOSING_TIME + ("" if self_checked else NO_TIME_TO_SELF_CHECK))
    report = suite.path / "run"
    result = suite.runpytest_subprocess("--routes", "eager,double-wrong-element", "--fuzz-budget", "60s",
                                        "--hypothesis-profile=ci", "--report-dir", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)                 # failures were recorded, not raised, while drawing
    assert result.ret == pytest.ExitCode.TESTS_FAILED    # a NEW bucket, or one that may be new, fails the run
    failed = [r for r in _records(report) if r.failed]
    assert len(failed) > 1, failed                   # its first failure did not end the item
    assert all(r.reduce_error == DEFERRED and not r.reduced_case for r in failed)     # none reduced while drawing
    if self_checked:
        result.stdout.fnmatch_lines(["NEW buckets (1):", "*pytorch (double-wrong-element): * returns wrong values",
                                     "*reduced to 0 nodes*"])
    else:
        result.stdout.fnmatch_lines(["NEW buckets: none", "Unconfirmed buckets (1)*",
                                     "*not self-checked: the run's budget ran out first",
                                     "The run fails: * failure(s) the budget left undecided*"])


def test_under_a_budget_a_route_that_batches_compiles_its_items_cases_together_each_judged_alone(suite):
    report = suite.path / "run"
    result = suite.runpytest_subprocess("--routes", "eager", "--fuzz-budget", "20s", "--fuzz-batch", "eager=3",
                                        "--report-dir", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    records = _records(report)
    assert len(records) >= 3 and len({r.case_id for r in records}) == len(records)     # distinct cases
    assert sum(r.batch == 3 for r in records) >= 3 and all(r.status == "pass" for r in records)
    bad = suite.runpytest_subprocess("--routes", "eager", "--fuzz-batch", "eager=0", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--fuzz-batch='eager=0': 'eager=0' is not route=cases with a positive number*"])


def test_a_budget_turns_hypothesis_shrinking_off_and_a_bad_weight_is_one_line(suite):
    suite.makepyfile(test_phases='''
from hypothesis import Phase
def test_phases(torchsim_session):
    budgeted = torchsim_session.budget is not None
    assert (Phase.shrink in torchsim_session.settings().phases) != budgeted
    assert (torchsim_session.settings().max_examples > 1000) == budgeted     # the budget ends an item
''')
    assert suite.runpytest_subprocess("test_phases.py", "-p", "no:cacheprovider").ret == 0
    assert suite.runpytest_subprocess("test_phases.py", "--fuzz-budget", "20s", "-p", "no:cacheprovider").ret == 0
    bad = suite.runpytest_subprocess("--routes", "eager", "--fuzz-route-weights", "mlir=2", "-p", "no:cacheprovider")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--fuzz-route-weights='mlir=2': route 'mlir' is not among --routes (eager)"])


def test_known_bucket_is_recorded_not_raised(suite, tmp_path):
    from torchsim_diff.buckets.signatures import ANY_OP, bucket_of, refined_signature, signature
    known = tmp_path / "known"
    known.mkdir()
    bucket = bucket_of(signature("double-wrong-element", "wrong_values", "", "relu", Where.output(0)))
    bucket_add = bucket_of(signature("double-wrong-element", "wrong_values", "", "add", Where.output(0)))
    # matched by the cause of each failure's own minimal case: every output is wrong, whatever the op
    cause = refined_signature("double-wrong-element", "wrong_values", ANY_OP, [])
    for b in (bucket, bucket_add):
        case = json.load(open(os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")))["case"]
        (known / f"{b}.json").write_text(json.dumps({"route": "double-wrong-element", "kind": "wrong_values",
                                                     "bucket": b, "cause": cause, "case": case}))
    result = suite.runpytest_subprocess("--routes", "double-wrong-element", "--hypothesis-profile=ci",
                                        "--known-bugs", str(known), "--report-dir", str(suite.path / "run"),
                                        "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    records = _records(suite.path / "run")
    assert records and all(r.known for r in records if r.failed)
    result.stdout.fnmatch_lines(["NEW buckets: none"])        # a known bug is not new


def test_xdist_workers_write_their_own_records_and_the_controller_merges(suite):
    report = suite.path / "run"
    suite.makepyfile(test_more=SUITE.replace("def test_fuzz", "def test_fuzz_again"))
    result = suite.runpytest_subprocess("-n", "2", "--routes", "eager", "--hypothesis-profile=ci",
                                        "--report-dir", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    files = sorted(f for f in os.listdir(report) if f.startswith("results"))
    assert files == ["results-gw0.jsonl", "results-gw1.jsonl"]
    result.stdout.fnmatch_lines(["Summary*", "eager*"])


def test_a_bug_ends_the_item_that_found_it_first_and_the_others_record_it(suite):
    # every case of either item fails in one bucket (relu's wrong element); items on two workers
    suite.makepyfile(test_suite=SUITE.replace('["relu", "add"], max_nodes=2', '["relu"], max_nodes=1'),
                     test_more=SUITE.replace('["relu", "add"], max_nodes=2', '["relu"], max_nodes=1')
                                .replace("def test_fuzz", "def test_fuzz_again"))
    report = suite.path / "run"
    result = suite.runpytest_subprocess("-n", "2", "--routes", "double-wrong-element", "--hypothesis-profile=ci",
                                        "--report-dir", str(report), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    failing = [r for r in _records(report) if r.failed]
    assert len({r.bucket for r in failing}) == 1
    per_worker = {name: sum(1 for line in open(report / name) if '"status": "fail"' in line)
                  for name in ("results-gw0.jsonl", "results-gw1.jsonl")}
    assert all(per_worker.values()), per_worker     # the item that did not raise still recorded its failures


def test_fuzz_items_draw_the_same_cases_whatever_ran_before_them_in_the_worker(tmp_path):
    # Hypothesis mines constants from every module imported so far; under xdist which tests
    # ran first in a worker varies, and CI's derandomized cases varied with it
    import subprocess
    import sys

    def case_ids(*first):
        report = tmp_path / f"run{len(first)}"
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-profile=ci",
                        *first, "fuzz", "--routes", "eager", "--fuzz-examples", "3", "--report-dir", str(report)],
                       cwd=REPO, check=True, capture_output=True)
        return [r.case_id for r in _records(report)]

    alone = case_ids()
    assert alone and alone == case_ids("tests/test_classify.py", "tests/test_judge.py")


def test_the_fuzz_items_draw_graphs_of_at_most_fuzz_max_nodes_and_the_header_says_so(tmp_path):
    import subprocess
    import sys
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "pytest", "fuzz", "-p", "no:cacheprovider", "--routes", "eager",
                           "--hypothesis-profile=torchsim-ci", "--fuzz-examples", "6", "--fuzz-max-nodes", "2",
                           "--report-dir", str(report), "-k", "pointwise or reduction"],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "(fuzz items: graph_nodes=2, --fuzz-max-nodes)" in done.stdout
    sizes = [len(r.case["nodes"]) for r in _records(report)]
    assert len(sizes) == 12 and max(sizes) == 2, sizes


NO_REDUCING = '''
import pytest
from torchsim_diff.triage import refine

def _no_reduction(*args, **kwargs):
    raise AssertionError("reduced again")

refine.reduce_case = _no_reduction
'''
OTHER_CODE = '''
refine.code_scope = lambda: "other code"
'''


def test_a_campaign_takes_the_reductions_an_earlier_one_beside_it_made_with_the_same_code(suite):
    def failures(run: str, conftest: str = "") -> list:
        suite.makeconftest(conftest)
        suite.runpytest_subprocess("--routes", "double-wrong-element", "--hypothesis-profile=ci",
                                   "--report-dir", str(suite.path / run), "-p", "no:cacheprovider")
        return [r for r in _records(suite.path / run) if r.failed]

    first = failures("first")
    assert first and all(r.reduced_case and not r.reduce_error for r in first)
    again = failures("again", NO_REDUCING)            # the same cases: each decided by the first run's reduction
    assert again and all(r.reduced_case and not r.reduce_error for r in again), [r.reduce_error for r in again]
    assert {r.bucket for r in again} == {r.bucket for r in first}
    other = failures("other", NO_REDUCING + OTHER_CODE)   # other code: nothing of the first run is taken
    assert other and all("reduced again" in (r.reduce_error or "") for r in other), [r.reduce_error for r in other]
