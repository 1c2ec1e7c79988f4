"""Reduce a failing case to a small one that still fails in the same bucket on a route.

    >>> result = reduce_case(case, "inductor", out_dir="reports/reduce")
    >>> print(result.summary())
    >>> print(result.reduced.program_source())

Greedy reduction over passes, each proposing smaller variants of the current case in
order: drop outputs, keep only a window of the graph (one node and its producers up to two
deep, smallest windows first), drop and bypass nodes, cut a subgraph by making a node's
result a new input, simpler ops, shrink dimensions, simplify layouts towards contiguous,
simplify values and, last, raise a float16/bfloat16 case to float32 (a hang takes windows,
then layouts, first: HANG_PASSES). A pass runs until none of its candidates keeps the
bucket; after each step it goes on from the candidate it accepted, and the passes repeat
until a whole round changes nothing. Every candidate is made readable (dead nodes and unused inputs dropped,
names renumbered) and must be valid before a route sees it: its program runs on meta
tensors and in eager. Valid candidates are checked in parallel, one Checker (one warm
worker per route) per job; the earliest candidate in pass order that keeps the bucket is
accepted, so the result does not depend on timing.

Values are pinned: the reduction starts from the case with every input's values written
out bit for bit, so dropping an input leaves the others' values as they were; a node cut
out becomes an input holding the values eager computed for it (when they lie in the
domain its consumers need), and a shrunk dimension keeps the leading (or the trailing) values.

Time budget (`budget_s` is its base B; None: no time limit, only `max_runs`):
    start:    B * max(1, (nodes + inputs) / SIZE_PER_BASE) of the case as given;
    progress: each accepted step moves the deadline to at least PROGRESS_GRANT * B from now;
    ceiling:  never past CEILING_FACTOR * B after the start.
With B = 60 s a 10-node, 5-input case starts with 180 s and stops by 300 s at the latest.
A hang's B is at least HANG_BUDGET_TIMEOUTS timeouts (triage.refine.ReduceThenBucket).

Values: each input's values simplified toward the plainest its domain and its consumers allow
(triage.value_passes, whose docstring gives the ladder).

The minimal case holds every input's values explicitly, so its `values.special` changes no
bit; it is recomputed from them: true iff some float input holds NaN or an infinity.

The modules: this one (the reducer: options, the time budget, checking candidates on the
route, the pass order), triage.case_edits (candidates, validity, readability, an input's
values), triage.graph_passes (outputs, nodes, windows, cuts, ops, dimensions, layouts) and
triage.value_passes (values, precision).
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import queue
import time

import torch

from torchsim_diff.case import values
from torchsim_diff.run.checker import Checker
from torchsim_diff.case.graph import Case
from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S
from torchsim_diff.triage.case_edits import _candidate, _is_valid, _materialize, _storage_and_cover, _tidy
from torchsim_diff.triage.graph_passes import (_bypass_nodes, _canonical_ops, _cut_nodes, _drop_nodes, _drop_outputs,
                                               _keep_windows, _shrink_dims, _simplify_layouts)
from torchsim_diff.triage.value_passes import _raise_precision, _simplify_values


class ReduceError(ValueError):
    """The case cannot be reduced on that route (it does not fail there, or is invalid)."""


@dataclasses.dataclass
class ReduceResult:
    original: Case
    reduced: Case
    bucket: str
    route: str
    runs: int
    seconds: float
    # key (what the reduction keeps, as the evaluator's key reads it) -> the smallest case of each
    # failure met that was not the one reduced: a finding of its own, never switched to
    other_failures: dict = dataclasses.field(default_factory=dict)

    @property
    def size_before(self) -> tuple:
        return self.original.size()

    @property
    def size_after(self) -> tuple:
        return self.reduced.size()

    def summary(self) -> str:
        (n0, i0, e0), (n1, i1, e1) = self.size_before, self.size_after
        return (f"Reduced the case failing on {self.route} in bucket {self.bucket} from {n0} nodes, "
                f"{i0} inputs and {e0} input elements to {n1} nodes, {i1} inputs and {e1} input "
                f"elements in {self.runs} route runs and {self.seconds:.1f} s.")


def reduce_case(case: Case, route: str, *, out_dir: str, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                max_runs: int = 2000, progress=None, checkers: list | None = None, key=None,
                budget_s: float | None = None, within_s: float | None = None,
                run_limit_s: float | None = None) -> ReduceResult:
    """Shrink `case` while it keeps failing on `route` in its original bucket.

    jobs: parallel Checkers (default: the number of cores). max_runs: route runs allowed
    before stopping with the smallest case so far. progress: called with one line per
    accepted step. budget_s: the base of the time budget (module docstring); within_s: a hard
    limit on top of it (a campaign item's time left). run_limit_s: each candidate's run limit,
    where it is below its checker's (a hang's: the limit it was found under, so that a candidate
    that keeps hanging costs that, not the checker's whole timeout). checkers, key:
    see _Evaluator (reduce, then bucket passes the campaign's warm Checker and
    signatures.reduction_key).
    """
    jobs = _check_options(jobs, max_runs)
    started = time.perf_counter()
    budget = TimeBudget.for_case(case, budget_s, within_s=within_s)
    with _Evaluator(route, out_dir=out_dir, jobs=jobs, timeout_s=timeout_s, max_runs=max_runs,
                    checkers=checkers, key=key, budget=budget, run_limit_s=run_limit_s) as evaluator:
        bucket = evaluator.bucket_of_original(case)
        reducer = _Reducer(evaluator, bucket, progress or (lambda line: None))
        reduced = _settled(reducer.run(reducer.pinned(case)))
        runs = evaluator.runs
    return ReduceResult(case, reduced, bucket, route, runs, time.perf_counter() - started, evaluator.others)


def _check_options(jobs, max_runs) -> int:
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be a positive integer (or None for one per core)")
    if not isinstance(max_runs, int) or max_runs < 1:
        raise ValueError(f"max_runs={max_runs!r} must be a positive integer")
    return jobs


# -- the time budget (module docstring) -------------------------------------------------------
SIZE_PER_BASE = 5        # nodes + inputs the base budget covers
PROGRESS_GRANT = 0.5     # share of the base an accepted step guarantees from then on
CEILING_FACTOR = 5       # the hard ceiling, in bases
MIN_RUN_S = 1.0          # a candidate's run limit near the ceiling: below it no run could finish


@dataclasses.dataclass
class TimeBudget:
    """When the search stops: a deadline that grows with the case and with progress, under a ceiling."""

    deadline: float | None
    ceiling: float | None
    grant: float
    clock: object = time.perf_counter

    @classmethod
    def for_case(cls, case: Case, base_s: float | None, clock=time.perf_counter,
                 within_s: float | None = None) -> "TimeBudget":
        """The budget of base `base_s` (None: no limit) for `case`, never past `within_s` from now."""
        now = clock()
        if not base_s:
            hard = None if within_s is None else now + within_s
            return cls(hard, hard, 0.0, clock)
        nodes, inputs, _ = case.size()
        ceiling = now + base_s * CEILING_FACTOR
        if within_s is not None:
            ceiling = min(ceiling, now + within_s)
        start = base_s * max(1.0, (nodes + inputs) / SIZE_PER_BASE)
        return cls(min(now + start, ceiling), ceiling, base_s * PROGRESS_GRANT, clock)

    @property
    def late(self) -> bool:
        return self.deadline is not None and self.clock() > self.deadline

    def run_limit(self, usual_s: float) -> float:
        """A candidate's run limit: `usual_s` (its checker's), but not past the ceiling, so that
        one hanging candidate cannot hold the search past it."""
        if self.ceiling is None:
            return usual_s
        return min(usual_s, max(MIN_RUN_S, self.ceiling - self.clock()))

    def progress(self) -> None:
        """A step was accepted: at least `grant` seconds more, within the ceiling."""
        if self.deadline is not None:
            self.deadline = min(max(self.deadline, self.clock() + self.grant), self.ceiling)


# -- checking candidates on the route ------------------------------------------------------
class _Evaluator:
    """Buckets of cases on one route, with one Checker per parallel job and a cache."""

    def __init__(self, route: str, *, out_dir: str, jobs: int, timeout_s: float, max_runs: int,
                 checkers: list | None = None, key=None, budget: TimeBudget | None = None,
                 run_limit_s: float | None = None):
        """checkers: warm Checkers to borrow (not closed here) instead of starting `jobs` new
        ones. key: verdict -> what must stay the same (default: its bucket). budget: when
        the search stops with the smallest case so far (default: no time limit). run_limit_s:
        a candidate's run limit where it is below its checker's."""
        self.route, self.max_runs = route, max_runs
        self.run_limit_s = run_limit_s
        self.key = key or (lambda verdict: verdict.bucket)
        self.budget = budget or TimeBudget(None, None, 0.0)
        self.runs = 0
        self.original_kind: Kind | None = None
        self.cache: dict = {}
        self.others: dict = {}     # another failure's key -> the smallest case that failed so
        self.checkers: queue.Queue = queue.Queue()
        self.owned = not checkers
        for job, checker in enumerate(checkers or []):
            self.checkers.put(checker)
        for job in range(jobs if self.owned else 0):
            self.checkers.put(Checker(out_dir=os.path.join(out_dir, f"job{job}"), timeout_s=timeout_s,
                                      tag=f"reduce{job}"))
        self.jobs = self.checkers.qsize()
        self.every_checker = list(self.checkers.queue)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if interrupted:
            # Ctrl-C: the candidates in flight are not waited for (a hang would hold the
            # interrupt for its whole time limit), and the run's checkers, borrowed ones too,
            # run nothing more
            for checker in self.every_checker:
                checker.stop()
        self.pool.shutdown(wait=not interrupted, cancel_futures=interrupted)
        while self.owned and not self.checkers.empty():
            self.checkers.get().close()

    @property
    def exhausted(self) -> bool:
        return self.budget.late or self.runs >= self.max_runs

    def bucket_of_original(self, case: Case) -> str:
        self.runs += 1
        verdict = self._check(case)
        if not verdict.failed:
            raise ReduceError(f"the case does not fail on route {self.route!r} (status {verdict.status.value}); "
                              "only failing cases can be reduced")
        self.original_kind = Kind(verdict.kind)
        return self.key(verdict)

    def first_keeping(self, candidates: list, bucket: str):
        """The earliest candidate whose bucket is `bucket`, or None."""
        todo = [c for c in candidates if c.case_id not in self.cache][: self.max_runs - self.runs]
        self.runs += len(todo)
        for case, verdict in zip(todo, self.pool.map(self._check, todo)):
            self.cache[case.case_id] = key = self.key(verdict)
            if key is not None and key != bucket and (key not in self.others or case.size() < self.others[key].size()):
                self.others[key] = case
        for case in candidates:
            if self.cache.get(case.case_id) == bucket:
                return case
        return None

    def _check(self, case: Case):
        checker = self.checkers.get()
        try:
            usual_s = checker.timeout_s if self.run_limit_s is None else min(checker.timeout_s, self.run_limit_s)
            return checker.check(case, self.route, timeout_s=self.budget.run_limit(usual_s))
        finally:
            self.checkers.put(checker)


class _Reducer:
    """The passes in order, each applied until none of its candidates keeps the bucket."""

    def __init__(self, evaluator: _Evaluator, bucket: str, progress):
        self.evaluator, self.bucket, self.progress = evaluator, bucket, progress

    def pinned(self, case: Case) -> Case:
        """`case` with its values written out (module docstring), when that keeps the bucket.
        A hang's is taken unchecked: pinning changes no bit, and the check would cost a whole
        timeout of a budget of two."""
        pinned = _pinned(case)
        if pinned.case_id == case.case_id:
            return case
        if self.evaluator.original_kind == Kind.TIMEOUT:
            return pinned
        return case if self.evaluator.first_keeping([pinned], self.bucket) is None else pinned

    def run(self, case: Case) -> Case:
        current = case
        passes = HANG_PASSES if self.evaluator.original_kind == Kind.TIMEOUT else PASSES
        changed = True
        while changed and not self.evaluator.exhausted:
            changed = False
            for make in passes:
                current, accepted = self._run_pass(make, current)
                changed |= accepted
        current, _ = self._run_pass(_raise_precision, current)
        return current

    def _run_pass(self, make, current: Case):
        """Apply one pass until none of its candidates keeps the bucket. After a step the pass
        goes on from the candidate it accepted: those before it were just refused (the next
        round of passes tries them again)."""
        accepted, start = False, 0
        while not self.evaluator.exhausted:
            found = self._first_keeping(_valid_candidates(make(current), current, start))
            if found is None:
                break
            start, new = found
            start = 0 if make is _keep_windows else start      # windows come smallest first: look again
            current, accepted = self._accept(make, current, new), True
        return current, accepted

    def _first_keeping(self, numbered):
        """The earliest (position, candidate) that keeps the bucket, checked `jobs` at a time."""
        batch = []
        for pair in numbered:
            batch.append(pair)
            if len(batch) == self.evaluator.jobs:
                found = self._keeping_in(batch)
                if found is not None or self.evaluator.exhausted:
                    return found
                batch = []
        return self._keeping_in(batch) if batch else None

    def _keeping_in(self, batch: list):
        found = self.evaluator.first_keeping([case for _, case in batch], self.bucket)
        return next((pair for pair in batch if pair[1] is found), None)

    def _accept(self, make, old: Case, new: Case) -> Case:
        self.evaluator.budget.progress()
        self.progress(f"{make.__name__.strip('_').replace('_', ' ')}: {old.size()} -> {new.size()} "
                      f"after {self.evaluator.runs} runs")
        return new


def _valid_candidates(raw, current: Case, start: int = 0):
    """(position in `raw`, candidate) for each distinct valid candidate from position `start` on."""
    seen = {current.case_id}
    for position, candidate in enumerate(raw):
        if position < start:
            continue
        candidate = _tidy(candidate) if candidate is not None else None
        if candidate is None or candidate.case_id in seen or not _is_valid(candidate):
            continue
        seen.add(candidate.case_id)
        yield position, candidate



def _pinned(case: Case) -> Case:
    """`case` with every input's values written out, bit for bit as drawn."""
    data = case.to_dict()
    for k, spec in enumerate(data["inputs"]):
        if "data" not in spec:
            spec["data"] = values.encode(_storage_and_cover(case, k)[0])
    return _candidate(data) or case


def _settled(case: Case) -> Case:
    """The minimal case as stored: every input's values explicit, and `special` true iff a
    float input holds NaN or an infinity (the flag only steers drawn values: no bit changes)."""
    pinned = _pinned(case)
    data = pinned.to_dict()
    data["values"] = {**data["values"], "special": _holds_nonfinite(pinned)}
    return _candidate(data) or pinned


def _holds_nonfinite(case: Case) -> bool:
    views = (_materialize(case, k) for k in range(len(case.inputs)))
    return any(v.dtype.is_floating_point and not bool(torch.isfinite(v).all()) for v in views)


# -- pass order -------------------------------------------------------------------------------
PASSES = (_drop_outputs, _keep_windows, _drop_nodes, _bypass_nodes, _cut_nodes, _canonical_ops,
          _shrink_dims, _simplify_layouts, _simplify_values)
# A hang turns the costs around: a candidate that keeps it costs a whole timeout, one that
# does not a normal run. So the pass that cuts most per accepted step, one node's window
# alone, comes first; dropping outputs one at a time would pay a timeout per output. Layouts
# come next: a hang is not ablated, so a layout its minimal case keeps names its bucket
# (signatures.hang_signature), and a budget spent on nodes first would split one hang in two.
HANG_PASSES = (_keep_windows, _simplify_layouts) + tuple(
    p for p in PASSES if p not in (_keep_windows, _simplify_layouts))


DEFAULT_BUDGET_S = 60.0     # the base of a campaign reduction's time budget (ReduceThenBucket)
