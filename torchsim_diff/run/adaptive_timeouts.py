"""Per-route timeouts that fit what each route has shown in this run.

A fixed limit is wrong both ways: 120 s per case lets a hang eat a campaign (every
shrinking step of a torch-mlir hang paid it), while a short fixed limit kills Inductor's
first compile in a fresh worker (7-16 s on a quiet 2-core machine, several times that
under load). So the limit follows the route:

    steady      max(FLOOR_S, P99_FACTOR x p99 of this route's case times), at most the ceiling
    first call  a fresh (or restarted) worker: max(steady, FIRST_CALL_FACTOR x its slowest
                first call so far); the ceiling until one has been seen

Until MIN_SAMPLES cases have finished, the steady limit is the ceiling (the user's
--timeout / --fuzz-timeout).

    >>> policy = TimeoutPolicy(ceiling_s=120)
    >>> policy.limit("inductor", fresh=True)
    120.0
"""
from __future__ import annotations

import collections
import math

FLOOR_S = 10.0
P99_FACTOR = 20.0
FIRST_CALL_FACTOR = 3.0
MIN_SAMPLES = 5
WINDOW = 500                  # the most recent case times kept per route


class TimeoutPolicy:
    """Observes case times per route and answers "how long may this call take"."""

    def __init__(self, ceiling_s: float = 120.0, floor_s: float = FLOOR_S):
        if not ceiling_s > 0:
            raise ValueError(f"ceiling_s={ceiling_s!r} must be a positive number of seconds")
        self.ceiling_s = ceiling_s
        self.floor_s = min(floor_s, ceiling_s)
        self._times: dict = collections.defaultdict(lambda: collections.deque(maxlen=WINDOW))
        self._first_calls: dict = {}

    def observe(self, route: str, seconds: float, *, fresh: bool = False, timed_out: bool = False) -> None:
        """Account for one finished call (a timed-out call teaches nothing about case times)."""
        if timed_out:
            return
        if fresh:
            self._first_calls[route] = max(self._first_calls.get(route, 0.0), seconds)
        else:
            self._times[route].append(seconds)

    def p99(self, route: str) -> float | None:
        times = sorted(self._times[route])
        if len(times) < MIN_SAMPLES:
            return None
        return times[min(len(times) - 1, math.ceil(0.99 * len(times)) - 1)]

    def steady(self, route: str) -> float:
        p99 = self.p99(route)
        if p99 is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(self.floor_s, P99_FACTOR * p99))

    def limit(self, route: str, *, fresh: bool = False) -> float:
        """Seconds allowed for the next call on `route`.

        fresh: the route's worker is not running (first call, or restarted after a crash
            or a hang), so the call pays start-up and a first compile.
        """
        steady = self.steady(route)
        if not fresh:
            return steady
        slowest_first = self._first_calls.get(route)
        if slowest_first is None:
            return self.ceiling_s
        return min(self.ceiling_s, max(steady, FIRST_CALL_FACTOR * slowest_first))
