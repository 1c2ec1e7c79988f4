"""pytest plugin: fuzz suites as test items, one warm checker per xdist worker, one merged table.

Options (see `pytest --help`, group torchsim-diff): --routes, --fuzz-examples, --fuzz-seed,
--fuzz-dtypes, --fuzz-shards, --report-dir, --fuzz-timeout, --fuzz-budget, --fuzz-route-weights,
--known-bugs, --fuzz-reduce-budget, --fuzz-progress.

The controller probes the routes once: an unavailable route is named in the header with
its reason and gets no items. With --fuzz-budget, every route gets its share of the drawing
time from the start (torchsim_diff.campaign.route_shares), its items stop drawing cases when
their part of it is spent (torchsim_diff.campaign.budget), Hypothesis does not shrink (the
reducer does, in the budget's closing share), and per-route timeouts adapt to the run
(torchsim_diff.run.adaptive_timeouts).

Live progress (torchsim_diff.campaign.progress, --fuzz-progress) is off in a plain test run, so
nothing comes between pytest's dots; a budget or -v turns it on: tqdm bars on a terminal, whole
plain lines elsewhere. While it is on pytest reports one line per item (as with -v), and the
progress goes between those lines (_ProgressHooks).

Hypothesis profiles registered here: `torchsim-ci` (few examples, fixed seeds, no database,
no deadline), `torchsim-default` (a useful campaign; what fuzz items use when no profile is
named) and `torchsim-long` (thousands per item); `ci` and `long` remain as aliases. Pick one
with Hypothesis's own `--hypothesis-profile`. Other suites' profiles are never changed.

Each xdist worker keeps one Checker (warm route workers, own Inductor caches) and writes
its own results-<worker>.jsonl in the run's report folder; the controller prints the
merged tables at the end. A failing case raises its bucket's own exception type, so
Hypothesis shrinks each bug separately; a case in a known bucket (corpora/known) is
recorded and not raised, and so is one in a bucket that another item raises already
(torchsim_diff.campaign.bucket_claims): one bug ends one item, not every item that meets it.

Faults are survived: a case whose route worker was killed from outside is recorded as
`tool_error` and skipped, never raised (worker.client.RouteWorker.collect). In a fuzz run
(--routes given, as scripts/fuzz.sh does) SIGTERM ends the session as Ctrl-C does: pytest
reports it interrupted (exit 2) after the torchsim-diff report, with every record kept, and
the route workers are killed rather than waited for.
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
from hypothesis import HealthCheck, Phase, settings

from torchsim_diff.campaign import bytecode, options
from torchsim_diff.worker import DEFAULT_TIMEOUT_S
from torchsim_diff.campaign.budget import Budget, BudgetSpent, ItemClock, interleaved_by_route
from torchsim_diff.campaign.route_shares import RouteShares, parse_weights
from torchsim_diff.campaign.interrupts import sigterm_as_interrupt
from torchsim_diff.campaign.progress import MODES, Board, Progress, ProgressThread, choose_mode, make_display
from torchsim_diff.results.record import DEFERRED
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy
from torchsim_diff.triage.known_ledger import default_ledger
from torchsim_diff.triage.signatures import Finding

# Profiles under our own names: registering them changes no other suite's settings, and
# one is loaded only when --hypothesis-profile names it. Fuzz items without one get
# torchsim-default through FuzzSession.settings(), applied to those items alone.
PROFILES = {
    "torchsim-ci": dict(max_examples=6, deadline=None, database=None, print_blob=True,
                        suppress_health_check=list(HealthCheck)),
    "torchsim-default": dict(max_examples=40, deadline=None, print_blob=True,
                             suppress_health_check=list(HealthCheck)),
    "torchsim-long": dict(max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck)),
}
DEFAULT_PROFILE = "torchsim-default"
BUDGETED_EXAMPLES = 10 ** 9     # an item's examples under a budget without --fuzz-examples: the budget ends it
# Earlier names, kept working unless another plugin registered them first. Hypothesis's own
# `default` is never touched.
ALIASES = {"ci": "torchsim-ci", "long": "torchsim-long"}


def _register_profiles() -> None:
    from hypothesis.errors import InvalidArgument
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)
    for alias, name in ALIASES.items():
        try:
            settings.get_profile(alias)
        except InvalidArgument:
            settings.register_profile(alias, **PROFILES[name])


_register_profiles()

DEFAULT_ROUTES = "eager,inductor"
SESSION_NAME = "torchsim-diff-session"


def pytest_addoption(parser):
    group = parser.getgroup("torchsim-diff", "differential fuzzing of compiler routes")
    group.addoption("--routes", default=None,
                    help=f"comma-separated routes the fuzz suites run on (default: {DEFAULT_ROUTES})")
    group.addoption("--fuzz-examples", type=int, default=None,
                    help="examples per fuzz item (default: the Hypothesis profile's max_examples; under "
                         "--fuzz-budget, as many as the budget allows)")
    group.addoption("--fuzz-seed", type=int, default=None,
                    help="base seed; the ci profile uses 0, others draw one and print it")
    group.addoption("--fuzz-dtypes", default="float32", help="comma-separated dtypes (default: float32)")
    group.addoption("--fuzz-shards", type=int, default=1, help="items per route x family x dtype (default: 1)")
    group.addoption("--report-dir", default=None, help="run folder (default: reports/pytest-<time>)")
    group.addoption("--fuzz-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    help=f"the most seconds a case may take; each route's limit adapts below it "
                         f"(default: {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--fuzz-budget", default=None,
                    help="time for the whole run, e.g. 600, 90s, 10m: items stop drawing cases when their "
                         "share is spent, a fifth is kept for shrinking (default: no budget)")
    group.addoption("--fuzz-route-weights", default=None,
                    help="under --fuzz-budget, each route's weight in the drawing time, e.g. triton-spike=2,"
                         "inductor=0.5; routes not named weigh 1 (default: equal shares)")
    group.addoption("--known-bugs", default=None, help="folder of known-bug corpus entries (default: corpora/known "
                    "under the rootdir, else the copy installed with torchsim-diff)")
    group.addoption("--fuzz-progress", default="auto", choices=MODES,
                    help="live progress per route (cases, cases/s, failures, buckets, time left): bar (tqdm bars on "
                         "the terminal), lines (a plain block every 10 s between pytest's lines) or off; auto: on "
                         "under --fuzz-budget or -v, bars on a terminal, lines elsewhere; off in a plain test run. "
                         "While on, pytest reports one line per item (as with -v) (default: auto)")
    group.addoption("--fuzz-reduce-budget", type=float, default=60.0,
                    help="seconds to reduce each new failure at session end before bucketing it (0: bucket "
                         "failures as found; default: 60)")


# Option -> check of its value (torchsim_diff.campaign.options), run before anything starts.
OPTION_CHECKS = {"--routes": options.route_list, "--fuzz-dtypes": options.dtype_list,
                 "--fuzz-examples": options.positive_int, "--fuzz-shards": options.positive_int,
                 "--fuzz-timeout": options.positive_seconds, "--fuzz-reduce-budget": options.non_negative_seconds}


def _validate_options(config) -> None:
    """One line and pytest's usage exit for a bad option value, before any item runs."""
    for name, check in OPTION_CHECKS.items():
        value = config.getoption(name)
        if value is None:
            continue
        try:
            check(str(value))
        except options.BadOption as exc:
            raise pytest.UsageError(f"{name}={value!r}: {exc}") from None
    _validate_weights(config)
    _validate_report_dir(config.getoption("--report-dir"))


def _validate_report_dir(folder) -> None:
    """--report-dir as `fuzz --out` is checked: a folder this run may write, whose paths the run
    writes are absent or what it makes there, never a symbolic link (campaign.run_folder)."""
    from torchsim_diff.campaign import run_folder
    if folder is None:
        return
    try:
        options.out_folder(folder)
    except options.BadOption as exc:
        raise pytest.UsageError(f"--report-dir={folder!r}: {exc}") from None
    why = run_folder.refusal(folder)
    if why:
        raise pytest.UsageError(f"--report-dir: {why}")


def _validate_weights(config) -> None:
    text = config.getoption("--fuzz-route-weights")
    try:
        weights = parse_weights(text)
    except options.BadOption as exc:
        raise pytest.UsageError(f"--fuzz-route-weights={text!r}: {exc}") from None
    routes = config.getoption("--routes") or DEFAULT_ROUTES
    unrun = [route for route in weights if route not in routes.split(",")]
    if unrun:
        raise pytest.UsageError(f"--fuzz-route-weights={text!r}: route {unrun[0]!r} is not among --routes ({routes})")


def pytest_configure(config):
    _validate_options(config)
    bytecode.redirect_this_process()       # before the route probe and xdist's workers import torch
    session = FuzzSession(config)
    config.pluginmanager.register(session, SESSION_NAME)
    if session.progress_mode != "off":
        # pytest's dot line stays open while items run; with one line per item the progress
        # can go between pytest's lines (and bars below them) without breaking one.
        config.option.verbose = max(config.option.verbose, 1)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistHooks(session), "torchsim-diff-xdist")


def pytest_generate_tests(metafunc):
    session = metafunc.config.pluginmanager.get_plugin(SESSION_NAME)
    if "fuzz_route" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_route", session.runnable_routes())
    if "fuzz_dtype" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_dtype", session.dtypes)
    if "fuzz_shard" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_shard", range(session.shards))


@pytest.fixture(scope="session")
def torchsim_session(request):
    """The run's FuzzSession: `check(case, route)`, `fuzz_seed(...)`, `settings()`."""
    return request.config.pluginmanager.get_plugin(SESSION_NAME)


class _XdistHooks:
    def __init__(self, session):
        self.session = session

    def pytest_configure_node(self, node):
        """Hand the controller's report folder, seed, budget and runnable routes to each worker."""
        node.workerinput["torchsim_report_dir"] = self.session.report_dir
        node.workerinput["torchsim_seed"] = self.session.base_seed
        node.workerinput["torchsim_budget"] = self.session.budget.to_dict() if self.session.budget else None
        node.workerinput["torchsim_routes"] = self.session.runnable_routes() if self.session.explicit_routes else None
        self.session.release_probe()


class _ProgressHooks:
    """The controller's live progress around pytest's report lines: bars cleared while pytest
    writes and redrawn below its (closed) line; plain lines written after pytest's, through
    the terminal reporter, which ends pytest's line first. Bars start with the first item, after
    xdist's start-up lines (which redraw their own line)."""

    def __init__(self, thread, reporter):
        self.thread, self.reporter = thread, reporter

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logstart(self):
        return (yield from self._between_pytest_lines())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self):
        return (yield from self._between_pytest_lines())

    def _between_pytest_lines(self):
        progress = self.thread.progress
        with progress.display.paused():
            result = yield
            if progress.display.live:
                self.reporter.ensure_newline()
                self.reporter.flush()
        if progress.display.live and self.thread.ident is None:
            self.thread.start()
        progress.tick()
        return result


class FuzzSession:
    """Per-process state: options, the lazily started Checker and the results writer."""

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
        budget, a new case may instead end the item (BudgetSpent). A failure in a bucket that
        another item claimed is recorded and not raised (torchsim_diff.campaign.bucket_claims).
        """
        key = (case.case_id, route)
        verdict = self._verdicts.get(key)
        if verdict is None:
            if self._clock is not None:
                self._clock.admit()
            verdict = self._verdicts[key] = self._run(case, route)
        if key in self._deferred:
            raise BudgetSpent       # the item's time ran out in reducing the failure: it is reduced at the end
        if not self.is_known(verdict) and verdict.failed and self._raises_here(verdict):
            verdict.raise_if_failed()
        return verdict

    def _raises_here(self, verdict) -> bool:
        if self._item is None or verdict.bucket is None:
            return True
        if self._claims is None:
            from torchsim_diff.campaign.bucket_claims import BucketClaims
            self._claims = BucketClaims(os.path.join(self.report_dir, "claims.sqlite"))
        return self._claims.held_by(verdict.bucket, self._item)

    def _run(self, case, route: str):
        """One route run through the case runner (run.runner); its record is written. The
        runner reduces a failure to tell a known bug; under a budget only within the item's
        time: one it cannot reduce by then is reduced at session end (_reduce_then_bucket)."""
        verdict = self.runner.verdict(case, route, cap=self._clock.cap if self._clock else None)
        record = self.runner.record(verdict, reduce_by=self._clock.draw_until if self._clock else None)
        self.writer.write(record)
        if record.reduce_error == DEFERRED:
            self._deferred.add((case.case_id, route))
        return verdict

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
            self._runner = CaseRunner(self.checker, timeouts=self.timeouts, known=self.known, budget=self.budget)
        return self._runner

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
    def pytest_report_header(self, config):
        budget = f" budget={self.budget.total_s:g}s" if self.budget else ""
        # Probing starts a worker per route: done here only when routes were asked for.
        routes = self.runnable_routes() if self.explicit_routes else self.routes
        lines = [f"torchsim-diff: routes={','.join(routes)} dtypes={','.join(self.dtypes)} "
                 f"seed={self.base_seed}{budget} report-dir={self.report_dir}"]
        from torchsim_diff.generate.policy import active_policy
        lines.append(f"torchsim-diff: {active_policy().describe()}")
        for route, reason in self.unavailable().items():
            lines.append(f"torchsim-diff: route {route} unavailable, not fuzzed: {reason}")
        return lines

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
        if self._clock is not None and call.excinfo is not None and call.excinfo.errisinstance(BudgetSpent):
            report.outcome, report.longrepr = "passed", None
        elif self.explicit_routes and self.verbose < 1 and report.failed and call.excinfo is not None \
                and call.excinfo.errisinstance(Finding):
            report.longrepr = self._short_finding(item.nodeid, call.excinfo.value, str(report.longrepr))
        return report

    def _short_finding(self, nodeid: str, finding, full_text: str) -> str:
        """A finding of a campaign, in the failure section: its first lines, and where the rest
        went. The case it shows is unreduced; the torchsim-diff report after the failures gives
        the reduced case, the bucket and the bundle. Hypothesis's whole report is kept in the run
        folder (failures/), and printed as it is under -v."""
        path = os.path.join(self.report_dir, "failures", re.sub(r"[^\w.-]+", "_", nodeid).strip("_") + ".txt")
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(full_text)
        except OSError:
            return full_text
        head = [line for line in str(finding).splitlines() if line.strip()][:2]
        return "\n".join([f"{type(finding).__name__}: {head[0] if head else ''}", *head[1:],
                          "its reduced case, bucket and bundle: the torchsim-diff report below",
                          f"the unreduced case and Hypothesis's traceback: {path} (or run with -v)"])

    def pytest_runtest_teardown(self, item):
        if "fuzz_route" in getattr(item, "fixturenames", ()):
            if self._clock is not None:
                self.shares.end(item.nodeid, time.time() - self._clock.opened)
            self._clock = self._item = None

    def pytest_sessionstart(self, session):
        if getattr(self.config, "workerinput", None) is not None:
            return
        if self.explicit_routes:
            self._sigterm.enter_context(sigterm_as_interrupt(only_over_default=True))
        self._start_progress()

    def _start_progress(self) -> None:
        """In the controller, when _progress_mode says so: bars redrawn by a thread from the
        first item on, or lines written from the report hooks (_ProgressHooks)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.progress_mode == "off" or reporter is None:
            return
        start = self.budget.start if self.budget else time.time()
        board = Board(start, self.budget.end if self.budget else None, self._history_buckets(), self.known)
        stream = _terminal_stream() if self.progress_mode == "bar" else None
        progress = Progress(self.report_dir, board, make_display(self.progress_mode, stream, _flushed_lines(reporter)))
        self._progress = ProgressThread(progress)
        self.config.pluginmanager.register(_ProgressHooks(self._progress, reporter), "torchsim-diff-progress")

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

    def pytest_unconfigure(self, config):
        self._sigterm.close()

    def pytest_terminal_summary(self, terminalreporter):
        if getattr(self.config, "workerinput", None):
            return
        if self._progress is not None:
            self._progress.stop()
        from torchsim_diff.report import tables
        from torchsim_diff.results.jsonl import find_results, read_records
        if not os.path.isdir(self.report_dir):
            return
        records = [r for f in find_results([self.report_dir]) for r in read_records(f)]
        if not records:
            return
        from torchsim_diff.triage.refine import apply_refinements
        records = [r.known_by_minimal_case(self.known) for r in apply_refinements(records, self.report_dir)]
        terminalreporter.section("torchsim-diff")
        for line in self._share_lines(records):
            terminalreporter.write_line(line)
        settled = self._settle_new_buckets(records)
        undecided = _undecided(records, settled)
        self._findings_fail_run = bool(settled.new or undecided)
        from torchsim_diff.report.standing import Standing
        standing = Standing.of_run(settled.new, settled.unconfirmed, known_folder=self.known_folder,
                                   history=self._history_rows())
        for line in tables.end_report(records, settled.new, settled.bundles, self.report_dir, self.unavailable(),
                                      settled.unconfirmed, standing):
            terminalreporter.write_line(line)
        if self.budget is not None and undecided and not settled.new:
            terminalreporter.write_line(f"The run fails: {undecided} failure(s) the budget left undecided "
                                        f"(not reduced or not self-checked) may be new")

    def _share_lines(self, records) -> list:
        """Under a budget: what each fuzzed route got of the drawing time and of the cases, and
        a line for each route that ran few of them."""
        if self.budget is None:
            return []
        from torchsim_diff.campaign.route_shares import share_rows, spent_by_route, starved_lines
        from torchsim_diff.report.tables import render
        rows = share_rows(self.runnable_routes(), records, spent_by_route(os.path.join(self.report_dir,
                                                                                       "shares.sqlite")))
        return [*render(rows, "plain", "Drawing time per route (Hypothesis's shrinking off: the reducer "
                                       "shrinks each new failure after the drawing)").splitlines(),
                *starved_lines(rows), ""]

    def _reduce_then_bucket(self) -> None:
        """Each process reduces its own new failures (xdist workers in parallel) before the
        main process buckets them (refine.apply_refinements in the summary); under a budget,
        by the budget's reduce_end."""
        budget = self.config.getoption("--fuzz-reduce-budget")
        failures = [v for v in self._verdicts.values() if v.failed and not self.is_known(v)]
        if budget > 0 and failures:
            from torchsim_diff.triage.refine import REFINED_PREFIX, refine_verdicts
            path = os.path.join(self.report_dir, f"{REFINED_PREFIX}{self.worker_id}.jsonl")
            refine_verdicts(self._checker, failures, path, budget_s=budget,
                            deadline=self.budget.reduce_end if self.budget else None)

    def _history_path(self) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(self.report_dir)), "buckets.json")

    def _history_buckets(self) -> set:
        """Buckets of earlier runs, for marking NEW ones in the progress lines."""
        return set(self._history_rows())

    def _history_rows(self) -> dict:
        """bucket -> its row in the bucket history (BucketStore.buckets)."""
        from torchsim_diff.triage.bucket_history import BucketStore
        try:
            return BucketStore(self._history_path(), read_only=True).buckets
        except Exception:  # noqa: BLE001 - a history that cannot be read costs the NEW marks and times only
            return {}

    def _settle_new_buckets(self, records):
        """The bucket history updated with this run's failures (known bugs are not new), and
        the new buckets self-checked (triage.self_check) by a checker of this process."""
        from torchsim_diff.triage.bucket_history import BucketStore
        from torchsim_diff.triage.self_check import settle_new_buckets
        store = BucketStore(self._history_path())
        findings = [r for r in records if r.is_new_failure]
        for record in findings:
            store.add(record)

        def checker():
            from torchsim_diff.run.checker import Checker
            return Checker(out_dir=os.path.join(self.report_dir, "self-check"), timeout_s=self.timeout_s,
                           tag="self-check")
        return settle_new_buckets(findings, store, self.report_dir, checker, interrupted=self._interrupted,
                                  deadline=self.budget.end if self.budget else None)


def _undecided(records, settled) -> int:
    """How many failures the budget left undecided: unreduced, or reduced but not self-checked
    in time. A budgeted run that found one fails: it may be a new bug, and a pass would hide it."""
    from torchsim_diff.triage.self_check import OUT_OF_TIME
    unchecked = sum(reason == OUT_OF_TIME for reason in settled.unconfirmed.values())
    return unchecked + sum(r.unreduced for r in records)


def _flushed_lines(reporter):
    """reporter.write_line, flushed after each line: to a file or a pipe Python's stdout is
    block-buffered, and progress lines would come minutes late, in bursts."""
    def write_line(line: str) -> None:
        reporter.write_line(line)
        reporter.flush()
    return write_line


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


def _terminal_stream():
    """A handle on the terminal that pytest's output capturing (fd 1 redirected while a test
    runs) does not swallow: the progress bars are drawn while tests run in this process."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):
        return sys.stderr


def _load_known(folder: str) -> set:
    """Buckets of the known bugs kept in the corpus (entries with "expect": "fail")."""
    from torchsim_diff.triage.corpus import known_buckets
    return known_buckets(folder)
