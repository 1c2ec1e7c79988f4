"""Self-check before NEW: a bucket is reported NEW only when what we hand people reproduces it.

For each bucket new to the history, its smallest record is checked twice:

1. its case (the reduced one when there is one: what the bundle ships) is replayed on the
   route REPLAYS times; a failure that does not fail again every time (a flake, a timeout
   under load) is caught here;
2. its bundle is written and its repro.py run in a fresh process, exactly as a maintainer
   runs it (a plain one where torchsim-diff cannot be imported): exit status 1 (reproduces)
   confirms the bucket.

Anything else leaves the bucket unconfirmed, with the reason: listed apart, never NEW, and
kept out of the bucket history, so that a later run that meets it checks it again. What was
found is kept in the run folder's self_check.json (bucket -> confirmed, reason, bundle).

    >>> settled = settle_new_buckets(findings, store, out_dir, checker)
    >>> settled.new, settled.bundles, settled.unconfirmed      # bucket -> why, for the unconfirmed
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.case.validate import validate_case
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.buckets.bucket_history import smallest_per_bucket

REPLAYS = 2                       # replays of the case on the route, each must fail
REPRODUCES = 1                    # repro.py's exit status when the bug is there
REPRO_JOBS = max(1, min(8, (os.cpu_count() or 2) // 2))   # repro.py runs at once (each compiles)
SCRIPT_TIMEOUT_S = 600.0          # repro.py's own limit: a fresh Python, torch and a compile
RESULTS_FILE = "self_check.json"  # in the run folder: bucket -> SelfCheck fields
OUT_OF_TIME = "not self-checked: the run's budget ran out first"
MIN_REPLAY_S = 5.0                # a replay with less time than this left would say nothing


@dataclasses.dataclass(frozen=True)
class SelfCheck:
    """What checking one bucket found. bundle: its folder (None when none could be written)."""

    bucket: str
    confirmed: bool
    reason: str = ""
    bundle: str | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Settled:
    """A run's new buckets after their self-checks: NEW ones (confirmed), their bundles, and
    the unconfirmed ones with the reason (bucket -> text)."""

    new: set
    bundles: dict
    unconfirmed: dict
    interrupted: KeyboardInterrupt | None = None     # what ended the checks early, if anything


def settle_new_buckets(findings, store, out_dir: str, checker, *, interrupted: bool = False,
                       deadline: float | None = None, settle: bool = True) -> Settled:
    """Self-check the buckets of `findings` (failing records, known bugs left out) that are
    new to `store` (a buckets.bucket_history.BucketStore; every bucket when None). checker: a
    Checker, or a callable giving a context manager of one (started only when there is a
    bucket to check). An interrupted run checks nothing, and an interrupt during the checks
    ends them: those buckets stay unconfirmed (Settled.interrupted holds the interrupt), as do
    those not checked by `deadline` (time.time(); a campaign's budget end).
    Unconfirmed buckets are taken back out of the history; the NEW ones are settled there
    (BucketStore.settle) unless `settle` is false: then the caller settles them once it has
    told them (campaign.fuzz.settle_told), so that a run killed before it printed them leaves
    them new to the next run."""
    candidates = set(store.new) if store is not None else None
    chosen = _to_check(findings, candidates)
    checks, stopped = {}, None
    try:
        if chosen and not interrupted:
            if callable(checker):
                with checker() as started:
                    self_check_buckets(chosen, out_dir, started, into=checks, deadline=deadline)
            else:
                self_check_buckets(chosen, out_dir, checker, into=checks, deadline=deadline)
    except KeyboardInterrupt as exc:
        stopped = exc
    for bucket in chosen:
        checks.setdefault(bucket, SelfCheck(bucket, False, "not self-checked: the run was interrupted"))
    if checks:
        _save(checks, os.path.join(out_dir, RESULTS_FILE))
    unconfirmed = {b: c.reason for b, c in checks.items() if not c.confirmed}
    for bucket in unconfirmed:
        if store is not None:
            store.forget(bucket)
    for bucket in set(store.new) if store is not None and settle else ():
        store.settle(bucket)
    bundles = {b: c.bundle for b, c in checks.items() if c.confirmed}
    return Settled(set(store.new) if store is not None else set(bundles), bundles, unconfirmed, stopped)


def _to_check(findings, candidates) -> dict:
    """bucket -> its smallest record, for the new buckets among `findings`."""
    return {bucket: record for bucket, record in smallest_per_bucket(findings).items()
            if record.is_new_failure and (candidates is None or bucket in candidates)}


def _save(checks: dict, path: str) -> None:
    from torchsim_diff.buckets.corpus import write_atomic
    write_atomic(path, {bucket: check.to_dict() for bucket, check in sorted(checks.items())})


def self_check_buckets(chosen: dict, out_dir: str, checker=None, *, replays: int = REPLAYS,
                       into: dict | None = None, say=None, deadline: float | None = None) -> dict:
    """bucket -> SelfCheck for each bucket -> record of `chosen`; bundles go under
    OUT/bundles/<bucket>. The replays run one after the other on the checker (without one,
    they are left to repro.py's run); the repro.py runs, each its own process, REPRO_JOBS at
    once. `into` is filled as checks finish (what an interrupt leaves is kept). With a
    `deadline` (time.time()), hangs go last (a replay of one costs a whole time limit), no
    check or replay begins that cannot end by then, and the repro.py runs still going at it
    are killed: those buckets are OUT_OF_TIME."""
    checks = {} if into is None else into
    say = say or _say
    bundles = {}
    order = sorted(chosen.items(), key=lambda item: item[1].kind == Kind.TIMEOUT.value) if deadline else chosen.items()
    for k, (bucket, record) in enumerate(order, 1):
        if deadline is not None and time.time() >= deadline:
            checks[bucket] = SelfCheck(bucket, False, OUT_OF_TIME)
            continue
        say(f"self-check {k}/{len(chosen)}: bucket {bucket} on {record.route}")
        found = _before_repro(record, os.path.join(out_dir, "bundles", bucket), checker, replays, deadline)
        if isinstance(found, SelfCheck):
            checks[bucket] = found
        else:
            bundles[bucket] = found
    with _ReproRuns() as runs:
        try:
            for bucket, (status, last_line) in runs.each(bundles, deadline):
                checks[bucket] = _verdict_of_repro(bucket, bundles[bucket], status, last_line)
                say(f"self-check: bucket {bucket} "
                    f"{'confirmed' if checks[bucket].confirmed else checks[bucket].reason}")
        except TimeoutError:
            for bucket, bundle in bundles.items():
                checks.setdefault(bucket, SelfCheck(bucket, False, OUT_OF_TIME, bundle))
            say(f"self-check: {OUT_OF_TIME}")
    return checks


def _say(line: str) -> None:
    sys.stderr.write(f"torchsim-diff: {line}\n")
    sys.stderr.flush()


def _before_repro(record, folder: str, checker, replays: int, deadline: float | None = None):
    """The replays, then the bundle: its folder, or the SelfCheck that ends the check early."""
    bucket = record.bucket
    case = _shipped_case(record)
    if case is None:
        return SelfCheck(bucket, False, "the record holds no case that validates")
    if checker is not None:
        flaky = _replays_fail(checker, case, record, replays, deadline)
        if flaky:
            return SelfCheck(bucket, False, flaky)
    from torchsim_diff.report.bundles import BundleError, write_bundle
    try:
        return write_bundle(record, folder)
    except (BundleError, OSError) as exc:
        return SelfCheck(bucket, False, f"no bundle could be written: {exc}")


def _verdict_of_repro(bucket: str, bundle: str, status, last_line: str) -> SelfCheck:
    if status == REPRODUCES:
        return SelfCheck(bucket, True, "", bundle)
    return SelfCheck(bucket, False, f"its repro.py exits {status}, not 1: {last_line}", bundle)


def _shipped_case(record) -> Case | None:
    """The case the bundle ships: the reduced case when the record has one."""
    data = record.reduced_case if isinstance(record.reduced_case, dict) else record.case
    try:
        return validate_case(data)
    except (CaseError, TypeError, ValueError):
        return None


def _replays_fail(checker, case: Case, record, replays: int, deadline: float | None = None) -> str:
    """'' when every replay fails; else why the failure is not confirmed (OUT_OF_TIME when a
    replay could not end by `deadline`: a hang's needs its whole time limit)."""
    hang = record.kind == Kind.TIMEOUT.value
    count = 1 if hang else replays     # each replay of a hang costs its limit
    outcomes = []
    with checker.triage_runs():
        for _ in range(count):
            left = None if deadline is None else deadline - time.time()
            if left is not None and left < (checker.timeout_s if hang else MIN_REPLAY_S):
                return OUT_OF_TIME
            outcomes.append(checker.check(case, record.route, timeout_s=None if left is None else
                                          min(checker.timeout_s, left)))
    # A skipped replay (the route was abandoned in this checker) says nothing: repro.py decides.
    passed = [v for v in outcomes if not v.failed and v.status != Status.SKIPPED]
    if not passed:
        return ""
    statuses = ", ".join(sorted({v.status.value if not v.failed else v.kind.value for v in outcomes}))
    return (f"flaky: the case failed once, then {len(passed)} of {count} replays on {record.route} "
            f"did not fail ({statuses})")


def run_repro(bundle: str, python: str = sys.executable, timeout_s: float = SCRIPT_TIMEOUT_S,
              started=None) -> tuple:
    """(exit status or 'timeout', repro.py's last line: of its output, else of its errors) of
    one run in a fresh process (report.repro_runs.run_repro); the bundle's ISSUE.md then quotes
    that run."""
    from torchsim_diff.report.issue_text import quoted_run, requote_run
    from torchsim_diff.report.repro_runs import TIMED_OUT, run_repro as run_in_a_fresh_process
    status, out, err = run_in_a_fresh_process(bundle, python, timeout_s, started)
    requote_run(bundle, quoted_run(bundle, status, out, timeout_s))
    if status == TIMED_OUT:
        return status, f"no result within {timeout_s:g} s"
    lines = [ln for ln in out.splitlines() if ln.strip()] or [ln for ln in err.splitlines() if ln.strip()]
    return status, (lines[-1].strip()[:200] if lines else "no output")


class _ReproRuns:
    """repro.py runs of several bundles, REPRO_JOBS at once; leaving early (an interrupt)
    kills the ones still running. A plain repro.py runs where torchsim-diff cannot be
    imported (a venv that sees torch alone), as a maintainer runs it: one that leans on the
    harness by mistake fails its check."""

    def __init__(self):
        self.pool = concurrent.futures.ThreadPoolExecutor(REPRO_JOBS, thread_name_prefix="torchsim-diff-repro")
        self.running: set = set()
        self.venv = tempfile.mkdtemp(prefix="torchsim-diff-torch-only-")
        self.plain_python = None
        self.lock = threading.Lock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc in list(self.running):
            if proc.poll() is None:
                proc.kill()
        self.pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(self.venv, ignore_errors=True)

    def python_for(self, folder: str) -> str:
        """The torch-only venv's python for a plain repro.py; this one for a script that
        drives the chain through torchsim-diff (its toolchain), or where no venv can be made."""
        try:
            with open(os.path.join(folder, "repro.py"), encoding="utf-8") as handle:
                if "from torchsim_diff" in handle.read():
                    return sys.executable
        except OSError:
            return sys.executable        # the run itself says what is missing
        with self.lock:
            if self.plain_python is None:
                from torchsim_diff.report.plain_script import torch_only_python
                try:
                    self.plain_python = torch_only_python(self.venv)
                except (OSError, subprocess.CalledProcessError):
                    self.plain_python = sys.executable
        return self.plain_python

    def each(self, bundles: dict, deadline: float | None = None):
        """(bucket, (status, last line)) as each run ends; TimeoutError at `deadline`."""
        futures = {self.pool.submit(self._run, folder): bucket for bucket, folder in bundles.items()}
        wait_s = None if deadline is None else max(0.0, deadline - time.time())
        for future in concurrent.futures.as_completed(futures, timeout=wait_s):
            yield futures[future], future.result()

    def _run(self, folder: str) -> tuple:
        return run_repro(folder, self.python_for(folder), started=self.running.add)
