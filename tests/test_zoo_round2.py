"""Bug zoo, round 2: each planted bug fails on its trigger case, which eager passes, and needs
that trigger: the same op without it, and a plain contiguous add of positive values, pass."""
import pytest

from benchmarks.bug_zoo import planted, round2
from tests.conftest import make_case
from torchsim_diff.results.kinds import Status
from torchsim_diff.routes import EXTRA_ROUTES_ENV
from torchsim_diff.run.checker import Checker

NAMES = [cls.name for cls in round2.ROUND2]
CLASSES = ("argument", "value", "operand-form", "view")


@pytest.fixture(scope="module")
def zoo_checker(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        for key, value in planted.environment().items():
            patch.setenv(key, value)
        with Checker(out_dir=str(tmp_path_factory.mktemp("zoo2"))) as checker:
            yield checker


def _plain_add():
    return make_case([{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}],
                     [("x0", [2, 3], [3, 1], 0, 6, {"domain": {"kind": "positive"}}),
                      ("x1", [2, 3], [3, 1], 0, 6, {"domain": {"kind": "positive"}})], ["v0"])


def test_round_two_has_at_least_ten_bugs_each_with_a_trigger_and_a_near_miss():
    assert len(NAMES) >= 10 and len(set(NAMES)) == len(NAMES)
    assert not set(NAMES) & {cls.name for cls in planted.ZOO}
    assert set(round2.trigger_cases()) == set(round2.near_miss_cases()) == set(NAMES)


def test_every_bug_class_has_at_least_two_bugs():
    counts = {c: sum(cls.bug_class == c for cls in round2.ROUND2) for c in CLASSES}
    assert all(n >= 2 for n in counts.values()) and sum(counts.values()) == len(NAMES), counts


def test_planted_environment_registers_round_two():
    routes = planted.environment()[EXTRA_ROUTES_ENV]
    assert all(f"{name}=benchmarks.bug_zoo.round2:" in routes for name in NAMES)


def test_a_near_miss_keeps_the_trigger_cases_op():
    triggers, misses = round2.trigger_cases(), round2.near_miss_cases()
    same_op = [n for n in NAMES if triggers[n].ops == misses[n].ops]
    assert len(same_op) >= len(NAMES) - 1, sorted(set(NAMES) - set(same_op))


@pytest.mark.bench
@pytest.mark.parametrize("name", NAMES)
def test_the_trigger_case_fails_on_its_route_with_wrong_values_and_passes_on_eager(zoo_checker, name):
    case = round2.trigger_cases()[name]
    verdict = zoo_checker.check(case, name)
    assert verdict.failed and verdict.kind.value_failure, (verdict.status, verdict.kind, verdict.message)
    eager = zoo_checker.check(case, "eager")
    assert eager.status == Status.PASS, (eager.kind, eager.message)


@pytest.mark.bench
@pytest.mark.parametrize("name", NAMES)
def test_without_its_trigger_the_bug_does_not_fire(zoo_checker, name):
    for case in (round2.near_miss_cases()[name], _plain_add()):
        verdict = zoo_checker.check(case, name)
        assert verdict.status == Status.PASS, (case.program_source(), verdict.kind, verdict.message)
