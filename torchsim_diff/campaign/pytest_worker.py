"""The pytest plugin's worker side: the state and hooks of a process that runs fuzz items (an
xdist worker, or the one process of a run without xdist), as pytest-xdist's remote.py is.

A WorkerSession holds the options, the lazily started Checker, the case runner and this
process's results writer; fuzz tests call its `check(case, route)`. Its hooks time each item
under a budget, tell a campaign's finding in a few lines, and at the session's end reduce this
process's own new failures (triage.session_refinements.refine_verdicts) before the controller buckets them.
The controller's part (campaign.pytest_controller.FuzzSession) adds the header, the live
progress and the merged report.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import os
import random
import re
import sys
import time
import zlib

import pytest
from hypothesis import Phase, settings

from torchsim_diff.campaign.budget import Budget, BudgetSpent, ItemClock, interleaved_by_route
from torchsim_diff.campaign.route_shares import RouteShares, parse_batches, parse_weights
from torchsim_diff.campaign.progress import choose_mode
from torchsim_diff.results.record import DEFERRED
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy
from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.buckets.signatures import Finding

DEFAULT_ROUTES = "eager,inductor"
DEFAULT_PROFILE = "torchsim-default"
# Under a budget, cases a route compiles as one program (run.batch). Inductor's C++ build costs
# about a second whatever the program holds: 4 cases a program ran 1.34x the cases per second.
# Triton's interpreter gained nothing in wall time, so it runs one at a time.
DEFAULT_BATCHES = "inductor=4"
BUDGETED_EXAMPLES = 10 ** 9     # an item's examples under a budget without --fuzz-examples: the budget ends it


class WorkerSession:
    """Per-process state: options, the lazily started Checker and the results writer; the hooks
    of a process that runs fuzz items."""

    def __init__(self, config):
        self.config = config
        opt = config.getoption
        worker_input = getattr(config, "workerinput", None)
        self.worker_id = worker_input["workerid"] if worker_input else "main"
        self.explicit_routes = opt("--routes") is not None
        self.verbose = config.option.verbose           # as asked: progress may raise it (pytest_configure)
        self.routes = [r for r in (opt("--routes") or DEFAULT_ROUTES).split(",") if r]
        self.dtypes = [d for d in opt("--fuzz-dtypes").split(",") if d]
        self.shards = max(1, opt("--fuzz-shards"))
        self.examples = opt("--fuzz-examples")
        self.max_nodes = opt("--fuzz-max-nodes")          # None: the policy's graph_nodes
        self.timeout_s = opt("--fuzz-timeout")
        self.timeouts = TimeoutPolicy(ceiling_s=self.timeout_s)
        if worker_input and "torchsim_report_dir" in worker_input:
            self.report_dir, self.base_seed = worker_input["torchsim_report_dir"], worker_input["torchsim_seed"]
            self.budget = Budget.from_dict(worker_input["torchsim_budget"]) if worker_input["torchsim_budget"] else None
            self._runnable = worker_input.get("torchsim_routes")
        else:
            self.report_dir = opt("--report-dir") or os.path.join("reports", time.strftime("pytest-%Y%m%d-%H%M%S"))
            self.base_seed = self._choose_seed(opt("--fuzz-seed"))
            self.budget = _budget_option(opt("--fuzz-budget"))
            self._runnable = None
        self.progress_mode = _progress_mode(config) if worker_input is None else "off"
        self.workers = worker_input.get("workercount", 1) if worker_input else 1
        self.known_folder = opt("--known-bugs") or default_ledger(str(config.rootpath))
        self.known = _load_known(self.known_folder)
        self._checker = None
        self._runner = None
        self._writer = None
        self._availability: dict = {}
        self._verdicts: dict = {}
        self._deferred: set = set()               # (case id, route) of failures left to reduce at the end
        self.batches = parse_batches(opt("--fuzz-batch")) if self.budget is not None else {}
        self._pending: list = []                  # cases drawn in this item, waiting to run as one program
        self._findings_fail_run = False
        self._route_items: dict = {}             # route -> its fuzz items, as collected
        self._shares: RouteShares | None = None
        self._clock: ItemClock | None = None
        self._item: str | None = None            # the fuzz item running in this process
        self._claims = None
        self._interrupted = False
        self._progress = None
        self._sigterm = contextlib.ExitStack()  # SIGTERM as Ctrl-C for a fuzz run, until unconfigure

    def _choose_seed(self, given_seed):
        """--fuzz-seed, else 0 for profiles without an example database (ci: derandomized),
        else a fresh one (printed in the header, so a run can be repeated)."""
        if given_seed is not None:
            return given_seed
        profile = settings.get_profile(self.profile)
        return 0 if profile.database is None else random.randrange(2**31)

    # -- used by fuzz tests ------------------------------------------------------------
    def fuzz_seed(self, *parts) -> int:
        """A stable seed for one item: the base seed mixed with the item's parameters."""
        return (self.base_seed * 1_000_003 + zlib.crc32("/".join(map(str, parts)).encode())) % (2**32)

    @property
    def profile(self) -> str:
        """The profile fuzz items use: the one --hypothesis-profile names, else torchsim-default."""
        return self.config.getoption("hypothesis_profile", default=None) or DEFAULT_PROFILE

    def settings(self):
        """Hypothesis settings for a fuzz item: its profile, with --fuzz-examples applied and,
        under a budget, no shrinking (the reducer shrinks failures in the budget's closing
        share; Hypothesis's shrinking inside an item would run past the item's time) and no
        cap on examples unless --fuzz-examples sets one (the budget ends the item; a profile's
        40 left a 30-minute run's fastest route idle for a third of its share)."""
        base = settings.get_profile(self.profile)
        changes = {} if self.examples is None else {"max_examples": self.examples}
        if self.budget is not None:
            changes["phases"] = [phase for phase in base.phases if phase != Phase.shrink]
            changes.setdefault("max_examples", BUDGETED_EXAMPLES)
        return settings(base, **changes)

    def require(self, route: str) -> None:
        """Skip the calling test with the reason when `route` cannot run here; end it at
        once (BudgetSpent) when the budget's drawing time is over, before a worker starts."""
        if self._clock is not None and time.time() >= self.budget.draw_end:
            raise BudgetSpent
        if self._runnable is not None and route in self._runnable:
            return                                   # probed by the controller
        if route not in self._availability:
            self._availability[route] = self.checker.availability(route)
        ok, reason, *_ = self._availability[route]
        if not ok:
            pytest.skip(f"route {route} unavailable: {reason}")

    def check(self, case, route: str):
        """Run, record, and raise the bucket's Finding unless the bucket is a known bug.

        A case seen before (Hypothesis revisits cases while shrinking, and replays the
        failing one) gets its earlier verdict again: no second run, no second record. Under a
        budget, a new case may instead end the item (BudgetSpent), and a failure left to reduce
        after the drawing is recorded, not raised: the item goes on drawing; on a route that
        batches (--fuzz-batch), a case waits for its batch's last case, and None is returned
        until then. A failure in a bucket that another item claimed is recorded and not raised
        (torchsim_diff.bucket_claims).
        """
        key = (case.case_id, route)
        verdict = self._verdicts.get(key)
        if verdict is None and any(c.case_id == case.case_id for c in self._pending):
            return None             # drawn again before its batch ran
        if verdict is None:
            if self._clock is not None:
                self._clock.admit()
            if self.batches.get(route, 1) > 1:
                self._pending.append(case)
                if len(self._pending) < self.batches[route]:
                    return None     # judged when its batch runs (_run_pending), as are its siblings
                self._run_pending(route)
            else:
                self._record(self.runner.verdict(case, route, cap=self._clock.cap if self._clock else None))
            verdict = self._verdicts[key]
        if key in self._deferred:
            return verdict          # decided in the closing share (_reduce_then_bucket)
        if not self.is_known(verdict) and verdict.failed and self._raises_here(verdict):
            verdict.raise_if_failed()
        return verdict

    def _raises_here(self, verdict) -> bool:
        if self._item is None or verdict.bucket is None:
            return True
        if self._claims is None:
            from torchsim_diff.bucket_claims import BucketClaims
            self._claims = BucketClaims(os.path.join(self.report_dir, "claims.sqlite"))
        return self._claims.held_by(verdict.bucket, self._item)

    def _run_pending(self, route: str) -> None:
        """The item's pending cases run as one program (run.batch), each recorded (_record)."""
        cases, self._pending = self._pending, []
        if cases:
            for verdict in self.runner.verdicts(cases, route, cap=self._clock.cap if self._clock else None):
                self._record(verdict)

    def _record(self, verdict) -> None:
        """A route run's verdict kept and its record written. The runner reduces a failure to
        tell a known bug. Under a budget it reduces nothing while drawing (a failure another
        one's reduction covers takes it: the same raw failure, reduced by any worker of the run
        or an earlier run); the rest are reduced in the budget's closing share
        (_reduce_then_bucket). A reduction takes seconds to a minute: made while drawing, the
        reductions took a third of a route's drawing time or more."""
        key = (verdict.case.case_id, verdict.route)
        self._verdicts[key] = verdict
        record = self.runner.record(verdict, reduce_by=time.time() if self._clock else None)
        self.writer.write(record)
        if record.reduce_error == DEFERRED:
            self._deferred.add(key)

    def runnable_routes(self) -> list:
        """--routes minus those unavailable here (probed once, in the controller)."""
        if self._runnable is None:
            self._runnable = [r for r in self.routes if self.probe()[r][0]]
        return self._runnable

    def probe(self) -> dict:
        """route -> (available, reason), each route's worker started in parallel."""
        missing = [r for r in self.routes if r not in self._availability]
        if missing:
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(missing)) as pool:
                self._availability.update(zip(missing, pool.map(self.checker.availability, missing)))
        return self._availability

    def release_probe(self) -> None:
        """The xdist controller runs no case: stop the workers it started to probe routes."""
        if self._checker is not None:
            self._checker.close()

    def is_known(self, verdict) -> bool:
        return self.runner.is_known(verdict)

    @property
    def runner(self):
        if self._runner is None:
            from torchsim_diff.run.runner import CaseRunner
            from torchsim_diff.triage.refine import ReduceThenBucket
            # reduced where there are known bugs to match (the checker's one refiner, reused at
            # session end), each failure once in the run: the workers share their reductions
            reducer = ReduceThenBucket.of_checker(self.checker, shared_path=self.reductions_path) if self.known else None
            self._runner = CaseRunner(self.checker, timeouts=self.timeouts, known=self.known, budget=self.budget,
                                      reducer=reducer)
        return self._runner

    @property
    def reductions_path(self) -> str:
        """The reductions shared by the run's processes and by the runs whose folders sit beside
        it, as the bucket history is (triage.shared_reductions)."""
        return os.path.join(os.path.dirname(os.path.abspath(self.report_dir)), "reductions.sqlite")

    @property
    def checker(self):
        if self._checker is None:
            from torchsim_diff.run.checker import Checker
            self._checker = Checker(out_dir=self.report_dir, timeout_s=self.timeout_s, tag=self.worker_id,
                                    known_buckets=self.known)
        return self._checker

    @property
    def writer(self):
        if self._writer is None:
            from torchsim_diff.results.jsonl import ResultsWriter
            self._writer = ResultsWriter(os.path.join(self.report_dir, f"results-{self.worker_id}.jsonl"))
        return self._writer

    # -- hooks ---------------------------------------------------------------------------
    def unavailable(self) -> dict:
        """route -> reason, for the routes probed so far that cannot run here."""
        return {route: probed[1] for route, probed in self._availability.items() if not probed[0]}

    def pytest_collection_modifyitems(self, items):
        """Fuzz items take turns by route (budget.interleaved_by_route), in the places they had."""
        places = [k for k, item in enumerate(items) if "fuzz_route" in getattr(item, "fixturenames", ())]
        ordered = interleaved_by_route([items[k] for k in places], _route_of)
        for place, item in zip(places, ordered):
            items[place] = item
        self._route_items = {}
        for item in ordered:
            self._route_items[_route_of(item)] = self._route_items.get(_route_of(item), 0) + 1

    @property
    def shares(self) -> RouteShares | None:
        """Under a budget, the routes' shares of the drawing time (campaign.route_shares)."""
        if self._shares is None and self.budget is not None:
            self._shares = RouteShares(os.path.join(self.report_dir, "shares.sqlite"),
                                       workers=self.workers, draw_end=self.budget.draw_end,
                                       items=self._route_items,
                                       weights=parse_weights(self.config.getoption("--fuzz-route-weights")))
        return self._shares

    def pytest_runtest_setup(self, item):
        if "fuzz_route" not in getattr(item, "fixturenames", ()):
            return
        self._item = item.nodeid
        if self.budget is not None:
            self._clock = ItemClock(self.budget, allowance_s=self.shares.begin(_route_of(item), item.nodeid))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        """An item stopped by its budget (BudgetSpent through Hypothesis) passed with what it ran;
        a campaign's finding is told in a few lines (_short_finding)."""
        report = yield
        if call.excinfo is None:
            return report
        if self._clock is not None and call.excinfo.errisinstance(BudgetSpent):
            report.outcome, report.longrepr = "passed", None
        elif self.explicit_routes and self.verbose < 1 and report.failed:
            findings = _findings(call.excinfo.value)
            if findings:
                report.longrepr = self._short_finding(item.nodeid, findings, str(report.longrepr))
        return report

    def _short_finding(self, nodeid: str, findings: list, full_text: str) -> str:
        """A campaign's findings in one item (several where Hypothesis met distinct failures), in
        the failure section: each one's first lines, and where the rest went. The cases they show
        are unreduced; the torchsim-diff report after the failures gives the reduced case, the
        bucket and the bundle. Hypothesis's whole report is kept in the run folder (failures/),
        and printed as it is under -v."""
        path = os.path.join(self.report_dir, "failures", re.sub(r"[^\w.-]+", "_", nodeid).strip("_") + ".txt")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(full_text)
        except OSError:
            return full_text
        heads = []
        for finding in findings:
            head = [line for line in str(finding).splitlines() if line.strip()][:2]
            heads += [f"{type(finding).__name__}: {head[0] if head else ''}", *head[1:]]
        return "\n".join([*heads, ("their" if len(findings) > 1 else "its") + " reduced case, bucket and bundle: "
                          "the torchsim-diff report below",
                          f"the unreduced case and Hypothesis's traceback: {path} (or run with -v)"])

    def pytest_runtest_teardown(self, item):
        if "fuzz_route" in getattr(item, "fixturenames", ()):
            self._run_pending(_route_of(item))      # cases drawn before the item's time ran out
            if self._clock is not None:
                self.shares.end(item.nodeid, time.time() - self._clock.opened)
            self._clock = self._item = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        """Failures reduced before the summary (pytest's terminal summary runs within this
        hook); after it, a run under a budget whose items passed still exits as failed when it
        found a NEW bucket (reduced after the drawing) or a failure it had no time to decide."""
        self._interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        if self._checker is not None:
            if exitstatus == pytest.ExitCode.INTERRUPTED:
                self._checker.stop()              # the case in flight is not waited for, nor reduced
            else:
                self._reduce_then_bucket()
            self._checker.close()
        if self._writer is not None:
            self._writer.close()
        result = yield
        if self._findings_fail_run and self.budget is not None and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return result

    def _reduce_then_bucket(self) -> None:
        """Each process reduces its own new failures (xdist workers in parallel) before the
        main process buckets them (session_refinements.apply_refinements in the summary); under a budget,
        by the budget's reduce_end."""
        budget = self.config.getoption("--fuzz-reduce-budget")
        failures = [v for v in self._verdicts.values() if v.failed and not self.is_known(v)]
        if budget > 0 and failures:
            from torchsim_diff.triage.session_refinements import REFINED_PREFIX, refine_verdicts
            path = os.path.join(self.report_dir, f"{REFINED_PREFIX}{self.worker_id}.jsonl")
            refine_verdicts(self._checker, failures, path, budget_s=budget,
                            deadline=self.budget.reduce_end if self.budget else None, shared_path=self.reductions_path)


def _route_of(item) -> str:
    return item.callspec.params["fuzz_route"]


def _budget_option(text):
    if text is None:
        return None
    try:
        return Budget.parse(text)
    except ValueError as exc:
        raise pytest.UsageError(f"--fuzz-budget: {exc}") from None


def _progress_mode(config) -> str:
    """--fuzz-progress as torchsim_diff.campaign.progress.choose_mode decides it for this run."""
    return choose_mode(config.getoption("--fuzz-progress"), tty=sys.stdout.isatty(),
                       campaign=config.getoption("--fuzz-budget") is not None,
                       asked=config.get_verbosity() > 0)


def _load_known(folder: str) -> set:
    """Buckets of the known bugs kept in the corpus (entries with "expect": "fail")."""
    from torchsim_diff.buckets.corpus import known_buckets
    return known_buckets(folder)


def _findings(error) -> list:
    """The campaign findings `error` is: itself, or every leaf of the exception group Hypothesis
    raises for distinct failures of one item when each is a finding; [] otherwise."""
    if isinstance(error, Finding):
        return [error]
    group = getattr(error, "exceptions", None)      # an exception group (the backport's on Python < 3.11)
    if not isinstance(group, tuple) or not group:
        return []
    each = [_findings(sub) for sub in group]
    return [leaf for leaves in each for leaf in leaves] if all(each) else []
