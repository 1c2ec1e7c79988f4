"""Failure kinds and record statuses: the words every other module agrees on.

Worker-side module: imports only the standard library, so a route worker running
under another Python interpreter can use it.
"""
from __future__ import annotations

import enum


class Kind(str, enum.Enum):
    """What went wrong when a route ran a case (DESIGN.md, "Failure kinds")."""

    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    WRONG_VALUES = "wrong_values"
    NONFINITE_MISMATCH = "nonfinite_mismatch"
    GUARD_VIOLATION = "guard_violation"
    SHAPE_MISMATCH = "shape_mismatch"
    DTYPE_MISMATCH = "dtype_mismatch"
    NONDETERMINISTIC = "nondeterministic"
    UNSUPPORTED = "unsupported"
    INVALID_CASE = "invalid_case"
    TOOL_ERROR = "tool_error"

    @property
    def is_bug(self) -> bool:
        """True for kinds that indict the route (not coverage gaps, not our generator)."""
        return self not in (Kind.UNSUPPORTED, Kind.INVALID_CASE, Kind.TOOL_ERROR)


class Status(str, enum.Enum):
    """Outcome of one (case, route) pair as written to results.jsonl."""

    PASS = "pass"
    FAIL = "fail"
    UNSUPPORTED = "unsupported"
    SKIPPED = "skipped"
