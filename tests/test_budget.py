"""Budgets, item clocks and adaptive timeouts: pure logic, driven by explicit clocks."""
import pytest

from torchsim_diff.campaign.budget import (CHECK_SHARE, GRACE_S, MIN_ITEM_S, Budget, BudgetSpent, ItemClock,
                                           interleaved_by_route, parse_duration)
from torchsim_diff.campaign.options import BadOption
from torchsim_diff.campaign.route_shares import RouteShares, parse_weights, share_rows, spent_by_route, starved_lines
from torchsim_diff.run.adaptive_timeouts import FLOOR_S, MIN_SAMPLES, P99_FACTOR, TimeoutPolicy


@pytest.mark.parametrize("text, seconds", [("600", 600.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "ten minutes", "-5", "0", "10d", "5 m s"])
def test_bad_durations_name_the_value_and_the_fix(text):
    with pytest.raises(ValueError, match=rf"budget={text!r} .*e\.g\. 600, 90s, 10m"):
        parse_duration(text)


def test_routes_take_turns_and_each_starts_at_another_family():
    items = [(route, family) for route in ("a", "b", "c") for family in range(4)] + [("d", 0)]
    ordered = interleaved_by_route(items, lambda item: item[0])
    assert sorted(ordered) == sorted(items)
    assert [route for route, _ in ordered[:4]] == ["a", "b", "c", "d"]         # every route in the first round
    assert [family for _, family in ordered[:3]] == [0, 1, 2]                   # route j starts at its j-th
    assert [family for route, family in ordered if route == "b"] == [1, 2, 3, 0]


@pytest.mark.e2e
def test_fuzz_items_are_collected_route_by_route_in_turn():
    import subprocess
    import sys
    from tests.conftest import REPO
    done = subprocess.run([sys.executable, "-m", "pytest", "fuzz", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--routes", "eager,inductor,triton"], capture_output=True, text=True, cwd=REPO)
    ids = [line.split("[")[1].split("-")[0] for line in done.stdout.splitlines() if line.startswith("fuzz/")]
    assert len(ids) >= 9 and ids[:6] == ["eager", "inductor", "triton"] * 2, done.stdout[-2000:]


def test_an_item_draws_for_its_allowance_from_when_it_opened_and_never_past_the_drawing_time():
    budget = Budget(100.0, start=0.0)                     # drawing until 80, then reducing and self-checking
    clock = ItemClock(budget, allowance_s=30.0, opened=10.0)
    clock.admit(now=12.0)                                 # start-up came out of its time
    clock.admit(now=39.0)
    with pytest.raises(BudgetSpent):
        clock.admit(now=40.0)
    late = ItemClock(budget, allowance_s=30.0, opened=70.0)
    late.admit(now=70.0)
    assert late.draw_until == 80.0
    assert budget.reduce_end == 100.0 - 20.0 * CHECK_SHARE


def test_a_slow_start_still_opens_the_first_case_but_a_spent_route_draws_nothing():
    slow = ItemClock(Budget(100.0, start=0.0), allowance_s=10.0, opened=0.0)
    slow.admit(now=30.0)                                  # its route's start-up took its 10 s
    slow.admit(now=30.0 + MIN_ITEM_S - 0.5)
    with pytest.raises(BudgetSpent):
        slow.admit(now=30.0 + MIN_ITEM_S)
    spent = ItemClock(Budget(100.0, start=0.0), allowance_s=0.0, opened=5.0)
    with pytest.raises(BudgetSpent):
        spent.admit(now=5.0)


def test_a_case_may_not_run_past_its_items_time_by_more_than_the_grace():
    clock = ItemClock(Budget(100.0, start=0.0), allowance_s=10.0, opened=0.0)
    clock.admit(now=2.0)                                  # drawing until 10
    assert clock.cap(120.0, now=2.0) == 10.0 + GRACE_S - 2.0   # a hang costs its route, not the run
    assert clock.cap(5.0, now=2.0) == 5.0
    assert clock.cap(120.0, now=40.0) == 1.0


NOW = 1000.0


@pytest.fixture
def fixed_clock(monkeypatch):
    from torchsim_diff.campaign import route_shares
    monkeypatch.setattr(route_shares.time, "time", lambda: NOW)


def _shares(tmp_path, **kwargs):
    return RouteShares(str(tmp_path / "shares.sqlite"), **kwargs)


def test_every_route_has_its_share_from_the_start_whatever_the_others_spend(tmp_path, fixed_clock):
    shares = _shares(tmp_path, workers=2, draw_end=NOW + 120.0, items={"a": 4, "b": 2})
    assert shares.begin("a", "a0") == 30.0                # 120 s over its 4 items
    shares.end("a0", 90.0)                                # overran by 60 s: a's own later items pay
    assert shares.begin("a", "a1") == 10.0
    assert shares.begin("b", "b0") == 60.0                # b has its whole 120 s
    shares.end("b0", 5.0)                                 # ended early: b's next item gets the rest
    assert shares.begin("b", "b1") == 115.0
    assert shares.begin("b", "b1") == 115.0               # begun again, it keeps its allowance
    assert spent_by_route(shares.path) == {"a": 100.0, "b": 120.0}


def test_a_route_that_spent_its_share_gives_its_later_items_nothing_and_weights_split_the_time(tmp_path,
                                                                                               fixed_clock):
    shares = _shares(tmp_path, workers=1, draw_end=NOW + 300.0, items={"a": 2, "b": 1}, weights={"b": 2.0})
    assert shares.begin("b", "b0") == 200.0
    assert shares.begin("a", "a0") == 50.0
    shares.end("a0", 150.0)
    assert shares.begin("a", "a1") == 0.0


def test_the_plan_is_made_by_the_first_item_to_begin_and_kept_for_every_process(tmp_path, monkeypatch):
    from torchsim_diff.campaign import route_shares
    monkeypatch.setattr(route_shares.time, "time", lambda: NOW + 40.0)    # the probe and start-up took 40 s
    first = _shares(tmp_path, workers=2, draw_end=NOW + 100.0, items={"a": 2, "b": 2})
    assert first.begin("a", "a0") == 30.0                       # 60 s x 2 workers, half of it over 2 items
    monkeypatch.setattr(route_shares.time, "time", lambda: NOW + 70.0)
    other = _shares(tmp_path, workers=2, draw_end=NOW + 100.0, items={"a": 2, "b": 2})
    assert other.begin("b", "b0") == 30.0                       # the first item's plan, not 30 s x 2 from now


def test_without_a_ledger_each_item_gets_an_even_part_of_its_routes_share(tmp_path, fixed_clock):
    blocker = tmp_path / "file"
    blocker.write_text("")
    shares = RouteShares(str(blocker / "shares.sqlite"), workers=1, draw_end=NOW + 100.0, items={"a": 4})
    assert shares.begin("a", "a0") == 25.0
    shares.end("a0", 50.0)                                # nothing to write to, and no error
    assert spent_by_route(shares.path) == {}


@pytest.mark.parametrize("text, weights", [("", {}), ("triton-spike=2", {"triton-spike": 2.0}),
                                           (" a=0.5 , b=3 ", {"a": 0.5, "b": 3.0})])
def test_route_weights(text, weights):
    assert parse_weights(text) == weights


@pytest.mark.parametrize("text", ["a", "a=", "a=0", "a=-1", "a=inf", "a=nan", "=2", "a=two"])
def test_a_bad_route_weight_names_the_part_and_the_form(text):
    with pytest.raises(BadOption, match=r"is not route=weight with a positive weight \(e\.g\. triton-spike=2\)"):
        parse_weights(text)


def _records(**cases):
    from types import SimpleNamespace
    return [SimpleNamespace(route=route) for route, n in cases.items() for _ in range(n)]


def test_the_share_table_gives_cases_and_time_and_says_why_a_route_ran_few():
    rows = share_rows(["a", "b", "c", "d", "e"], _records(a=50, b=40, c=1, d=9),
                      {"a": 100.0, "b": 100.0, "c": 100.0, "d": 10.0})
    assert rows[0] == {"route": "a", "cases": 50, "% of cases": 50, "drawing s": 100, "% of time": 32,
                       "s per case": 2.0}
    lines = starved_lines(rows)
    assert lines == ["route c ran 1 of 100 cases (1%): its cases take 100.0 s each against 2.5 s on the routes' "
                     "median, in 32% of the drawing time",
                     "route d ran 9 of 100 cases (9%): its items took 3% of the drawing time (they ended early "
                     "or began late)",
                     "route e ran 0 of 100 cases (0%): none of its items began before the drawing time ended"]


def test_budget_caps_a_timeout_at_what_is_left():
    budget = Budget(100.0, start=0.0)
    assert budget.cap(120.0, now=0.0) == 120.0
    assert budget.cap(120.0, now=95.0) < 30.0


def test_timeout_starts_at_the_ceiling_then_follows_the_route():
    policy = TimeoutPolicy(ceiling_s=120.0)
    assert policy.limit("mlir") == 120.0
    for _ in range(MIN_SAMPLES):
        policy.observe("mlir", 0.2)
    assert policy.limit("mlir") == FLOOR_S               # 20 x 0.2 s is under the floor
    for _ in range(MIN_SAMPLES * 20):
        policy.observe("inductor", 2.0)
    assert policy.limit("inductor") == P99_FACTOR * 2.0
    assert policy.limit("eager") == 120.0                # other routes learn nothing from these


def test_first_call_of_a_worker_gets_a_longer_allowance_and_a_hang_is_no_case_time():
    policy = TimeoutPolicy(ceiling_s=120.0)
    for _ in range(MIN_SAMPLES):
        policy.observe("inductor", 0.4)
    assert policy.limit("inductor", fresh=True) == 120.0          # no first call seen yet
    policy.observe("inductor", 15.0, fresh=True)
    assert policy.limit("inductor", fresh=True) == 45.0
    policy.observe("inductor", 999.0, timed_out=True)              # a hang is not a case time
    assert policy.limit("inductor") == FLOOR_S


def test_bad_ceiling_is_refused():
    with pytest.raises(ValueError, match="ceiling_s=0"):
        TimeoutPolicy(ceiling_s=0)


def test_what_the_closing_deadlines_do_not_reach_stays_as_found_and_says_why(tmp_path, double_routes):
    """Past the reductions' deadline a failure is not reduced; past the self-checks' a new
    bucket is not checked (no bundle written): each says so, and neither runs anything."""
    import json
    import time
    from tests.conftest import make_case
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.run.runner import CaseRunner
    from torchsim_diff.results.record import NOT_REACHED
    from torchsim_diff.triage.session_refinements import refine_verdicts
    from torchsim_diff.triage.self_check import OUT_OF_TIME, self_check_buckets
    case = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        failure, record = CaseRunner(checker).run(case, "double-wrong-element")
        assert failure.failed
        written = refine_verdicts(checker, [failure], str(tmp_path / "refined.jsonl"), deadline=time.time() - 1)
        checks = self_check_buckets({record.bucket: record}, str(tmp_path), checker, deadline=time.time() - 1,
                                    say=lambda line: None)
    assert written == 1
    assert json.loads((tmp_path / "refined.jsonl").read_text())["reduce_error"] == NOT_REACHED
    assert {b: (c.confirmed, c.reason) for b, c in checks.items()} == {record.bucket: (False, OUT_OF_TIME)}
    assert not (tmp_path / "bundles").exists()


def test_a_reduction_cut_by_its_items_time_is_dropped_whole_and_done_later(tmp_path, double_routes):
    """A reduction that cannot finish by stop_at (a fuzz item's time) keeps nothing half done:
    the record says DEFERRED; without a stop, the same failure is reduced and that is cleared."""
    import time
    from tests.conftest import make_case
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.results.record import DEFERRED
    from torchsim_diff.triage.refine import ReduceThenBucket
    case = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        failure = checker.check(case, "double-wrong-element")
        refiner = ReduceThenBucket(checker)
        assert refiner.refine(failure, stop_at=time.time() + 1) == {"reduce_error": DEFERRED}
        assert failure.refined is None
        fields = refiner.refine(failure, stop_at=time.time() + 600)
    assert fields["reduce_error"] is None and failure.refined
    assert len(fields["reduced_case"]["inputs"][0]["shape"]) == 0          # reduced: one element


def test_a_reductions_time_never_runs_past_its_hard_limit():
    from tests.conftest import make_case
    from torchsim_diff.triage.reduce import TimeBudget
    case = make_case([{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], [("x0", [3], [1], 0, 3, {})], ["v0"])
    now = [100.0]
    budget = TimeBudget.for_case(case, 60.0, clock=lambda: now[0], within_s=4.0)
    assert budget.deadline == budget.ceiling == 104.0
    now[0] = 103.0
    budget.progress()                            # an accepted step grants no time past the limit
    assert budget.deadline == 104.0 and not budget.late
    assert budget.run_limit(120.0) == 1.0                 # a candidate run may not hold it past the limit
    now[0] = 104.5
    assert budget.late
    unbudgeted = TimeBudget.for_case(case, None, clock=lambda: 100.0, within_s=4.0)
    assert unbudgeted.deadline == 104.0



def test_the_closing_reductions_share_the_time_so_that_some_finish(monkeypatch):
    from torchsim_diff.triage import session_refinements
    monkeypatch.setattr(session_refinements.time, "time", lambda: 1000.0)
    assert session_refinements._part_of_time_left(1021.0, reductions_left=7) == 10.5     # half the time left, not 3 s each
    assert session_refinements._part_of_time_left(1120.0, reductions_left=4) == 30.0     # the even part, where it is more
    assert session_refinements._part_of_time_left(1100.0, reductions_left=20) == 15.0    # at most GOOD_REDUCE_S above it
    assert session_refinements._part_of_time_left(999.0, reductions_left=1) == 0.0


def test_a_hangs_self_check_that_cannot_end_by_the_deadline_is_not_begun():
    import contextlib
    import time
    from tests.conftest import make_case
    from torchsim_diff.results.record import Record
    from torchsim_diff.triage.self_check import OUT_OF_TIME, _replays_fail

    class Checker:
        timeout_s, runs = 120.0, []

        def triage_runs(self):
            return contextlib.nullcontext()

        def check(self, case, route, timeout_s=None):
            self.runs.append(timeout_s)

    case = make_case([{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}], [("x0", [2], [1], 0, 2, {})], ["v0"])
    hang = Record(route="mlir", status="fail", kind="timeout", bucket="h")
    assert _replays_fail(Checker(), case, hang, 2, deadline=time.time() + 60) == OUT_OF_TIME
    assert Checker.runs == []                             # a hang's replay needs its whole 120 s limit
