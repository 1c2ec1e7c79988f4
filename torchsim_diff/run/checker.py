"""Run one case on one route and judge it: the pipeline every front end shares.

    >>> with Checker(out_dir="reports/run") as checker:
    ...     verdict = checker.check(case, "inductor")

The eager reference is computed once per case in this process, while the route compiles
and runs the case in its worker subprocess. The verdict carries the status, failure kind, bucket, error figures,
timings and the artifacts kept for failures (passing cases leave nothing behind).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import time

import torch

from torchsim_diff.buckets import signatures
from torchsim_diff.judge import comparison, oracle
from torchsim_diff.run import second_size
from torchsim_diff.bucket_claims import BucketClaims
from torchsim_diff.case.graph import Case
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.results.record import ABANDONED, Record
from torchsim_diff.results.run_metrics import NOT_HARNESS_TIMES, RunMetrics
from torchsim_diff.case.program_check import load_program
from torchsim_diff.routes import route_class
from torchsim_diff.run.background_delete import BackgroundDelete
from torchsim_diff.worker import whose_fault, protocol
from torchsim_diff.worker.client import DEFAULT_TIMEOUT_S, RouteWorker

DEFAULT_TAG = "0"       # a checker alone in its out_dir; a run's xdist workers are tagged by name


def _localise(artifact_dir: str) -> dict | None:
    """The first captured kernel whose replay disagrees with what the route computed, when
    the route captured its kernel launches (see torchsim_diff.kernels)."""
    if not os.path.isdir(artifact_dir):
        return None
    from torchsim_diff.kernels.capture import CaptureFormatError
    from torchsim_diff.routes.triton.localise import first_divergent_kernel
    try:
        found = first_divergent_kernel(artifact_dir, in_child=True)   # keeps interpreter shims out of here
    except (CaptureFormatError, OSError):
        return None
    if not found:
        return None
    return {k: found.get(k) for k in ("launch", "kernel_name", "folder", "summary")}


def _reference_failure(case: Case, route: str, exc: Exception, artifact_dir: str) -> "Verdict":
    """Eager rejecting the program is `invalid_case` (with torch's reason); a fault in our
    own oracle code is `tool_error`."""
    if whose_fault.is_ours(exc):
        return _tool_error(case, route, "oracle", exc, artifact_dir)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return Verdict(case, route, Status.FAIL, Kind.INVALID_CASE, "eager",
                   f"eager rejects the program: {type(exc).__name__}: {first}")


def _tool_error(case: Case, route: str, stage: str, exc: Exception, artifact_dir: str) -> "Verdict":
    """Our own fault: `tool_error` with the traceback kept in the case's artifacts."""
    message, files = whose_fault.describe_ours(exc, artifact_dir)
    return Verdict(case, route, Status.FAIL, Kind.TOOL_ERROR, stage, message, artifact_dir=artifact_dir,
                   artifacts=files)


def _killed(verdict: "Verdict", metrics: RunMetrics) -> "Verdict":
    """A case whose first worker was killed from outside and which then did nothing wrong on a
    fresh one (RouteWorker.collect): the death was nobody's bug in the route. Recorded as
    `tool_error`, skipped (so with no bucket, no reduction, no failure), never as a crash."""
    where = "while it started" if metrics.killed_at == "start" else "while it ran the case"
    return Verdict(verdict.case, verdict.route, Status.SKIPPED, Kind.TOOL_ERROR, metrics.killed_at,
                   f"worker killed by {metrics.killed_by} from outside {where}; the case ran again on a fresh "
                   f"worker and {'passed' if verdict.status == Status.PASS else 'was ' + verdict.status.value}, so "
                   f"the death was not the case's doing: not a compiler finding", stats=verdict.stats, metrics=metrics)


@dataclasses.dataclass
class Verdict:
    case: Case
    route: str
    status: Status
    kind: Kind | None = None
    stage: str | None = None
    message: str = ""
    op: str | None = None
    where: comparison.Where | None = None
    stats: comparison.Stats = dataclasses.field(default_factory=comparison.Stats)
    metrics: RunMetrics = dataclasses.field(default_factory=RunMetrics)
    artifact_dir: str | None = None
    artifacts: list = dataclasses.field(default_factory=list)
    t_case: float = 0.0
    refined: str | None = None     # signature read from the reduced case (refine.ReduceThenBucket)

    @property
    def failed(self) -> bool:
        return self.status == Status.FAIL

    @property
    def signature(self) -> str | None:
        if self.kind is None or self.status != Status.FAIL:
            return None
        if self.refined:
            return self.refined
        return signatures.signature(self.route, self.kind, self.message, self.op, self.where)

    @property
    def bucket(self) -> str | None:
        sig = self.signature
        return signatures.bucket_of(sig) if sig else None

    @property
    def t_harness(self) -> float:
        """What the harness added to this case: generation aside, the reference, transport and
        judging (start-up and a failure's localisation are `t_start` and `t_diagnose`)."""
        return max(self.t_case - self.metrics.outside_harness_s(), 0.0)

    def record(self) -> Record:
        """The results.jsonl record (docs/design.md, "results.jsonl"; results.record)."""
        case, s, metrics = self.case, self.stats, self.metrics
        return Record(
            case_id=case.case_id, seed=case.values.get("seed"), graph_hash=case.graph_hash,
            route=self.route, status=self.status.value, kind=self.kind.value if self.kind else None,
            stage=self.stage, bucket=self.bucket, op=self.op, ops=case.ops,
            dtypes=case.dtypes, layouts=case.layouts, n_nodes=len(case.nodes),
            max_abs_err=s.max_abs_err, max_rel_err=s.max_rel_err, max_ulp=s.max_ulp,
            unstable=s.unstable, carried_ulp=oracle.finite_or_none(s.carried_ulp),
            carried_by_op={op: oracle.finite_or_none(u) for op, u in s.carried_by_op.items()},
            err_ratio=oracle.finite_or_none(s.err_ratio),
            atol_needed=oracle.finite_or_none(s.atol_needed), rtol_needed=oracle.finite_or_none(s.rtol_needed),
            t_compile=metrics.t_compile, t_run=metrics.t_run,
            t_case=self.t_case, t_harness=self.t_harness, t_start=metrics.t_start,
            t_diagnose=metrics.t_diagnose, cost=metrics.cost, divergent_kernel=metrics.divergent_kernel,
            dynamic=metrics.dynamic, second_size=metrics.second_size, batch=metrics.batch,
            versions=metrics.versions,   # routes that report what they ran (torchsim-*)
            artifacts=self.artifact_dir if self.artifacts else None,
            message=self.message, case=case.to_dict(),
        )

    def raise_if_failed(self):
        """Raise the bucket's own Finding type (for Hypothesis-driven tests)."""
        if self.failed:
            exc_type = signatures.finding_type(self.kind, self.bucket)
            raise exc_type(f"[{self.route}] {self.kind.value} (bucket {self.bucket}, op {self.op})\n"
                           f"{self.message}\n\n{self.case.program_source()}")


class Stopped(BaseException):
    """Raised by Checker.check once the checker is stopped (a run being interrupted), so that
    work in flight on another thread (a reduction, say) ends at its next case. A BaseException:
    no `except Exception` on the way takes it for a failing case."""


class Checker:
    """Owns one warm worker per route and the run's output folder."""

    def __init__(self, *, out_dir: str, timeout_s: float = DEFAULT_TIMEOUT_S, route_options: dict | None = None,
                 tag: str = DEFAULT_TAG, repeat: int = 1, known_buckets: set | None = None):
        """repeat: run each case this many times on identical inputs; a bitwise difference
        between runs is `nondeterministic` (1 = no check).

        Localising a failure's divergent kernel replays its launches in a fresh Python (1-10 s
        of CPU), so it is done once per bucket by the first of the checkers sharing `out_dir`
        (a run's xdist workers) to meet it, and never for `known_buckets` (known bugs): later
        failures of a bucket, and the reducer's many runs of one, have `divergent_kernel` unset."""
        self.out_dir = os.path.abspath(out_dir)   # workers run in their own folders
        self.repeat = repeat
        self.timeout_s = timeout_s
        self.route_options = dict(route_options or {})
        self.tag = tag
        self.workers: dict = {}
        self.stopped = False
        self.triaging = False          # see triage_runs
        # The reference runs tiny tensors: more threads only contend with parallel workers.
        torch.set_num_threads(1)
        self._reference_key = None
        self._reference = None
        self._not_localised_again = set(known_buckets or ())
        self._localisations = BucketClaims(os.path.join(self.out_dir, "localised.sqlite"))
        self._claimant = f"{tag}:{os.getpid()}"
        self.deleter = BackgroundDelete(os.path.join(self.out_dir, ".discarded"))

    def leave_unlocalised(self, buckets) -> None:
        """Failures in `buckets` are not localised by this checker: a replay that wants only
        the verdict (a known bug's) does not pay for relaunching its kernels."""
        self._not_localised_again.update(buckets)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
        self.deleter.close()

    def stop(self) -> None:
        """Kill every route worker now and run no more cases: for a run being interrupted
        (SIGINT, SIGTERM), which must not wait for the case in flight. The case in flight comes
        back skipped; later calls to `check` raise Stopped. Safe from another thread."""
        self.stopped = True
        for worker in list(self.workers.values()):
            worker.stop()

    def worker(self, route: str) -> RouteWorker:
        if route not in self.workers:
            route_class(route)  # unknown names fail here, before a process starts
            self.workers[route] = RouteWorker(
                route, options=self.route_options.get(route), timeout_s=self.timeout_s, tag=self.tag,
                work_root=os.path.join(self.out_dir, "workers"))
            self.workers[route].triaging = self.triaging
        return self.workers[route]

    @contextlib.contextmanager
    def triage_runs(self):
        """Runs made inside are triage (reducing, bucketing, replaying a failure), not fresh
        cases: a crash among them neither counts towards abandoning the route nor clears the
        count (worker.client.RouteWorker.triaging)."""
        before, self.triaging = self.triaging, True
        for worker in self.workers.values():
            worker.triaging = True
        try:
            yield
        finally:
            self.triaging = before
            for worker in self.workers.values():
                worker.triaging = before

    def availability(self, route: str) -> tuple:
        hello = self.worker(route).hello()
        return bool(hello.get("available")), hello.get("reason", ""), hello.get("versions", {})

    def check(self, case: Case, route: str, timeout_s: float | None = None) -> Verdict:
        """timeout_s: this run's limit (default: the checker's; see torchsim_diff.run.adaptive_timeouts)."""
        if self.stopped:
            raise Stopped
        t0 = time.perf_counter()
        options = self.route_options.get(route)
        verdict = self._check(case, route, timeout_s)
        if verdict.status == Status.PASS and second_size.wanted(route, options, case):
            verdict = second_size.replay(self._check, verdict, timeout_s, NOT_HARNESS_TIMES)
        verdict.metrics.dynamic = second_size.dynamic_setting(route, options, case)
        verdict.t_case = time.perf_counter() - t0
        return verdict

    def _check(self, case: Case, route: str, timeout_s: float | None = None) -> Verdict:
        source = case.program_source()
        artifact_dir = self.artifact_dir(route, case.case_id)
        worker = self.worker(route)
        pending = worker.submit(case.to_dict(), source, artifact_dir, self.repeat, timeout_s)
        try:
            ref = self.reference(case, source)     # while the route compiles
        except Exception as exc:  # noqa: BLE001 - eager rejecting a case is a generator bug, our slip a tool_error
            worker.collect(pending)                 # keeps the worker in step; its verdict is moot
            shutil.rmtree(artifact_dir, ignore_errors=True)
            return _reference_failure(case, route, exc, artifact_dir)
        reply = worker.collect(pending)
        if reply.kind in Kind.values_where("lost_worker") and not reply.metrics.t_run:
            # a worker that hung or died reported no times: the wait was the route's, not ours
            reply.metrics.t_run = time.perf_counter() - pending.sent_at
        try:
            verdict = self._verdict(case, route, ref, reply)
        except Exception as exc:  # noqa: BLE001 - judging is our own code: whatever it raises is a tool_error
            verdict = _tool_error(case, route, "compare", exc, artifact_dir)
        verdict.artifact_dir, verdict.artifacts = artifact_dir, reply.artifacts + verdict.artifacts
        verdict.metrics.t_start = pending.t_start
        if self._localises(verdict):
            t0 = time.perf_counter()
            verdict.metrics.divergent_kernel = _localise(artifact_dir) or verdict.metrics.divergent_kernel
            verdict.metrics.t_diagnose = time.perf_counter() - t0
        if not verdict.failed:
            self.deleter.discard(artifact_dir)
            verdict.artifacts = []
        return verdict

    def artifact_dir(self, route: str, name: str) -> str:
        """The folder for a run named `name` (a case id) on `route`, under out_dir/artifacts.
        Checkers sharing `out_dir` (a run's xdist workers) often run the same case at once
        (each item's first case is the simplest one): one that passed deleted the folder the
        other's route was writing into, so a tagged checker's folders carry its tag."""
        folder = name if self.tag == DEFAULT_TAG else f"{name}-{self.tag}"
        return os.path.join(self.out_dir, "artifacts", route, folder)

    def _localises(self, verdict: Verdict) -> bool:
        """Whether this checker localises the failure: the first one of its bucket in the run."""
        if not verdict.failed or not verdict.kind.localised or verdict.bucket in self._not_localised_again:
            return False
        self._not_localised_again.add(verdict.bucket)
        return verdict.bucket is None or self._localisations.held_by(verdict.bucket, self._claimant)

    def reference(self, case: Case, source: str) -> oracle.Reference:
        """Eager and float64 results, computed once per case however many routes run it."""
        key = case.case_id
        if key != self._reference_key:
            self._reference = oracle.reference(case, load_program(source))
            self._reference_key = key
        return self._reference

    @staticmethod
    def _verdict(case: Case, route: str, ref, reply: protocol.Outcome) -> Verdict:
        verdict = Checker._judged(case, route, ref, reply)
        if reply.metrics.killed_by and not verdict.failed:
            return _killed(verdict, reply.metrics)
        return verdict

    @staticmethod
    def _judged(case: Case, route: str, ref, reply: protocol.Outcome) -> Verdict:
        metrics = reply.metrics
        if reply.abandoned:
            return Verdict(case, route, Status.SKIPPED, stage=ABANDONED, message=reply.message)
        if not reply.ok:
            kind = Kind(reply.kind)
            status = Status.FAIL if kind.fails_run else Status.UNSUPPORTED
            return Verdict(case, route, status, kind, reply.stage, reply.message, metrics=metrics)
        outputs = [protocol.payload_to_tensor(p) for p in reply.outputs]
        storages = [protocol.payload_to_tensor(p) for p in reply.storages]
        mismatch, stats = oracle.judge_case(case, ref, outputs, storages)
        if mismatch is None and metrics.host_parts:
            # part of the program ran on the host, not on the route: what the route ran agreed,
            # yet the case as a whole was not tested on it
            return Verdict(case, route, Status.UNSUPPORTED, Kind.UNSUPPORTED, "host",
                           f"ran partly on the host ({'; '.join(metrics.host_parts)}); "
                           f"the route's part agreed", stats=stats, metrics=metrics)
        if mismatch is None:
            return Verdict(case, route, Status.PASS, stats=stats, metrics=metrics)
        return Verdict(case, route, Status.FAIL, mismatch.kind, "compare", mismatch.message, mismatch.op,
                       mismatch.where, stats=stats, metrics=metrics)
