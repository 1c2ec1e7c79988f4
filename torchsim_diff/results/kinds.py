"""Failure kinds and record statuses: the words every other module agrees on.

What a kind means is stated once, in the table of `Kind`'s members: each column is a
property every other module asks (`kind.is_bug`, `kind.value_failure`, ...) instead of
keeping its own set of kinds. Records hold kinds as text; `Kind.values_where(fact)` gives
the text of the kinds for which a fact holds.

Worker-side module: imports only the standard library, so a route worker running
under another Python interpreter can use it.
"""
from __future__ import annotations

import enum

# The columns of Kind's table, in order (each is a property of the same name, documented there).
FACTS = ("is_bug", "fails_run", "reducible", "value_failure", "no_values", "localised",
         "tolerance_figures", "lost_worker", "reduces_as")


class Kind(str, enum.Enum):
    """What went wrong when a route ran a case (docs/design.md, "Failure kinds").

    Each member's row: its name in records, then one column per fact (FACTS; 1 = true).
    """

    #                     name in records       bug fail red  val  none loc  tol  lost  reduces as
    COMPILE_ERROR =      ("compile_error",      1,  1,   1,   0,   1,   0,   0,   0,    "compile_error")
    RUNTIME_ERROR =      ("runtime_error",      1,  1,   1,   0,   1,   0,   0,   0,    "runtime_error")
    CRASH =              ("crash",              1,  1,   1,   0,   1,   0,   0,   1,    "crash")
    TIMEOUT =            ("timeout",            1,  1,   1,   0,   1,   0,   0,   1,    "timeout")
    WRONG_VALUES =       ("wrong_values",       1,  1,   1,   1,   0,   1,   1,   0,    "wrong_values")
    NONFINITE_MISMATCH = ("nonfinite_mismatch", 1,  1,   1,   1,   0,   1,   0,   0,    "wrong_values")
    GUARD_VIOLATION =    ("guard_violation",    1,  1,   1,   1,   0,   1,   0,   0,    "guard_violation")
    SHAPE_MISMATCH =     ("shape_mismatch",     1,  1,   1,   1,   0,   0,   0,   0,    "shape_mismatch")
    DTYPE_MISMATCH =     ("dtype_mismatch",     1,  1,   1,   1,   0,   0,   0,   0,    "dtype_mismatch")
    NONDETERMINISTIC =   ("nondeterministic",   1,  1,   1,   1,   0,   0,   0,   0,    "nondeterministic")
    UNSUPPORTED =        ("unsupported",        0,  0,   0,   0,   0,   0,   0,   0,    "unsupported")
    INVALID_CASE =       ("invalid_case",       0,  1,   0,   0,   0,   0,   0,   0,    "invalid_case")
    TOOL_ERROR =         ("tool_error",         0,  1,   0,   0,   0,   0,   0,   0,    "tool_error")

    def __new__(cls, name: str, *facts):
        if len(facts) != len(FACTS):
            raise TypeError(f"kind {name!r}: {len(facts)} facts in its row, the table has {len(FACTS)} columns")
        member = str.__new__(cls, name)
        member._value_ = name
        member._facts = dict(zip(FACTS, facts))
        return member

    @property
    def is_bug(self) -> bool:
        """The kind indicts the route (not a coverage gap, not our generator, not our tool):
        a reproducer's repro.py exits 1 on it (2, "cannot run here", on any other failure)."""
        return bool(self._facts["is_bug"])

    @property
    def fails_run(self) -> bool:
        """A route's failure of this kind is recorded with status `fail` (a finding: `fuzz`
        exits 1 unless its bucket is a known bug's, and it gets a bucket); otherwise with
        status `unsupported` (coverage, never a finding)."""
        return bool(self._facts["fails_run"])

    @property
    def reducible(self) -> bool:
        """A new failure of this kind is reduced, then bucketed from its minimal case (and can
        land in a known bug's bucket through that minimal case)."""
        return bool(self._facts["reducible"])

    @property
    def value_failure(self) -> bool:
        """The route ran to the end and what it returned or left behind is wrong (values, NaN/Inf
        pattern, guard elements, shape, dtype, run-to-run differences): bucketed by the
        diverging op and place, and by the first divergent op and trigger once reduced, not by
        message; a torch-mlir bug of such a kind may reproduce on the host (mlir_host.py)."""
        return bool(self._facts["value_failure"])

    @property
    def no_values(self) -> bool:
        """The route gave no values to compare: the program did not compile or did not finish
        (a reproducer's title names every output, and says there is no value to compare)."""
        return bool(self._facts["no_values"])

    @property
    def localised(self) -> bool:
        """A failing case's first divergent kernel is looked for (kernel replay), once per bucket."""
        return bool(self._facts["localised"])

    @property
    def tolerance_figures(self) -> bool:
        """A failing case's error figures count in the tolerance table and the per-op figures
        (as a passing case's do)."""
        return bool(self._facts["tolerance_figures"])

    @property
    def lost_worker(self) -> bool:
        """What a worker that died or stopped answering is reported as: a reply of this kind
        may carry no times of its own, and while the worker is being stopped it is the stop's
        doing, not the route's."""
        return bool(self._facts["lost_worker"])

    @property
    def reduces_as(self) -> "Kind":
        """The kind the reducer keeps while shrinking (a NaN where the truth is finite is one
        symptom with a wrong value: log or sqrt only turn a wrong input into a NaN)."""
        return Kind(self._facts["reduces_as"])

    @classmethod
    def values_where(cls, fact: str) -> frozenset:
        """The names (as records hold them) of the kinds for which `fact` (a column of FACTS) holds."""
        if fact not in FACTS:
            raise ValueError(f"{fact!r} is not one of the kind facts {', '.join(FACTS)}")
        return frozenset(k.value for k in cls if getattr(k, fact))


class Status(str, enum.Enum):
    """Outcome of one (case, route) pair as written to results.jsonl."""

    PASS = "pass"
    FAIL = "fail"
    UNSUPPORTED = "unsupported"
    SKIPPED = "skipped"
