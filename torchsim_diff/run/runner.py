"""The one case runner: case -> route -> verdict -> record, for every front end.

`torchsim-diff fuzz` (campaign.fuzz), the pytest plugin (campaign.pytest_plugin) and Ray's
actors (campaign.ray_cluster) all run a case through `CaseRunner.run`: the route's worker
under the route's adaptive time limit (run.adaptive_timeouts, within what is left of a
budget), the verdict of the judge, and its results.jsonl record: a failure in a known bug's
bucket marked known, any other failure reduced, then bucketed (when the runner has a
reducer), and per-op error figures. The front ends only decide which cases to draw, where
records go and when to stop.

    >>> runner = CaseRunner(checker, timeouts=TimeoutPolicy(120), known=known_buckets(folder),
    ...                     reducer=ReduceThenBucket(checker))
    >>> verdict, record = runner.run(case, "inductor")
"""
from __future__ import annotations

from torchsim_diff.run.op_figures import OpFigures
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.results.record import Record
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy


class CaseRunner:
    """Runs cases on routes with one checker's warm workers (module docstring).

    checker: the run's Checker. timeouts: the run's TimeoutPolicy (default: the checker's
    timeout as ceiling). known: buckets of known bugs. reducer: reduces, then buckets, each
    new failure before its record is made (None: failures are recorded as found, e.g. when
    the front end reduces them later). budget: a campaign.budget.Budget whose end caps every
    time limit.
    """

    def __init__(self, checker, *, timeouts: TimeoutPolicy | None = None, known=frozenset(), reducer=None,
                 budget=None):
        self.checker = checker
        self.timeouts = timeouts or TimeoutPolicy(ceiling_s=checker.timeout_s)
        self.known = known
        self.reducer = reducer
        self.budget = budget
        self.op_figures = OpFigures()
        self._availability: dict = {}

    # -- which routes run ----------------------------------------------------------------
    def availability(self, route: str) -> tuple:
        """(available, reason) of `route` here, asked of its worker once per runner."""
        if route not in self._availability:
            ok, reason, *_ = self.checker.availability(route)
            self._availability[route] = (ok, reason)
        return self._availability[route]

    def unavailable(self) -> dict:
        """route -> reason, for the routes asked about so far that cannot run here."""
        return {route: reason for route, (ok, reason) in self._availability.items() if not ok}

    # -- one case ------------------------------------------------------------------------
    def run(self, case, route: str) -> tuple:
        """(verdict, record) of `case` on `route`; skipped with the reason when the route
        cannot run here."""
        ok, reason = self.availability(route)
        if not ok:
            verdict = self._skipped(case, route, reason)
            return verdict, self.record(verdict)
        verdict = self.verdict(case, route)
        return verdict, self.record(verdict)

    def run_cases(self, cases: list, route: str) -> list:
        """[(verdict, record)] of `cases` on `route`, compiled as one program when there are
        several (run.batch: verdicts stay those of solo runs)."""
        if len(cases) == 1:
            return [self.run(cases[0], route)]
        ok, reason = self.availability(route)
        if not ok:
            verdicts = [self._skipped(case, route, reason) for case in cases]
        else:
            verdicts = self._batch(cases, route)
        return [(verdict, self.record(verdict)) for verdict in verdicts]

    def verdict(self, case, route: str, *, cap=None):
        """One route run under the route's adaptive time limit (within the budget, and within
        `cap`: seconds -> seconds, a fuzz item's campaign.budget.ItemClock.cap)."""
        fresh = not self.checker.worker(route).alive()
        limit = self._capped(self.timeouts.limit(route, fresh=fresh))
        if cap is not None:
            limit = cap(limit)
        verdict = self.checker.check(case, route, timeout_s=limit)
        self.timeouts.observe(route, verdict.t_case, fresh=fresh, timed_out=verdict.kind == Kind.TIMEOUT)
        return verdict

    def verdicts(self, cases: list, route: str, *, cap=None) -> list:
        """One verdict per case, as `verdict` gives them; several cases compiled as one program
        (run.batch: a case's failure is its solo run's)."""
        if len(cases) == 1:
            return [self.verdict(cases[0], route, cap=cap)]
        return self._batch(cases, route, cap)

    def record(self, verdict, *, reduce_by: float | None = None) -> Record:
        """The verdict's record: known bug marked, new failure reduced then bucketed, per-op
        figures (measured under the route's steady time limit). reduce_by (time.time()): a
        reduction not done by then is left for later (results.record.DEFERRED)."""
        with self.checker.triage_runs():       # re-runs of this case are no fresh cases
            triaged = self._triage(verdict, reduce_by)   # first: reducing may move the verdict to another bucket
            record = verdict.record().with_fields(**triaged).known_by_minimal_case(self.known)
            steady = self._capped(self.timeouts.steady(verdict.route))
            return record.with_fields(**self.op_figures.for_verdict(self.checker, verdict, steady).fields())

    def is_known(self, verdict) -> bool:
        """A failure whose own minimal case has a known bug's cause signature (self.known: cause
        buckets, buckets.corpus.known_buckets). Never from the raw bucket: a verdict not yet
        reduced (record() reduces it) is not known."""
        return bool(verdict.failed and verdict.refined and verdict.bucket in self.known)

    # -- the parts ---------------------------------------------------------------------------
    def _triage(self, verdict, reduce_by: float | None = None) -> dict:
        """_triaged, with an error in triaging kept on this case's record (reduce_error): the
        failure stays recorded as found, and the error never surfaces in another case."""
        try:
            return self._triaged(verdict, reduce_by)
        except Exception as exc:  # noqa: BLE001 - whatever triage raised, the case's record says it
            return dict(reduce_error=f"triage failed: {type(exc).__name__}: {exc}")

    def _triaged(self, verdict, reduce_by: float | None = None) -> dict:
        """Extra record fields (name -> value): every failure is reduced, then bucketed from its
        minimal case, and is a known bug only when that cause signature is a known entry's
        (Record.known_by_minimal_case). The front end hands the runner its reducer; without
        one, failures are recorded as found and none of them is known."""
        return self.reducer.refine(verdict, stop_at=reduce_by) if self.reducer else {}

    def _batch(self, cases: list, route: str, cap=None) -> list:
        from torchsim_diff.run.batch import check_batch
        limit = self._capped(self.timeouts.limit(route, fresh=not self.checker.worker(route).alive()))
        limit = cap(limit) if cap is not None else limit
        verdicts = check_batch(self.checker, cases, route, timeout_s=limit)
        for verdict in verdicts:
            self.timeouts.observe(route, verdict.t_case, fresh=False, timed_out=verdict.kind == Kind.TIMEOUT)
        return verdicts

    def _capped(self, limit: float) -> float:
        return self.budget.cap(limit) if self.budget is not None else limit

    @staticmethod
    def _skipped(case, route: str, reason: str):
        from torchsim_diff.run.checker import Verdict
        return Verdict(case, route, Status.SKIPPED, message=reason)

