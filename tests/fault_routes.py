"""Route doubles that let a test aim a kill at a route worker: at start-up, mid-case or
mid-reduction.

Each appends one line to the file named by DOUBLE_MARK when its set-up starts (`setup PID`)
and when it starts a case (`case PID CASE_ID`, the id the checker gives the case's artifact
folder), then sleeps (DOUBLE_SETUP_S, DOUBLE_CASE_S seconds), so a kill sent on reading the
line lands while the worker starts or runs that case. Registered like tests/route_doubles.py
(the `fault_routes` fixture in tests/test_faults.py).
"""
import os
import time

from tests.route_doubles import WrongElementRoute, _Eager
from torchsim_diff.routes.base import Route


def _mark(*words) -> None:
    path = os.environ.get("DOUBLE_MARK")
    if path:
        with open(path, "a") as handle:
            handle.write(" ".join(map(str, words)) + "\n")


def _pause(name: str) -> None:
    time.sleep(float(os.environ.get(name, "0")))


class MarkedRoute(Route):
    """Runs eager; says when it sets up and when it starts each case, then pauses."""

    name = "double-marked"
    cacheable = False        # compiled once per run, so every run of a case is marked

    def setup(self):
        _mark("setup", os.getpid())
        _pause("DOUBLE_SETUP_S")

    def compile(self, program, example_inputs, ctx):
        _mark("case", os.getpid(), os.path.basename(ctx.artifact_dir))
        _pause("DOUBLE_CASE_S")
        return _Eager(program)


class MarkedWrongRoute(MarkedRoute):
    """As double-marked, with output 0's first element off by one (every case fails)."""

    name = "double-marked-wrong"

    def compile(self, program, example_inputs, ctx):
        MarkedRoute.compile(self, program, example_inputs, ctx)
        return WrongElementRoute.compile(self, program, example_inputs, ctx)


FAULT_DOUBLES = {cls.name: f"tests.fault_routes:{cls.__name__}" for cls in (MarkedRoute, MarkedWrongRoute)}
