"""Budgets, item clocks and adaptive timeouts: pure logic, driven by explicit clocks."""
import pytest

from torchsim_diff.campaign.budget import Budget, BudgetSpent, ItemClock, interleaved_by_route, parse_duration
from torchsim_diff.run.adaptive_timeouts import FLOOR_S, MIN_SAMPLES, P99_FACTOR, SHRINK_TIMEOUT_STEPS, TimeoutPolicy


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


def test_fuzz_items_are_collected_route_by_route_in_turn():
    import subprocess
    import sys
    from tests.conftest import REPO
    done = subprocess.run([sys.executable, "-m", "pytest", "fuzz", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "--routes", "eager,inductor,triton"], capture_output=True, text=True, cwd=REPO)
    ids = [line.split("[")[1].split("-")[0] for line in done.stdout.splitlines() if line.startswith("fuzz/")]
    assert len(ids) >= 9 and ids[:6] == ["eager", "inductor", "triton"] * 2, done.stdout[-2000:]


def test_items_share_the_drawing_time_and_stop_with_budget_spent():
    budget = Budget(100.0, start=0.0)                     # drawing until 80, shrinking until 100
    first = ItemClock(budget, items=4, workers=2, done_here=0)
    assert first.admit(now=0.0) is True
    assert first.admit(now=39.0) is True
    with pytest.raises(BudgetSpent):
        first.admit(now=40.0)
    second = ItemClock(budget, items=4, workers=2, done_here=1)
    second.admit(now=40.0)
    assert second.draw_until == 80.0
    late = ItemClock(budget, items=4, workers=2, done_here=2)
    with pytest.raises(BudgetSpent):
        late.admit(now=90.0)


def test_an_item_that_ends_early_leaves_its_time_to_the_next():
    budget = Budget(100.0, start=0.0)
    clock = ItemClock(budget, items=4, workers=1, done_here=1)     # the first took 5 s of its 20
    clock.admit(now=5.0)
    assert clock.draw_until == 40.0


def test_the_route_start_up_does_not_eat_an_item_whose_first_case_comes_late():
    clock = ItemClock(Budget(100.0, start=0.0), items=4, workers=1, done_here=0)    # its slot ends at 20
    assert clock.admit(now=30.0) is True                  # the first case opens MIN_ITEM_S seconds
    assert clock.admit(now=34.0) is True
    with pytest.raises(BudgetSpent):
        clock.admit(now=35.0)


def test_a_failing_item_shrinks_past_its_drawing_time_but_not_past_the_end():
    budget = Budget(100.0, start=0.0)
    clock = ItemClock(budget, items=1, workers=1, done_here=0)
    clock.admit(now=0.0)
    clock.failed(now=79.0)
    assert clock.admit(now=85.0) is True                  # shrinking: no BudgetSpent
    assert clock.admit(now=100.0) is False                # the end: cases pass unrun


def test_shrinking_a_hang_is_capped_in_steps():
    clock = ItemClock(Budget(1000.0, start=0.0), items=1, workers=1, done_here=0)
    clock.failed(SHRINK_TIMEOUT_STEPS, now=1.0)
    admitted = [clock.admit(now=2.0) for _ in range(SHRINK_TIMEOUT_STEPS + 3)]
    assert admitted == [True] * SHRINK_TIMEOUT_STEPS + [False] * 3


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


def test_first_call_of_a_worker_gets_a_longer_allowance_and_a_hang_being_shrunk_does_not():
    policy = TimeoutPolicy(ceiling_s=120.0)
    for _ in range(MIN_SAMPLES):
        policy.observe("inductor", 0.4)
    assert policy.limit("inductor", fresh=True) == 120.0          # no first call seen yet
    policy.observe("inductor", 15.0, fresh=True)
    assert policy.limit("inductor", fresh=True) == 45.0
    assert policy.limit("inductor", fresh=True, shrinking_timeout=True) == FLOOR_S
    policy.observe("inductor", 999.0, timed_out=True)              # a hang is not a case time
    assert policy.limit("inductor") == FLOOR_S


def test_bad_ceiling_is_refused():
    with pytest.raises(ValueError, match="ceiling_s=0"):
        TimeoutPolicy(ceiling_s=0)
