"""Drawing a campaign's cases: the first N distinct cases a seed gives, one at a time.

Cases come from Hypothesis with a fixed seed, generation only (no shrinking, no example
database), so the same seed and options give the same cases in every front end and in
every process, whatever modules it has imported (strategies.no_local_constants).

    >>> for_each_case(cases(dtype="float32"), seed=1, count=100, visit=run_one)
    >>> first_cases(cases(dtype="float32"), seed=1, count=10)        # a list
    >>> drawn = LazyCases(cases(dtype="float32"), seed=1, count=10**9); drawn[5]   # drawn on demand
"""
from __future__ import annotations

import queue
import threading

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.generate.strategies import no_local_constants

# Distinct draws can build the same case; duplicates are skipped, so Hypothesis may need
# more draws than there are cases.
DRAWS_PER_CASE = 4


class StopDrawing(BaseException):
    """Raised by a visitor to end the drawing early (a BaseException: Hypothesis neither
    shrinks nor replays it)."""


class _Escaped(BaseException):
    """A visitor's error carried out of Hypothesis, which would otherwise replay the case to
    see it fail again and, when it does not (the error was the harness's, not the case's),
    end the whole drawing with a FlakyFailure."""

    def __init__(self, error: Exception):
        super().__init__(error)
        self.error = error


def for_each_case(strategy, *, seed_value: int, count: int, visit) -> int:
    """Call visit(case) on each of the first `count` distinct cases `strategy` draws with
    `seed_value`, in order, until visit raises StopDrawing; how many were visited. An error
    visit raises ends the drawing and is raised as it is, never replayed by Hypothesis."""
    seen: set = set()

    @seed(seed_value)
    @settings(max_examples=count * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def draw(case):
        if case.case_id in seen:
            return
        seen.add(case.case_id)
        try:
            visit(case)
        except Exception as exc:  # noqa: BLE001 - re-raised as it is below, outside Hypothesis
            raise _Escaped(exc) from None
        if len(seen) >= count:
            raise StopDrawing

    with no_local_constants():       # else a second campaign in one process drew other cases
        try:
            draw()
        except StopDrawing:
            pass
        except _Escaped as escaped:
            raise escaped.error from None
    return len(seen)


def first_cases(strategy, *, seed_value: int, count: int) -> list:
    """The first `count` distinct cases `strategy` draws with `seed_value`."""
    drawn: list = []
    for_each_case(strategy, seed_value=seed_value, count=count, visit=drawn.append)
    return drawn


class LazyCases:
    """The same cases as first_cases, drawn on demand: `cases[k]` draws up to case k (or
    raises IndexError past the last one), so a count far beyond what a time budget allows
    costs nothing. Hypothesis runs on a thread that draws one case ahead of the reader and
    stops when `close` is called."""

    def __init__(self, strategy, *, seed_value: int, count: int):
        self._drawn: list = []
        self._next: queue.Queue = queue.Queue(maxsize=1)
        self._closed = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._draw, args=(strategy, seed_value, count), daemon=True,
                                        name="torchsim-diff-draws")
        self._thread.start()

    def __getitem__(self, position: int):
        while position >= len(self._drawn) and not self._done:
            item = self._next.get()
            if isinstance(item, BaseException):
                self._done = True
                raise item
            if item is None:
                self._done = True
            else:
                self._drawn.append(item)
        return self._drawn[position]

    def close(self) -> None:
        self._closed.set()
        while self._thread.is_alive():          # unblock a draw waiting to hand its case over
            try:
                self._next.get(timeout=0.1)
            except queue.Empty:
                pass

    def _draw(self, strategy, seed_value: int, count: int) -> None:
        def visit(case):
            while not self._closed.is_set():
                try:
                    self._next.put(case, timeout=0.1)
                    return
                except queue.Full:
                    pass
            raise StopDrawing
        try:
            for_each_case(strategy, seed_value=seed_value, count=count, visit=visit)
            self._next.put(None)
        except Exception as exc:  # noqa: BLE001 - handed to the reader, raised there
            self._next.put(exc)
