"""Broken routes (tests/route_doubles.py) run in real workers and land in the right kind."""
import pytest

from tests.conftest import make_case
from torchsim_diff.run.checker import Checker
from torchsim_diff.results.kinds import Kind, Status

pytestmark = pytest.mark.slow


@pytest.fixture
def checker(tmp_path, double_routes):
    with Checker(out_dir=str(tmp_path), timeout_s=20) as checker:
        yield checker


def with_seed(case, seed):
    from torchsim_diff.case.graph import Case
    return Case.from_dict({**case.to_dict(), "values": {"seed": seed}})


def test_eager_route_passes(checker, add_case, inout_case):
    assert checker.check(add_case, "eager").status == Status.PASS
    assert checker.check(inout_case, "eager").status == Status.PASS


def test_write_outside_the_view_is_a_guard_violation(checker, add_case):
    verdict = checker.check(add_case, "double-guard-writer")
    assert verdict.kind == Kind.GUARD_VIOLATION
    assert "outside the view" in verdict.message and "input x0" in verdict.message


def test_one_wrong_element_is_wrong_values(checker, add_case):
    verdict = checker.check(add_case, "double-wrong-element")
    assert (verdict.kind, verdict.op) == (Kind.WRONG_VALUES, "relu")
    assert "Mismatched elements: 1 / 15" in verdict.message


def test_inout_seeded_with_zeros_is_caught(checker, inout_case):
    verdict = checker.check(inout_case, "double-zero-inout")
    assert verdict.kind == Kind.GUARD_VIOLATION
    assert "must leave alone" in verdict.message and verdict.op == "copy_"


def test_inout_seeded_with_zeros_under_accumulation_is_wrong_values(checker, inout_case):
    data = inout_case.to_dict()
    data["nodes"][0]["op"] = "add_"
    from torchsim_diff.case.graph import Case
    verdict = checker.check(Case.from_dict(data), "double-zero-inout")
    assert (verdict.kind, verdict.op) == (Kind.WRONG_VALUES, "add_")


def test_a_case_run_partly_on_the_host_is_unsupported_when_right_and_fails_when_wrong(checker, add_case):
    right = checker.check(with_seed(add_case, 2), "double-host-part")
    assert (right.status, right.stage) == (Status.UNSUPPORTED, "host")
    assert "extern_kernels.mm" in right.message
    wrong = checker.check(with_seed(add_case, 1), "double-host-part")
    assert (wrong.status, wrong.kind) == (Status.FAIL, Kind.WRONG_VALUES)


def test_segfault_is_a_crash_and_the_run_goes_on(checker, add_case):
    crashed = checker.check(with_seed(add_case, 1), "double-segfault")
    assert crashed.kind == Kind.CRASH and "SIGSEGV" in crashed.message
    assert checker.check(with_seed(add_case, 2), "double-segfault").status == Status.PASS
    assert checker.workers["double-segfault"].restarts == 1


@pytest.mark.e2e
def test_hang_is_a_timeout_and_the_run_goes_on(tmp_path, double_routes, add_case):
    with Checker(out_dir=str(tmp_path), timeout_s=3) as checker:
        checker.check(with_seed(add_case, 2), "double-hang")           # warm the worker
        hung = checker.check(with_seed(add_case, 1), "double-hang")
        assert hung.kind == Kind.TIMEOUT and "within 3 s" in hung.message
        assert hung.metrics.t_run >= 3 > hung.t_harness     # the wait was the route's time
        assert checker.check(with_seed(add_case, 4), "double-hang").status == Status.PASS


def test_shutting_a_worker_down_lets_its_route_release_what_it_made(tmp_path, double_routes, add_case):
    checker = Checker(out_dir=str(tmp_path), timeout_s=20)
    assert checker.check(add_case, "double-scratch").status == Status.PASS
    scratch = list(tmp_path.glob("workers/double-scratch-*"))
    worker = checker.workers["double-scratch"].proc
    assert len(scratch) == 1
    checker.close()            # the worker exits without the interpreter's teardown: close() did it
    assert worker.returncode == 0 and not scratch[0].exists()


def test_start_up_is_not_timed_against_the_first_case(tmp_path, double_routes, add_case):
    from tests.route_doubles import SlowStartRoute
    limit = SlowStartRoute.SLOW_START_S / 2
    with Checker(out_dir=str(tmp_path), timeout_s=limit) as checker:
        first = checker.check(add_case, "double-slow-start")
        assert first.status == Status.PASS, first.message


def test_compile_error_keeps_its_message_and_buckets_by_it(checker, add_case):
    exp_case = make_case(
        nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
        inputs=[("x0", [2, 3], [3, 1], 0, 6, {})], outputs=["v0"])
    bigger = make_case(
        nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
        inputs=[("x0", [4, 5, 6], [30, 6, 1], 0, 120, {})], outputs=["v0"])
    first, second = checker.check(exp_case, "double-raising"), checker.check(bigger, "double-raising")
    assert first.kind == Kind.COMPILE_ERROR and "LoweringException" in first.message
    assert first.bucket == second.bucket                     # sizes and names are stripped
    assert checker.check(add_case, "double-raising").status == Status.PASS


def test_unavailable_route_says_why(checker, add_case):
    ok, reason, _ = checker.availability("double-unavailable")
    assert not ok and "DOUBLE_HOME" in reason
    assert checker.check(add_case, "double-unavailable").status == Status.UNSUPPORTED


def test_distinct_bugs_get_distinct_buckets_and_exception_types(checker, add_case, inout_case):
    wrong = checker.check(add_case, "double-wrong-element")
    guard = checker.check(add_case, "double-guard-writer")
    assert wrong.bucket != guard.bucket
    with pytest.raises(AssertionError) as first:
        wrong.raise_if_failed()
    with pytest.raises(AssertionError) as second:
        guard.raise_if_failed()
    assert type(first.value) is not type(second.value)


def test_failing_case_keeps_artifacts_passing_case_does_not(checker, add_case):
    import os
    passing = checker.check(add_case, "eager")
    assert not os.path.exists(passing.artifact_dir)


@pytest.mark.e2e
def test_run_to_run_differences_are_nondeterministic(tmp_path, double_routes, add_case):
    with Checker(out_dir=str(tmp_path), repeat=2) as checker:
        verdict = checker.check(add_case, "double-nondeterministic")
        assert verdict.kind == Kind.NONDETERMINISTIC and "output 0 changed" in verdict.message
        assert checker.check(add_case, "eager").status == Status.PASS
    with Checker(out_dir=str(tmp_path)) as single:
        assert single.check(add_case, "double-nondeterministic").status == Status.PASS


def test_starting_the_worker_is_start_up_time_not_harness_time(checker, add_case):
    first = checker.check(add_case, "eager")
    second = checker.check(with_seed(add_case, 2), "eager")
    assert first.metrics.t_start > 0.2 > second.metrics.t_start      # a Python with torch starts in > 0.2 s
    assert first.t_harness < first.t_case - first.metrics.t_start + 1e-9
    assert first.record().t_start == first.metrics.t_start


def test_localising_a_failure_is_diagnosis_time_not_harness_time(checker, add_case):
    verdict = checker.check(add_case, "double-wrong-element")
    assert verdict.kind == Kind.WRONG_VALUES and verdict.metrics.t_diagnose >= 0.0
    inside = sum(getattr(verdict.metrics, k) or 0.0 for k in ("t_compile", "t_run", "t_start", "t_diagnose"))
    assert verdict.t_harness == pytest.approx(max(verdict.t_case - inside, 0.0))


@pytest.mark.e2e
def test_a_failure_is_localised_once_per_bucket_in_a_run_and_never_for_a_known_bug(tmp_path, double_routes, add_case):
    first, again = with_seed(add_case, 1), with_seed(add_case, 2)
    with Checker(out_dir=str(tmp_path / "fresh"), timeout_s=20) as checker:
        verdicts = [checker.check(case, "double-wrong-element") for case in (first, again)]
    assert verdicts[0].bucket == verdicts[1].bucket
    assert [v.metrics.t_diagnose is not None for v in verdicts] == [True, False]
    # another worker of the same run (same report folder) leaves it to the first
    with Checker(out_dir=str(tmp_path / "fresh"), timeout_s=20, tag="gw1") as other:
        assert other.check(first, "double-wrong-element").metrics.t_diagnose is None
    with Checker(out_dir=str(tmp_path / "another-run"), timeout_s=20, tag="gw1") as other:
        assert other.check(first, "double-wrong-element").metrics.t_diagnose is not None
    with Checker(out_dir=str(tmp_path / "known"), timeout_s=20, known_buckets={verdicts[0].bucket}) as checker:
        assert checker.check(first, "double-wrong-element").metrics.t_diagnose is None


def test_workers_of_one_run_keep_their_artifacts_apart(tmp_path, double_routes, add_case):
    """Two xdist workers often run the same case at once (every item starts from the simplest
    case): a worker whose case passed deleted the folder the other's route was writing into."""
    with Checker(out_dir=str(tmp_path), timeout_s=20) as alone, \
            Checker(out_dir=str(tmp_path), timeout_s=20, tag="gw0") as gw0, \
            Checker(out_dir=str(tmp_path), timeout_s=20, tag="gw1") as gw1:
        folders = {c.artifact_dir("eager", add_case.case_id) for c in (alone, gw0, gw1)}
        assert len(folders) == 3 and alone.artifact_dir("eager", add_case.case_id).endswith(add_case.case_id)
        failed = gw1.check(add_case, "double-wrong-element")
        assert gw0.check(add_case, "eager").status == Status.PASS
        assert failed.artifact_dir == gw1.artifact_dir("double-wrong-element", add_case.case_id)
        assert failed.artifact_dir != gw0.artifact_dir("double-wrong-element", add_case.case_id)
