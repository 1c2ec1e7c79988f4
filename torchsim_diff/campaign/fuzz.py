"""A fuzz campaign outside pytest: draw cases, run every route, record everything.

Cases come from Hypothesis with a fixed seed and no example database, so the same
options produce the same cases (and, compilers permitting, the same verdicts). The
campaign does not stop at a failure: every verdict goes to results.jsonl as it is made;
shrinking is `torchsim-diff reduce`'s job. With a budget it stops drawing when the time is
spent; per-route timeouts adapt to the run (torchsim_diff.run.adaptive_timeouts), and one progress line
per route follows the records (torchsim_diff.campaign.progress).

Faults are survived: a route worker killed from outside costs its case alone, recorded as
`tool_error` (worker.client.RouteWorker.collect); a failure that does not fail again when
reduced is kept as found. An interrupt (KeyboardInterrupt, which the command also raises
for SIGTERM) kills the route workers at once, drops the case in flight and ends the run with
everything written so far.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.campaign.budget import Budget
from torchsim_diff.triage.bucket_history import BucketStore, smallest_per_bucket
from torchsim_diff.run.checker import Checker, Verdict
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.judge.op_figures import OpFigures
from torchsim_diff.run.one_ahead import Pipeline
from torchsim_diff.campaign.progress import Board, Display, ProgressThread
from torchsim_diff.results.jsonl import ResultsWriter
from torchsim_diff.routes import route_class
from torchsim_diff.generate.strategies import cases
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy
from torchsim_diff.worker import DEFAULT_TIMEOUT_S

PROGRESS_EVERY_S = 5.0
KNOWN_BUGS_DIR = os.path.join("corpora", "known")
# Distinct draws can build the same case; duplicates are skipped, so Hypothesis may need
# more draws than the campaign has cases.
DRAWS_PER_CASE = 4


class _CampaignDone(BaseException):
    """Raised through Hypothesis (a BaseException: no shrinking, no replay) when enough
    distinct cases have run."""


@dataclasses.dataclass
class CampaignOptions:
    routes: list
    out_dir: str
    max_examples: int = 100
    seed: int = 0
    dtype: str = "float32"
    max_nodes: int = 8
    families: list | None = None
    ops: list | None = None
    special_values: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    route_options: dict = dataclasses.field(default_factory=dict)
    bucket_store: str | None = None
    repeat: int = 1
    budget_s: float | None = None     # stop drawing cases after this many seconds
    reduce: bool = True                # reduce, then bucket: each new failure (reduce.Refiner)
    reduce_budget_s: float = 60.0
    batch: int = 1                     # cases compiled together as one program (torchsim_diff.run.batch)
    known_bugs: str | None = KNOWN_BUGS_DIR   # corpus entries of known bugs: recorded as known, not new


@dataclasses.dataclass
class CampaignResult:
    cases: int = 0
    records: list = dataclasses.field(default_factory=list)
    unavailable: dict = dataclasses.field(default_factory=dict)
    interrupted: bool = False
    signal: int | None = None          # what interrupted it: SIGINT (Ctrl-C) or SIGTERM
    new_buckets: set = dataclasses.field(default_factory=set)
    bundles: dict = dataclasses.field(default_factory=dict)

    @property
    def findings(self) -> list:
        """Failures other than known bugs."""
        return [r for r in self.records if r["status"] == Status.FAIL.value and not r.get("known")]

    @property
    def known_findings(self) -> list:
        return [r for r in self.records if r["status"] == Status.FAIL.value and r.get("known")]

    def interrupt(self, exc: KeyboardInterrupt) -> None:
        """Note that the run was cut short, and by which signal (`signum` on the exception
        the command raises for SIGTERM; a plain KeyboardInterrupt is Ctrl-C)."""
        self.interrupted, self.signal = True, getattr(exc, "signum", signal.SIGINT)


def load_known(opts: CampaignOptions) -> set:
    """Buckets of the known bugs kept under opts.known_bugs (none when unset or absent)."""
    from torchsim_diff.triage.corpus import known_buckets
    return known_buckets(opts.known_bugs) if opts.known_bugs else set()


def refine_unless_known(refiner, verdict, known: set) -> dict:
    """Extra record fields of a verdict: a failure in a known bug's bucket is marked known and
    left as found (reducing it again would cost time and could move it out of that bucket);
    any other failure is reduced, then bucketed (when reduction is on). One whose minimal case
    lands in a known bug's bucket (known entries are minimal cases, bucketed as checked) is
    that bug: marked known, in its bucket."""
    if verdict.failed and verdict.bucket in known:
        return {"known": True}
    return known_by_minimal_case(refiner.refine(verdict) if refiner else {}, known)


def known_by_minimal_case(fields: dict, known: set) -> dict:
    """A refined failure's fields, marked known and moved into the known bug's bucket when its
    minimal case lands there."""
    if fields.get("minimal_bucket") in known:
        return {**fields, "bucket": fields["minimal_bucket"], "known": True}
    return fields


def is_new_failure(record: dict) -> bool:
    """Whether a record goes to the bucket history (known bugs do not)."""
    return record["status"] == Status.FAIL.value and not record.get("known")


def _progress(opts: CampaignOptions, budget: Budget | None, store) -> ProgressThread:
    start = budget.start if budget else time.time()
    board = Board(start, budget.end if budget else None, set(store.buckets) if store is not None else ())
    return ProgressThread(opts.out_dir, board, Display(sys.stderr))


def run_campaign(opts: CampaignOptions) -> CampaignResult:
    """Run the campaign; KeyboardInterrupt ends it early with everything so far kept."""
    for name in opts.routes:
        route_class(name)
    strategy = cases(dtype=opts.dtype, max_nodes=opts.max_nodes, families=opts.families, ops=opts.ops,
                     special_values=opts.special_values)
    result = CampaignResult()
    os.makedirs(opts.out_dir, exist_ok=True)
    store = BucketStore(opts.bucket_store) if opts.bucket_store else None
    budget = Budget(opts.budget_s) if opts.budget_s else None
    timeouts = TimeoutPolicy(ceiling_s=opts.timeout_s)
    op_figures = OpFigures()
    progress = _progress(opts, budget, store)
    progress.start()
    known = load_known(opts)
    with Checker(out_dir=opts.out_dir, timeout_s=opts.timeout_s, route_options=opts.route_options,
                 repeat=opts.repeat, known_buckets=known) as checker, \
            ResultsWriter(os.path.join(opts.out_dir, "results.jsonl")) as writer:
        available = _available_routes(checker, opts.routes, result)
        refiner = _refiner(checker, opts)

        seen: set = set()

        @seed(opts.seed)
        @settings(max_examples=opts.max_examples * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def one_case(case):
            if case.case_id in seen:
                return
            seen.add(case.case_id)
            if budget is not None and budget.left() <= 0:
                raise _CampaignDone
            pending.append(case)
            if len(pending) >= opts.batch or drawn[0] + len(pending) >= opts.max_examples:
                submit()
            if drawn[0] >= opts.max_examples:
                raise _CampaignDone

        pending: list = []
        drawn = [0]       # cases handed to the pipeline

        def records_of(cases: list) -> tuple:
            """(cases, records) of every route on `cases`; runs on the pipeline's thread."""
            records = []
            for route in opts.routes:
                for verdict in _verdicts(checker, timeouts, budget, cases, route, available, result):
                    refined = refine_unless_known(refiner if route in available else None, verdict, known)
                    record = {**verdict.record(), **refined}
                    record["op_errors"] = op_figures.for_verdict(checker, verdict, timeouts.steady(route))
                    records.append(record)
            return len(cases), records

        def write(done: list) -> None:
            for n_cases, records in done:
                for record in records:
                    writer.write(record)
                    result.records.append(record)
                    if store is not None and is_new_failure(record) and store.add(record):
                        store.save()
                result.cases += n_cases

        # The next case is drawn while this one compiles: safe only because the draws ignore
        # constants mined from modules the pipeline's thread may import meanwhile.
        pipeline = Pipeline(records_of)

        def submit():
            if pending:
                write(pipeline.submit(list(pending)))
                drawn[0] += len(pending)
                pending.clear()

        from torchsim_diff.generate.strategies import no_local_constants
        try:
            try:
                with no_local_constants():     # else a second campaign in one process drew other cases
                    one_case()
            except _CampaignDone:
                pass
            submit()
            write(pipeline.drain())
        except KeyboardInterrupt as exc:
            result.interrupt(exc)
            checker.stop()          # the case in flight ends now (Stopped on its thread); its records are dropped
        finally:
            pipeline.abandon()      # after a drain nothing is in flight; else wait before the workers close
        progress.stop()
    if store is not None:
        store.save()
        result.new_buckets = set(store.new)
    result.bundles = write_new_bundles(result.findings, result.new_buckets if store else None, opts.out_dir)
    return result


def _verdicts(checker: Checker, timeouts: TimeoutPolicy, budget: Budget | None, cases: list, route: str,
              available: set, result: CampaignResult) -> list:
    """One verdict per case on `route`: skipped when unavailable, batched when several."""
    if route not in available:
        return [Verdict(case, route, Status.SKIPPED, message=result.unavailable[route]) for case in cases]
    if len(cases) == 1:
        return [_timed_check(checker, timeouts, budget, cases[0], route)]
    from torchsim_diff.run.batch import check_batch
    limit = timeouts.limit(route, fresh=not checker.worker(route).alive())
    verdicts = check_batch(checker, cases, route, timeout_s=budget.cap(limit) if budget else limit)
    for verdict in verdicts:
        timeouts.observe(route, verdict.t_case, fresh=False, timed_out=verdict.kind == Kind.TIMEOUT)
    return verdicts


def _timed_check(checker: Checker, timeouts: TimeoutPolicy, budget: Budget | None, case, route: str) -> Verdict:
    """One route run under the route's adaptive timeout (within what is left of the budget)."""
    fresh = not checker.worker(route).alive()
    limit = timeouts.limit(route, fresh=fresh)
    if budget is not None:
        limit = budget.cap(limit)
    verdict = checker.check(case, route, timeout_s=limit)
    timeouts.observe(route, verdict.t_case, fresh=fresh, timed_out=verdict.kind == Kind.TIMEOUT)
    return verdict


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


def _refiner(checker: Checker, opts: CampaignOptions):
    """Reduce, then bucket (None with --no-reduce); reductions cached beside the bucket history."""
    if not opts.reduce:
        return None
    from torchsim_diff.triage.reduce import Refiner
    folder = os.path.dirname(opts.bucket_store) if opts.bucket_store else opts.out_dir
    return Refiner(checker, budget_s=opts.reduce_budget_s, cache_path=os.path.join(folder or ".", "reductions.json"))


def _available_routes(checker: Checker, routes, result: CampaignResult) -> set:
    available = set()
    for route in routes:
        ok, reason, _versions = checker.availability(route)
        if ok:
            available.add(route)
        else:
            result.unavailable[route] = reason
            sys.stderr.write(f"route {route} unavailable, its records are 'skipped': {reason}\n")
    return available
