"""A fuzz campaign outside pytest: draw cases, run every route, record everything.

Cases come from Hypothesis with a fixed seed and no example database, so the same
options produce the same cases (and, compilers permitting, the same verdicts). The
campaign does not stop at a failure: every verdict goes to results.jsonl as it is made;
each new failure is reduced, then bucketed (triage.reduce). With a budget it stops drawing when the time is
spent. Each case runs through the one case runner (run.runner), as in the pytest plugin and
on Ray; live progress per route follows the records (campaign.progress: tqdm bars on a
terminal, plain lines elsewhere).

At the end each new bucket is self-checked before it is called NEW (triage.self_check): its
case replayed, its bundle's repro.py run in a fresh process; one that does not reproduce is
listed as unconfirmed, with the reason.

Faults are survived: a route worker killed from outside costs its case alone, recorded as
`tool_error` (worker.client.RouteWorker.collect); a failure that does not fail again when
reduced is kept as found, and an error in triaging a case stays on its record (run.runner). An interrupt (KeyboardInterrupt, which the command also raises
for SIGTERM) kills the route workers at once, drops the case in flight and ends the run with
everything written so far; one during start-up (before the first case) ends it the same way.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

from torchsim_diff.campaign.budget import Budget
from torchsim_diff.campaign.progress import Board, Progress, ProgressThread, choose_mode, make_display
from torchsim_diff.generate.draws import StopDrawing, for_each_case
from torchsim_diff.generate.strategies import cases
from torchsim_diff.generate.switches import GRAPH_NODES
from torchsim_diff.results.jsonl import ResultsWriter
from torchsim_diff.routes import route_class
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy
from torchsim_diff.run.checker import Checker
from torchsim_diff.run.one_ahead import OneAhead
from torchsim_diff.run.runner import CaseRunner
from torchsim_diff.buckets.bucket_history import BucketStore, smallest_per_bucket
from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S


@dataclasses.dataclass
class CampaignOptions:
    routes: list
    out_dir: str
    max_examples: int = 100
    seed: int = 0
    dtype: str = "float32"
    max_nodes: int = GRAPH_NODES
    families: list | None = None
    ops: list | None = None
    special_values: str = "mix"        # generate.strategies.SPECIAL_MODES
    timeout_s: float = DEFAULT_TIMEOUT_S
    route_options: dict = dataclasses.field(default_factory=dict)
    bucket_store: str | None = None
    repeat: int = 1
    budget_s: float | None = None     # stop drawing cases after this many seconds
    reduce: bool = True                # reduce, then bucket: each new failure (triage.refine.ReduceThenBucket)
    reduce_budget_s: float = 60.0
    batch: int = 1                     # cases compiled together as one program (torchsim_diff.run.batch)
    known_bugs: str | None = dataclasses.field(default_factory=default_ledger)  # known bugs: recorded as known, not new
    self_check: bool = True            # a new bucket is NEW only when its bundle reproduces it (triage.self_check)
    settle_when_told: bool = False     # NEW buckets stay unsettled in the history until the caller, having told
    #                                    them, calls settle_told (the CLI, after printing them and the report)


@dataclasses.dataclass
class CampaignResult:
    cases: int = 0
    records: list = dataclasses.field(default_factory=list)      # results.record.Record
    unavailable: dict = dataclasses.field(default_factory=dict)
    interrupted: bool = False
    signal: int | None = None          # what interrupted it: SIGINT (Ctrl-C), SIGTERM or SIGHUP
    new_buckets: set = dataclasses.field(default_factory=set)
    bundles: dict = dataclasses.field(default_factory=dict)
    unconfirmed: dict = dataclasses.field(default_factory=dict)   # bucket -> why its self-check failed
    abandoned: dict = dataclasses.field(default_factory=dict)     # route -> why it was given up
    untold: set = dataclasses.field(default_factory=set)          # NEW buckets left for settle_told

    @property
    def findings(self) -> list:
        """Failures other than known bugs, in buckets that passed their self-check (or had none)."""
        return [r for r in self.records if r.is_new_failure and r.bucket not in self.unconfirmed]

    @property
    def unconfirmed_findings(self) -> list:
        return [r for r in self.records if r.is_new_failure and r.bucket in self.unconfirmed]

    @property
    def known_findings(self) -> list:
        return [r for r in self.records if r.is_known_failure]

    def interrupt(self, exc: KeyboardInterrupt) -> None:
        """Note that the run was cut short, and by which signal (`signum` on the exception
        the command raises for SIGTERM and SIGHUP; a plain KeyboardInterrupt is Ctrl-C)."""
        self.interrupted, self.signal = True, getattr(exc, "signum", signal.SIGINT)


def load_known(opts: CampaignOptions) -> set:
    """Buckets of the known bugs kept under opts.known_bugs (none when unset or absent)."""
    from torchsim_diff.buckets.corpus import known_buckets
    return known_buckets(opts.known_bugs) if opts.known_bugs else set()


def _progress(opts: CampaignOptions, budget: Budget | None, store) -> ProgressThread:
    """Bars on a terminal, a block of plain lines every 10 s elsewhere, on stderr."""
    start = budget.start if budget else time.time()
    board = Board(start, budget.end if budget else None, set(store.buckets) if store is not None else ())
    mode = choose_mode("auto", tty=sys.stderr.isatty(), campaign=True)
    display = make_display(mode, sys.stderr, lambda line: print(line, file=sys.stderr, flush=True))
    return ProgressThread(Progress(opts.out_dir, board, display))


def case_strategy(opts: CampaignOptions):
    return cases(dtype=opts.dtype, max_nodes=opts.max_nodes, families=opts.families, ops=opts.ops,
                 special_values=opts.special_values)


def say_policy() -> None:
    """The generation policy, once the campaign is sure to run: the header's line (stderr, as the
    progress lines), never before a usage error's one line."""
    from torchsim_diff.generate.policy import active_policy
    print(f"torchsim-diff: {active_policy().describe()}", file=sys.stderr, flush=True)


def run_campaign(opts: CampaignOptions) -> CampaignResult:
    """Run the campaign; KeyboardInterrupt ends it early with everything so far kept."""
    for name in opts.routes:
        route_class(name)
    strategy = case_strategy(opts)
    result = CampaignResult()
    os.makedirs(opts.out_dir, exist_ok=True)
    store = BucketStore(opts.bucket_store) if opts.bucket_store else None
    budget = Budget(opts.budget_s) if opts.budget_s else None
    say_policy()
    progress = _progress(opts, budget, store)
    progress.start()
    try:
        _run(opts, strategy, store, budget, progress, result)
    except KeyboardInterrupt as exc:    # during start-up (its workers' probes) or the closing phase
        result.interrupt(exc)
    finally:
        progress.stop()
    return result


def _run(opts: CampaignOptions, strategy, store, budget, progress, result: CampaignResult) -> None:
    """Draw and run the cases, then bucket and self-check the new failures (run_campaign)."""
    known = load_known(opts)
    with Checker(out_dir=opts.out_dir, timeout_s=opts.timeout_s, route_options=opts.route_options,
                 repeat=opts.repeat, known_buckets=known) as checker, \
            ResultsWriter(os.path.join(opts.out_dir, "results.jsonl")) as writer:
        runner = CaseRunner(checker, timeouts=TimeoutPolicy(ceiling_s=opts.timeout_s), known=known,
                            reducer=new_reducer(checker, opts, opts.out_dir, known), budget=budget)
        _say_unavailable(runner, opts.routes, result)
        pending: list = []
        drawn = [0]       # cases handed to the background thread

        def visit(case):
            if budget is not None and budget.left() <= 0:
                raise StopDrawing
            pending.append(case)
            if len(pending) >= opts.batch or drawn[0] + len(pending) >= opts.max_examples:
                submit()

        def records_of(cases: list) -> tuple:
            """(cases, records) of every route on `cases`; runs on the background thread."""
            return len(cases), [record for route in opts.routes for _, record in runner.run_cases(cases, route)]

        def write(done: list) -> None:
            for n_cases, records in done:
                for record in records:
                    writer.write(record)
                    result.records.append(record)
                    if store is not None and record.is_new_failure and store.add(record):
                        store.save()
                result.cases += n_cases

        # The next case is drawn while this one compiles: safe only because the draws ignore
        # constants mined from modules the background thread may import meanwhile.
        one_ahead = OneAhead(records_of)

        def submit():
            if pending:
                write(one_ahead.submit(list(pending)))
                drawn[0] += len(pending)
                pending.clear()

        try:
            for_each_case(strategy, seed_value=opts.seed, count=opts.max_examples, visit=visit)
            submit()
            write(one_ahead.drain())
        except KeyboardInterrupt as exc:
            result.interrupt(exc)
            checker.stop()          # the case in flight ends now (Stopped on its thread); its records are dropped
        finally:
            one_ahead.abandon()     # after a drain nothing is in flight; else wait before the workers close
        progress.stop()
        report_new_buckets(result, store, opts, checker)


def report_new_buckets(result: CampaignResult, store, opts: CampaignOptions, checker=None) -> None:
    """Bundles of the run's new buckets (every bucket without a history), each self-checked
    first (triage.self_check.settle_new_buckets): an unconfirmed bucket is listed apart, never
    NEW, and taken back out of the history. Sets result.new_buckets, .bundles, .unconfirmed and
    .abandoned. Without a checker (a Ray driver runs no case) one is started for the replays."""
    result.abandoned = {r.route: r.message for r in result.records if r.abandoned_route}
    if not opts.self_check:
        result.new_buckets = set(store.new) if store is not None else set()
        _settle_or_leave(result, store, opts)
        result.bundles = write_new_bundles(result.findings, result.new_buckets if store else None, opts.out_dir)
        return
    from torchsim_diff.triage.self_check import settle_new_buckets

    def own_checker():
        return Checker(out_dir=os.path.join(opts.out_dir, "self-check"), timeout_s=opts.timeout_s,
                       route_options=opts.route_options)
    settled = settle_new_buckets(result.findings, store, opts.out_dir, checker or own_checker,
                                 interrupted=result.interrupted, settle=not opts.settle_when_told)
    result.new_buckets, result.bundles, result.unconfirmed = settled.new, settled.bundles, settled.unconfirmed
    result.untold = set(settled.new) if store is not None and opts.settle_when_told else set()
    if settled.interrupted is not None and not result.interrupted:
        result.interrupt(settled.interrupted)


def _settle_or_leave(result: CampaignResult, store, opts: CampaignOptions) -> None:
    """Settle the NEW buckets now, or leave them to settle_told (opts.settle_when_told)."""
    if opts.settle_when_told:
        result.untold = set(result.new_buckets)
        return
    for bucket in result.new_buckets:
        store.settle(bucket)


def settle_told(result: CampaignResult, opts: CampaignOptions) -> None:
    """Settle in the bucket history the NEW buckets the caller has now told (printed, and
    written into the report): until then a run killed (kill -9) finds them new again next time,
    so none is ever seen only by a run that died before saying so."""
    if not result.untold or not opts.bucket_store:
        return
    store = BucketStore(opts.bucket_store)
    try:
        for bucket in sorted(result.untold):
            store.settle(bucket)
    finally:
        store.close()
    result.untold = set()


def write_new_bundles(records, new_buckets, out_dir: str) -> dict:
    """A reproducer bundle under OUT/bundles/<bucket> for each new bucket (every bucket
    when there is no history), from its smallest case in this run. bucket -> folder."""
    from torchsim_diff.report.bundles import BundleError, write_bundle
    written = {}
    for bucket, record in smallest_per_bucket(records).items():
        if new_buckets is not None and bucket not in new_buckets:
            continue
        folder = os.path.join(out_dir, "bundles", bucket)
        try:
            written[bucket] = write_bundle(record, folder)
        except (BundleError, OSError) as exc:
            sys.stderr.write(f"no reproducer for bucket {bucket}: {exc}\n")
    return written


def new_reducer(checker: Checker, opts: CampaignOptions, cache_folder: str, known=frozenset()):
    """Reduce, then bucket, with reductions cached in `cache_folder`: a run's own folder, since a
    cache keyed by case and route kept beside the bucket history gave later campaigns (another
    torch, a bug fixed or planted, other options) stale minimal cases. With --no-reduce, None,
    unless there are `known` bugs to match: a failure is known only by its minimal case, so the
    checker's one refiner reduces it then."""
    from torchsim_diff.triage.refine import ReduceThenBucket
    if not opts.reduce:
        return ReduceThenBucket.of_checker(checker) if known else None
    return ReduceThenBucket(checker, budget_s=opts.reduce_budget_s,
                            cache_path=os.path.join(cache_folder or ".", "reductions.json"))


def _say_unavailable(runner: CaseRunner, routes, result: CampaignResult) -> None:
    for route in routes:
        ok, reason = runner.availability(route)
        if not ok:
            result.unavailable[route] = reason
            sys.stderr.write(f"route {route} unavailable, its records are 'skipped': {reason}\n")
