"""Drawing a campaign's cases: the first N distinct cases a seed gives, one at a time.

Cases come from Hypothesis with a fixed seed, generation only (no shrinking, no example
database), so the same seed and options give the same cases in every front end and in
every process, whatever modules it has imported (strategies.no_local_constants).

    >>> for_each_case(cases(dtype="float32"), seed=1, count=100, visit=run_one)
    >>> first_cases(cases(dtype="float32"), seed=1, count=10)        # a list
"""
from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.generate.strategies import no_local_constants

# Distinct draws can build the same case; duplicates are skipped, so Hypothesis may need
# more draws than there are cases.
DRAWS_PER_CASE = 4


class StopDrawing(BaseException):
    """Raised by a visitor to end the drawing early (a BaseException: Hypothesis neither
    shrinks nor replays it)."""


def for_each_case(strategy, *, seed_value: int, count: int, visit) -> int:
    """Call visit(case) on each of the first `count` distinct cases `strategy` draws with
    `seed_value`, in order, until visit raises StopDrawing; how many were visited."""
    seen: set = set()

    @seed(seed_value)
    @settings(max_examples=count * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def draw(case):
        if case.case_id in seen:
            return
        seen.add(case.case_id)
        visit(case)
        if len(seen) >= count:
            raise StopDrawing

    with no_local_constants():       # else a second campaign in one process drew other cases
        try:
            draw()
        except StopDrawing:
            pass
    return len(seen)


def first_cases(strategy, *, seed_value: int, count: int) -> list:
    """The first `count` distinct cases `strategy` draws with `seed_value`."""
    drawn: list = []
    for_each_case(strategy, seed_value=seed_value, count=count, visit=drawn.append)
    return drawn
