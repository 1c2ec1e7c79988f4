"""Fuzzer side of a route worker: start, feed, time out, restart.

One `RouteWorker` per route per fuzzing process. A segfault or abort in the worker
becomes a `crash` outcome, a hang a `timeout` outcome; either way the worker is replaced
before the next case, so the campaign goes on. A worker that dies while starting is a
`crash` at stage `start` (not an unavailable route: it never said it cannot run) and is
started again for the next case. Restarts are capped as pytest-xdist caps them: after
MAX_CRASHES_IN_A_ROW crashes that took the worker down with no case completing in between,
the worker runs the plainest case there is (relu of four numbers). If that runs, the route works
and the crashes were their cases' own: the count starts again (Hypothesis draws runs of similar
cases, and five known torch-mlir aborts in a row once abandoned mlir for the rest of a 10-minute
campaign). If it does not, the route is abandoned with one line on stderr and its remaining
cases are skipped; the crashes stay findings. Only fresh cases count: runs made while triaging a failure (reducing a
crash re-runs it dozens of times) neither count nor clear the count. A crash the route
reports from a live worker (a Spike trap) restarts nothing and is not counted: Hypothesis
draws runs of similar cases, and five traps of one bug in a row once ended a triton-spike
campaign at its 900th case of 2,000.

A worker killed from outside (someone's `kill -9`, a SIGTERM meant for another process) is
no finding: see `collect` for how such a death is told from a crash of the route's own.
`stop` ends every worker at once for a run that is being interrupted.
"""
from __future__ import annotations

import dataclasses
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from torchsim_diff import bytecode
from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes import route_class
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S
from torchsim_diff.worker import protocol
from torchsim_diff.worker.protocol import Outcome, Request

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTUP_TIMEOUT_S = 180.0
MAX_CRASHES_IN_A_ROW = 5
PLAINEST_CASE = {"schema": 1, "dtype": "float32", "values": {"seed": 0},
                 "inputs": [{"name": "x0", "shape": [4], "dtype": "float32", "domain": {"kind": "real"},
                             "layout": {"classes": ["contiguous"], "strides": [1], "offset": 0, "storage_size": 4},
                             "mutated": False}],
                 "nodes": [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}], "outputs": ["v0"]}
LOG_TAIL_CHARS = 3000
# Signals that a crashing program does not raise on itself (a segfault is SIGSEGV, an abort
# SIGABRT, a simulator trap is reported by a live worker): a worker that dies of one of these
# was killed by another process (a user, a supervisor, the OOM killer).
OUTSIDE_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOPPED = "the run is ending: its route workers were stopped"


class WorkerGone(Exception):
    """The worker process ended or stopped answering."""

    def __init__(self, kind: Kind, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


@dataclasses.dataclass
class Pending:
    """A case sent to a worker and not yet answered; `outcome` is set when there is nothing
    to wait for (the route was refused, abandoned or the send failed). counted: whether the
    outcome counts towards the crash cap. t_start: seconds `submit` spent starting and warming
    the worker first (the first case, or the one after a crash)."""

    outcome: Outcome | None = None
    counted: bool = True
    t_start: float = 0.0
    timeout_s: float = DEFAULT_TIMEOUT_S
    log_mark: int = 0
    request: dict | None = None       # submit's arguments, to run the case again (collect)
    deadline: float = dataclasses.field(default=0.0)

    sent_at: float = dataclasses.field(default_factory=time.perf_counter)

    def __post_init__(self):
        self.deadline = time.monotonic() + self.timeout_s


class RouteWorker:
    """A persistent subprocess compiling and running cases for one route.

    work_root: folder for this worker's Inductor cache, log and scratch artifacts;
        each worker gets its own cache directory so parallel workers never share one.
    """

    def __init__(self, route_name: str, *, options: dict | None = None, work_root: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, tag: str = "0", max_crashes: int | None = None):
        self.route_name, self.options = route_name, dict(options or {})
        self.timeout_s = timeout_s
        self.work_root = work_root or tempfile.mkdtemp(prefix="torchsim-diff-")
        self.tag = tag
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.work_root, f"worker-{route_name}-{tag}.log")
        self.restarts = 0
        self.max_crashes = max_crashes or MAX_CRASHES_IN_A_ROW
        self.crashes_in_a_row = 0
        self.triaging = False          # runs of triage (run.checker.Checker.triage_runs): not counted
        self.start_failed = False
        self.abandoned: str | None = None
        self.stopping = False             # set by stop(): no more starts, no more cases
        self.died_of: int | None = None   # the signal the last worker process died of, if one
        self._hello: dict | None = None
        self._warmed = False
        self._lock = threading.Lock()     # stop() may come from another thread than the cases'

    # -- lifecycle -------------------------------------------------------------------
    def start(self, warm: bool = False) -> dict:
        cls = route_class(self.route_name)
        os.makedirs(self.work_root, exist_ok=True)
        with self._lock:
            if self.stopping:
                raise WorkerGone(Kind.TOOL_ERROR, STOPPED)
            self._log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [cls.interpreter(), "-m", "torchsim_diff.worker.server", self.route_name, json.dumps(self.options)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=self.environment(),
                cwd=self.work_root)
        self.died_of = None
        self._warmed = False
        self._hello = self._greet(warm)
        return self._hello

    def environment(self) -> dict:
        """The worker process's environment: ours, plus its own Inductor cache and the route's settings."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.work_root, f"inductor-{self.route_name}-{self.tag}")
        env["PYTHONFAULTHANDLER"] = "1"
        # Cases are tiny: extra threads only add contention between parallel workers (a pool of
        # one compile process per core in each of 16 workers starved them all).
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        bytecode.redirect(env)
        env.update(route_class(self.route_name).worker_env(self.options))
        return env

    def _greet(self, warm: bool) -> dict:
        hello = self._request({"request": Request.HELLO.value, "warm": warm}, STARTUP_TIMEOUT_S)
        self._warmed = warm
        return hello

    def hello(self, warm: bool = False) -> dict:
        """Availability, reason and versions (starts the worker if needed). With `warm`, the
        worker also sets its route up and pays one-time costs within STARTUP_TIMEOUT_S, so
        the first case's limit is not spent on start-up.

        A worker that dies before answering has not said the route cannot run: the reply
        says available, with `start_failed` set, and its cases become `crash` at `start`."""
        if self._hello is None or not self.alive() or (warm and not self._warmed):
            try:
                if self.alive():
                    self._hello = self._greet(warm)
                else:
                    self.start(warm)
                self.start_failed = False
            except WorkerGone as gone:
                self._kill()
                self.start_failed = True
                self._hello = {"available": True, "start_failed": True, "versions": {},
                               "reason": f"worker died during start-up: {gone.message}"}
        return self._hello

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            try:
                self._request({"request": Request.SHUTDOWN.value}, 10.0)
                self.proc.wait(timeout=10)
            except (WorkerGone, subprocess.TimeoutExpired):
                self._kill()
        self.proc = None

    def stop(self) -> None:
        """End the worker now and start no other (a run being interrupted): the case in
        flight, if any, comes back as a skipped outcome. Safe from another thread."""
        with self._lock:
            self.stopping = True
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- cases -----------------------------------------------------------------------
    def run(self, case: dict, program: str, artifact_dir: str, repeat: int = 1,
            timeout_s: float | None = None) -> Outcome:
        """Run one case; always returns an Outcome, never raises for the worker's sake.
        timeout_s: this call's limit (default: the worker's timeout_s)."""
        return self.collect(self.submit(case, program, artifact_dir, repeat, timeout_s))

    def submit(self, case: dict, program: str, artifact_dir: str, repeat: int = 1,
               timeout_s: float | None = None) -> "Pending":
        """Send one case and return at once, so the caller can work (the float64 reference)
        while the route compiles; `collect` gives its Outcome. One case in flight at a time."""
        if self.abandoned:
            return Pending(Outcome.failed(Kind.CRASH, "start", self.abandoned, abandoned=True), counted=False)
        if self.stopping:
            return Pending(_stopped(), counted=False)
        request = dict(case=case, program=program, artifact_dir=artifact_dir, repeat=repeat, timeout_s=timeout_s)
        t_start = time.perf_counter()
        if not self.alive() or not self._warmed:
            if self.proc is not None and not self.alive():
                self.restarts += 1
            self.hello(warm=True)
        t_start = time.perf_counter() - t_start
        if self.stopping:
            return Pending(_stopped(), counted=False)
        if self.start_failed:
            return Pending(Outcome.failed(Kind.CRASH, "start", self._hello["reason"]), t_start=t_start,
                           request=request)
        if not self._hello.get("available"):
            reason = f"route unavailable: {self._hello.get('reason')}"
            return Pending(Outcome.failed(Kind.UNSUPPORTED, "setup", reason), counted=False)
        message = {"request": Request.RUN.value, "case": case, "program": program, "artifact_dir": artifact_dir,
                   "repeat": repeat}
        pending = Pending(timeout_s=timeout_s or self.timeout_s, log_mark=self._log_size(), t_start=t_start,
                          request=request)
        try:
            protocol.send(self.proc.stdin, message)
        except (BrokenPipeError, OSError):
            pending.outcome = Outcome.failed(Kind.CRASH, "run", self._death_message(pending.log_mark))
            self._kill()
        return pending

    def collect(self, pending: "Pending") -> Outcome:
        """The Outcome of the case `submit` sent (waits for the worker within its limit).

        A worker that died of an outside signal (OUTSIDE_SIGNALS) while it ran the case or
        started for it may have been killed by anyone, so the case runs once more on a fresh
        worker, and that run's outcome is the case's. When it fails (the same death again, as
        under the OOM killer, or any other failure) the death was the case's doing, or at least
        the failure is real. When it completes, its metrics carry `killed_by` (the signal) and
        `killed_at` (the stage), and a case that then passes its judging is recorded as a
        `tool_error` with no bucket (Checker._verdict): the death was not the case's doing.
        Only two kills of one case in a row, on two workers, pass for the case's own."""
        outcome = self._outcome_of(pending)
        if self.stopping and outcome.kind in Kind.values_where("lost_worker"):
            return _stopped()                  # killed by stop(): nothing the route did
        if not pending.counted:
            return outcome
        if pending.request is not None and self._killed_from_outside(outcome):
            outcome = self._run_again_after_a_kill(pending.request, outcome)
        # only a crash that took the worker down costs a restart: a crash the route reports
        # from a live worker (a Spike trap in the simulated program) is a finding like any other
        took_worker_down = outcome.kind == Kind.CRASH.value and not self.alive()
        if self.triaging:      # reducing a crash re-runs it: only fresh cases count towards the cap
            return outcome
        return self._crashed(outcome) if took_worker_down else self._survived(outcome)

    def _outcome_of(self, pending: "Pending") -> Outcome:
        if pending.outcome is not None:
            return pending.outcome
        try:
            return Outcome.from_wire(self._receive(pending.timeout_s, pending.log_mark, pending.deadline))
        except WorkerGone as gone:
            self._kill()
            return Outcome.failed(gone.kind, "run", gone.message)

    def _killed_from_outside(self, outcome: Outcome) -> bool:
        return (outcome.kind == Kind.CRASH.value and not outcome.abandoned and not self.alive()
                and self.died_of in OUTSIDE_SIGNALS)

    def _run_again_after_a_kill(self, request: dict, killed: Outcome) -> Outcome:
        """The case once more on a fresh worker (see collect)."""
        name = signal.Signals(self.died_of).name
        again = self._outcome_of(self.submit(**request))
        if self.stopping:
            return _stopped()
        if again.ok or not Kind(again.kind).fails_run:
            again.metrics.killed_by, again.metrics.killed_at = name, killed.stage
        return again

    def _survived(self, outcome: Outcome) -> Outcome:
        self.crashes_in_a_row = 0
        return outcome

    def _crashed(self, outcome: Outcome) -> Outcome:
        """Count a crash; at the cap, abandon the route with one line saying why, unless it
        still runs the plainest case (module docstring)."""
        self.crashes_in_a_row += 1
        if self.crashes_in_a_row >= self.max_crashes and self._runs_the_plainest_case():
            self.crashes_in_a_row = 0
        elif self.crashes_in_a_row >= self.max_crashes:
            first = outcome.message.splitlines()[0] if outcome.message else "no message"
            self.abandoned = (f"route {self.route_name} abandoned after {self.crashes_in_a_row} crashes in a row "
                              f"(last: {first}); its remaining cases are skipped")
            sys.stderr.write(f"torchsim-diff: {self.abandoned}\n")
        return outcome

    def _runs_the_plainest_case(self) -> bool:
        """Whether the route compiles and runs PLAINEST_CASE (its values are not judged). The
        run is no fresh case: it neither counts towards the cap nor clears it."""
        from torchsim_diff.case.graph import Case
        case = Case.from_dict(PLAINEST_CASE)
        artifact_dir = os.path.join(self.work_root, "plainest-case")
        was, self.triaging = self.triaging, True
        try:
            outcome = self.collect(self.submit(case.to_dict(), case.program_source(), artifact_dir))
        finally:
            self.triaging = was
            shutil.rmtree(artifact_dir, ignore_errors=True)
        return outcome.ok

    # -- wire ------------------------------------------------------------------------
    def _request(self, message: dict, timeout_s: float) -> dict:
        log_mark = self._log_size()
        try:
            protocol.send(self.proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise WorkerGone(Kind.CRASH, self._death_message(log_mark)) from None
        return self._receive(timeout_s, log_mark)

    def _receive(self, timeout_s: float, log_mark: int, deadline: float | None = None) -> dict:
        deadline = deadline or time.monotonic() + timeout_s
        header = self._read(protocol.HEADER.size, deadline, log_mark, timeout_s)
        blob = self._read(protocol.body_length(header), deadline, log_mark, timeout_s)
        return protocol.decode(blob)

    def _read(self, n: int, deadline: float, log_mark: int, timeout_s: float) -> bytes:
        fd = self.proc.stdout.fileno()
        chunks, left = [], n
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while left:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    self._kill()
                    raise WorkerGone(Kind.TIMEOUT, f"no answer within {timeout_s:g} s (worker killed)")
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    raise WorkerGone(Kind.CRASH, self._death_message(log_mark))
                chunks.append(chunk)
                left -= len(chunk)
        return b"".join(chunks)

    def _log_size(self) -> int:
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def _death_message(self, log_mark: int) -> str:
        try:
            code = self.proc.wait(timeout=10)
            self.died_of = -code if code < 0 else None
        except subprocess.TimeoutExpired:
            self._kill()                 # our own SIGKILL: not a death from outside
            code, self.died_of = self.proc.returncode, None
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with status {code}"
        with open(self.log_path, "rb") as log:
            log.seek(log_mark)
            tail = log.read().decode("utf-8", "replace")[-LOG_TAIL_CHARS:]
        return f"worker {how}\n{tail}".strip()


def _stopped() -> Outcome:
    """The outcome of a case cut short, or not started, by RouteWorker.stop: not run."""
    return Outcome.failed(Kind.TOOL_ERROR, "start", STOPPED, abandoned=True)
