"""A campaign's time budget: when to stop drawing cases, and how long shrinking may go on.

The budget is wall-clock time (`time.time()`), so a pytest-xdist controller can hand its
deadlines to every worker. It splits in two: drawing new cases gets the first
1 - SHRINK_SHARE of it, shrinking what failed gets the rest (and may start earlier, for
items that fail early, but never runs past the end).

    >>> Budget.parse("10m").total_s
    600.0

Within a fuzz item (`ItemClock`), `admit()` says whether the next new case runs:
True (run it), False (skip it quietly: the item is shrinking and its share is spent) or
raises BudgetSpent (stop drawing: the item ends here and counts as passed).
"""
from __future__ import annotations

import itertools
import math
import re
import time

SHRINK_SHARE = 0.2
MIN_ITEM_S = 5.0               # an item's first case before the drawing deadline opens at least this
GRACE_S = 20.0                 # a case started just before the end may still finish
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


class BudgetSpent(BaseException):
    """Raised through Hypothesis (a BaseException: no shrinking, no replay) when a fuzz item
    must stop drawing cases; the item then ends as passed."""


def parse_duration(text) -> float:
    """Seconds from "600", "600s", "10m", "1.5h"."""
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"budget={text!r} is not a duration; use seconds or a unit, e.g. 600, 90s, 10m, 1h")
    return float(match.group(1)) * _UNITS[match.group(2)]


class Budget:
    """total_s seconds from `start` (time.time()); see the module docstring."""

    def __init__(self, total_s: float, start: float | None = None, shrink_share: float = SHRINK_SHARE):
        self.total_s = float(total_s)
        self.start = time.time() if start is None else start
        self.shrink_share = shrink_share

    @classmethod
    def parse(cls, text, start: float | None = None) -> "Budget":
        return cls(parse_duration(text), start)

    @property
    def end(self) -> float:
        return self.start + self.total_s

    @property
    def draw_end(self) -> float:
        return self.start + self.total_s * (1.0 - self.shrink_share)

    @property
    def shrink_s(self) -> float:
        return self.total_s * self.shrink_share

    def left(self, now: float | None = None) -> float:
        return max(0.0, self.end - (time.time() if now is None else now))

    def cap(self, seconds: float, now: float | None = None) -> float:
        """`seconds`, but not past the end (plus a grace for the case in flight)."""
        return max(1.0, min(seconds, self.left(now) + GRACE_S))

    def to_dict(self) -> dict:
        return {"total_s": self.total_s, "start": self.start, "shrink_share": self.shrink_share}

    @classmethod
    def from_dict(cls, data: dict) -> "Budget":
        return cls(data["total_s"], data["start"], data["shrink_share"])


def interleaved_by_route(items: list, route_of) -> list:
    """`items` reordered so that routes take turns: one item of each route, then the next of
    each, and so on. xdist hands items out in this order and ItemClock plans each worker's slots
    by it, so under a budget a route listed last no longer waits for every item of the others
    (nor gets nothing when they overrun). Route j's own items start at its j-th, so the items
    that come last, and are cut first, are not the same family on every route."""
    queues: dict = {}
    for item in items:
        queues.setdefault(route_of(item), []).append(item)
    rotated = [queue[j % len(queue):] + queue[:j % len(queue)] for j, queue in enumerate(queues.values())]
    gap = object()
    return [item for turn in itertools.zip_longest(*rotated, fillvalue=gap) for item in turn if item is not gap]


class ItemClock:
    """One fuzz item's share of the budget.

    Items run one after another on each of `workers` processes; the k-th item a process
    runs should stop drawing by start + (k + 1) x (drawing time x workers / items), so an
    item that ends early (its profile's max_examples reached) leaves its time to the next.
    A failing item may then shrink for up to its share of the shrinking time.
    """

    def __init__(self, budget: Budget, *, items: int, workers: int, done_here: int):
        self.budget = budget
        slot = (budget.draw_end - budget.start) * max(1, workers) / max(1, items)
        self.planned = budget.start + (done_here + 1) * slot
        self.shrink_allowance = max(budget.shrink_s / 2, slot)
        self.draw_until: float | None = None       # set by the first case (after the route's start-up)
        self.shrink_until: float | None = None
        self.steps_left: float = math.inf

    def _start(self, now: float) -> None:
        if self.draw_until is None:
            self.draw_until = min(self.budget.draw_end, max(self.planned, now + MIN_ITEM_S))

    def failed(self, capped_steps: int | None = None, now: float | None = None) -> None:
        """The item raised a finding: from now on it is shrinking (at most capped_steps new runs)."""
        now = time.time() if now is None else now
        if self.shrink_until is None:
            self.shrink_until = min(self.budget.end, now + self.shrink_allowance)
        if capped_steps is not None:
            self.steps_left = min(self.steps_left, capped_steps)

    @property
    def shrinking(self) -> bool:
        return self.shrink_until is not None

    def admit(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        self._start(now)
        if not self.shrinking:
            if now >= self.draw_until:
                raise BudgetSpent
            return True
        if now >= self.shrink_until or self.steps_left <= 0:
            return False
        self.steps_left -= 1
        return True


def budget_seconds(text) -> float:
    """parse_duration for argparse: a bad value becomes a usage error naming it."""
    import argparse
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
