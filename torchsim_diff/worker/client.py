"""Fuzzer side of a route worker: start, feed, time out, restart.

One `RouteWorker` per route per fuzzing process. A segfault or abort in the worker
becomes a `crash` outcome, a hang a `timeout` outcome; either way the worker is replaced
before the next case, so the campaign goes on.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time

from torchsim_diff.kinds import Kind
from torchsim_diff.routes import route_class
from torchsim_diff.worker import protocol
from torchsim_diff.worker.protocol import Request

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TIMEOUT_S = 120.0
STARTUP_TIMEOUT_S = 180.0
LOG_TAIL_CHARS = 3000


class WorkerGone(Exception):
    """The worker process ended or stopped answering."""

    def __init__(self, kind: Kind, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


class RouteWorker:
    """A persistent subprocess compiling and running cases for one route.

    work_root: folder for this worker's Inductor cache, log and scratch artifacts;
        each worker gets its own cache directory so parallel workers never share one.
    """

    def __init__(self, route_name: str, *, options: dict | None = None, work_root: str | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, tag: str = "0"):
        self.route_name, self.options = route_name, dict(options or {})
        self.timeout_s = timeout_s
        self.work_root = work_root or tempfile.mkdtemp(prefix="torchsim-diff-")
        self.tag = tag
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.work_root, f"worker-{route_name}-{tag}.log")
        self.restarts = 0
        self._hello: dict | None = None

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> dict:
        cls = route_class(self.route_name)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.work_root, f"inductor-{self.route_name}-{self.tag}")
        env["PYTHONFAULTHANDLER"] = "1"
        env.update(cls.worker_env(self.options))
        os.makedirs(self.work_root, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [cls.interpreter(), "-m", "torchsim_diff.worker.server", self.route_name, json.dumps(self.options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=self.work_root)
        self._hello = self._request({"request": Request.HELLO.value}, STARTUP_TIMEOUT_S)
        return self._hello

    def hello(self) -> dict:
        """Availability, reason and versions (starts the worker if needed)."""
        if self._hello is None or not self.alive():
            try:
                self.start()
            except WorkerGone as gone:
                self._hello = {"available": False, "reason": f"worker failed to start: {gone.message}",
                               "versions": {}}
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

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # -- cases -----------------------------------------------------------------------
    def run(self, case: dict, program: str, artifact_dir: str, repeat: int = 1) -> dict:
        """Run one case; always returns an outcome dict (see worker.server)."""
        if not self.alive():
            if self.proc is not None:
                self.restarts += 1
            self.hello()
        if not self._hello.get("available"):
            return {"ok": False, "kind": Kind.UNSUPPORTED.value, "stage": "setup",
                    "message": f"route unavailable: {self._hello.get('reason')}", "metrics": {}, "artifacts": []}
        message = {"request": Request.RUN.value, "case": case, "program": program, "artifact_dir": artifact_dir,
                   "repeat": repeat}
        try:
            return self._request(message, self.timeout_s)
        except WorkerGone as gone:
            self._kill()
            return {"ok": False, "kind": gone.kind.value, "stage": "run", "message": gone.message,
                    "metrics": {}, "artifacts": []}

    # -- wire ------------------------------------------------------------------------
    def _request(self, message: dict, timeout_s: float) -> dict:
        log_mark = self._log_size()
        try:
            protocol.send(self.proc.stdin, message)
        except (BrokenPipeError, OSError):
            raise WorkerGone(Kind.CRASH, self._death_message(log_mark)) from None
        return self._receive(timeout_s, log_mark)

    def _receive(self, timeout_s: float, log_mark: int) -> dict:
        deadline = time.monotonic() + timeout_s
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
        except subprocess.TimeoutExpired:
            self._kill()
            code = self.proc.returncode
        how = f"killed by {signal.Signals(-code).name}" if code and code < 0 else f"exited with status {code}"
        with open(self.log_path, "rb") as log:
            log.seek(log_mark)
            tail = log.read().decode("utf-8", "replace")[-LOG_TAIL_CHARS:]
        return f"worker {how}\n{tail}".strip()
