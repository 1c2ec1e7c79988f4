"""A campaign's time budget: when to stop drawing cases, and when to stop shrinking them.

The budget is wall-clock time (`time.time()`), so a pytest-xdist controller can hand its
deadlines to every worker. Drawing new cases gets the first 1 - SHRINK_SHARE of it; the rest
closes the run: the reducer shrinks each new failure until `reduce_end`, and the new buckets
are self-checked in the last CHECK_SHARE of that closing time.

    >>> Budget.parse("10m").total_s
    600.0

Within a fuzz item (`ItemClock`), `admit()` returns when the next new case may run and
raises BudgetSpent when the item must stop drawing (it ends there and counts as passed).
A campaign under a budget does not shrink inside its items: Hypothesis's shrinking is off
there, and the campaign's reducer shrinks every failure in the closing share.
"""
from __future__ import annotations

import itertools
import re
import time

SHRINK_SHARE = 0.2
CHECK_SHARE = 0.4              # of the closing time, kept for self-checking the new buckets
MIN_ITEM_S = 5.0               # an item's first case before the drawing deadline opens at least this
GRACE_S = 20.0                 # a case started just before the end may still finish
# A campaign is a night or a week-end; a longer budget is a typo, and an endless one (400
# nines read as inf) ends the progress thread on its first sum.
MAX_BUDGET_S = 30 * 86400.0
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")


class BudgetSpent(BaseException):
    """Raised through Hypothesis (a BaseException: no shrinking, no replay) when a fuzz item
    must stop drawing cases; the item then ends as passed."""


def parse_duration(text) -> float:
    """Seconds from "600", "600s", "10m", "1.5h": more than 0, at most MAX_BUDGET_S."""
    match = _DURATION.match(str(text))
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"budget={_shown(text)} is not a duration; use seconds or a unit, e.g. 600, 90s, 10m, 1h")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds > MAX_BUDGET_S:
        raise ValueError(f"budget={_shown(text)} is over 30 days; pass at most {MAX_BUDGET_S / 3600:.0f}h")
    return seconds


def _shown(text, limit: int = 40) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


class Budget:
    """total_s seconds from `start` (time.time()); see the module docstring."""

    def __init__(self, total_s: float, start: float | None = None, shrink_share: float | None = None):
        self.total_s = float(total_s)
        self.start = time.time() if start is None else start
        self.shrink_share = SHRINK_SHARE if shrink_share is None else shrink_share

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

    @property
    def reduce_end(self) -> float:
        return self.end - self.shrink_s * CHECK_SHARE

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
    """One fuzz item's drawing time: `allowance_s` seconds (its route's share divided among
    its items, campaign.route_shares) from when the item was set up, `opened`.

    The route's start-up comes out of that time, but the first case always opens at least
    MIN_ITEM_S seconds, so an item whose route starts slowly still draws; an item whose route
    has nothing left (allowance 0) draws nothing. No item draws past the budget's drawing time.
    """

    def __init__(self, budget: Budget, *, allowance_s: float, opened: float | None = None):
        self.budget = budget
        self.allowance_s = allowance_s
        self.opened = time.time() if opened is None else opened
        self.draw_until: float | None = None       # set by the first case (after the route's start-up)

    def admit(self, now: float | None = None) -> None:
        """Return if the next new case may run; raise BudgetSpent if the item must stop drawing."""
        now = time.time() if now is None else now
        if self.draw_until is None:
            floor = now + MIN_ITEM_S if self.allowance_s > 0 else now
            self.draw_until = min(self.budget.draw_end, max(self.opened + self.allowance_s, floor))
        if now >= self.draw_until:
            raise BudgetSpent

    def cap(self, seconds: float, now: float | None = None) -> float:
        """A case's time limit: `seconds`, but not more than GRACE_S past the item's drawing
        time, so that a hang costs its route a little time, not the run its budget."""
        now = time.time() if now is None else now
        end = self.draw_until if self.draw_until is not None else self.budget.draw_end
        return max(1.0, min(seconds, end + GRACE_S - now))


def budget_seconds(text) -> float:
    """parse_duration for argparse: a bad value becomes a usage error naming it."""
    import argparse
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
