"""Worker side: compile and run cases for one route, answering requests on a pipe.

Started by `worker.client` as ``python -m torchsim_diff.worker.server ROUTE OPTIONS_JSON``,
possibly under another interpreter. Compiled programs are cached per (program source,
input layouts, dtype): Hypothesis replays a graph with other values while shrinking, and
those runs need no recompile.
"""
from __future__ import annotations

import collections
import faulthandler
import json
import os
import shutil
import sys
import time
import traceback

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.case.program_check import ProgramRejected, load_program
from torchsim_diff.worker import whose_fault, protocol
from torchsim_diff.worker.protocol import Outcome, Request

CACHE_SIZE = 64


class WorkerServer:
    """Holds the route and its compile cache; one method per request kind."""

    def __init__(self, route_name: str, options: dict):
        from torchsim_diff.routes import make_route
        self.route = make_route(route_name, options)
        self.ok, self.reason = self.route.available()
        self.cache: collections.OrderedDict = collections.OrderedDict()
        self.ready = False

    def handle(self, message: dict) -> dict:
        handler = getattr(self, "on_" + Request(message["request"]).value)
        return handler(message)

    def on_hello(self, message: dict) -> dict:
        """Availability and component versions of the route; with `warm`, the route is also
        set up and pays its one-time costs now (see _warm_up)."""
        if self.ok and message.get("warm"):
            self._warm_up()
        versions = {}
        if self.ok:
            try:
                versions = self.route.versions()
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                versions = {"error": repr(exc)}
        return {"available": self.ok, "reason": self.reason, "versions": versions,
                "pid": os.getpid(), "python": sys.version.split()[0]}

    def _warm_up(self) -> None:
        """Set the route up and let it pay its one-time costs (imports, a first compile) under
        the start-up limit, so a fresh worker's first case is timed like any other case.
        Without this, a first compile slower than the case limit (seen: about 60 s per process
        on a GPU machine's image) made every case of every restarted worker time out."""
        if self.ready:
            return
        from torchsim_diff.routes.base import allow_many_programs
        try:
            allow_many_programs()
            self.route.setup()
            self.ready = True
            self.route.warm_up()
        except Exception:  # noqa: BLE001 - a set-up failure is reported by the first case, as before
            traceback.print_exc()

    def on_shutdown(self, message: dict) -> dict:
        """Release the route's scratch state and acknowledge; the loop exits after answering."""
        try:
            self.route.close()
        except Exception:  # noqa: BLE001 - a scratch folder left behind must not fail the run
            traceback.print_exc()
        return {"bye": True}

    def on_run(self, message: dict) -> dict:
        """Compile (cached) and run one case; the answer is an outcome, never an exception."""
        if not self.ok:
            return _outcome(Kind.UNSUPPORTED, "setup", f"route unavailable: {self.reason}").to_wire()
        from torchsim_diff.routes.base import RunContext
        case, artifact_dir = message["case"], message["artifact_dir"]
        os.makedirs(artifact_dir, exist_ok=True)
        ctx = RunContext(artifact_dir=artifact_dir, case=case, options=self.route.options)
        try:
            return self._compile_and_run(message["program"], case, ctx, int(message.get("repeat", 1))).to_wire()
        finally:
            _drop_empty(artifact_dir)

    def _compile_and_run(self, source: str, case: dict, ctx, repeat: int = 1) -> Outcome:
        from torchsim_diff.case import layout
        from torchsim_diff.routes.base import RouteFailure, allow_many_programs
        if not self.ready:
            allow_many_programs()
            self.route.setup()
            self.ready = True
        try:
            inputs = layout.materialize_all(case)
        except Exception as exc:  # noqa: BLE001 - building inputs is our code, whatever raised
            return _tool_error("inputs", exc, ctx)
        stage, t0 = "compile", time.perf_counter()
        try:
            compiled, t_compile = self._compiled(source, case, ctx)
            stage = "run"
            t1 = time.perf_counter()
            outputs = compiled(inputs, ctx)
            t_run = time.perf_counter() - t1
            outputs = _as_output_tuple(outputs)
            for attempt in range(2, repeat + 1):
                differs = _rerun_differs(compiled, case, ctx, outputs, inputs)
                if differs:
                    return _outcome(Kind.NONDETERMINISTIC, "run", f"run {attempt} differs from run 1: {differs}", ctx)
        except ProgramRejected as exc:     # never written by our registry: not the compiler's doing
            return _tool_error("program", exc, ctx)
        except RouteFailure as failure:
            return _outcome(failure.kind, failure.stage, failure.message, ctx,
                            t_compile=time.perf_counter() - t0 if stage == "compile" else None)
        except Exception as exc:  # noqa: BLE001 - a compiler's exception is a finding, ours a tool_error
            if whose_fault.is_ours(exc):
                return _tool_error(stage, exc, ctx)
            kind = Kind.COMPILE_ERROR if stage == "compile" else Kind.RUNTIME_ERROR
            return _outcome(kind, stage, _describe(exc), ctx)
        try:
            payloads = [protocol.tensor_to_payload(o) for o in outputs], [protocol.storage_payload(i) for i in inputs]
        except Exception as exc:  # noqa: BLE001 - serialising results is our code
            return _tool_error("reply", exc, ctx)
        return Outcome.passed(*payloads, ctx.metrics.copy(t_compile=t_compile, t_run=t_run), _list_files(ctx.artifact_dir))

    def _compiled(self, source: str, case: dict, ctx):
        from torchsim_diff.case import layout
        key = _cache_key(source, case)
        if self.route.cacheable and key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key], 0.0
        program = load_program(source)
        t0 = time.perf_counter()
        compiled = self.route.compile(program, layout.materialize_all(case), ctx)
        t_compile = time.perf_counter() - t0
        if self.route.cacheable:
            self.cache[key] = compiled
            while len(self.cache) > CACHE_SIZE:
                self.cache.popitem(last=False)
        return compiled, t_compile


def _rerun_differs(compiled, case, ctx, outputs, inputs) -> str:
    """Run again on the same values; name the first result that differs bitwise, or ''."""
    from torchsim_diff.case import layout
    again_inputs = layout.materialize_all(case)
    again = _as_output_tuple(compiled(again_inputs, ctx))
    pairs = [(f"output {i}", a, b) for i, (a, b) in enumerate(zip(outputs, again))]
    pairs += [(f"input {spec['name']}", a, b) for spec, a, b in zip(case["inputs"], inputs, again_inputs)]
    for where, first, second in pairs:
        if protocol.tensor_to_payload(first)["data"] != protocol.tensor_to_payload(second)["data"]:
            return f"{where} changed between two runs on identical inputs"
    return ""


def _cache_key(source: str, case: dict) -> str:
    layouts = [(i["shape"], i["dtype"], i["layout"]["strides"], i["layout"]["offset"],
                i["layout"]["storage_size"]) for i in case["inputs"]]
    return json.dumps([source, layouts], sort_keys=True)


def _as_output_tuple(outputs):
    import torch
    if isinstance(outputs, torch.Tensor):
        return (outputs,)
    outputs = tuple(outputs if outputs is not None else ())
    from torchsim_diff.routes.base import RouteFailure
    for i, o in enumerate(outputs):
        if not isinstance(o, torch.Tensor):
            raise RouteFailure(Kind.RUNTIME_ERROR, "run", f"the route returned output {i} as "
                                                          f"{type(o).__name__}, not a tensor")
    return outputs


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:])
    return (text[:4000] + "\n--- traceback tail ---\n" + tail[-2000:]).strip()


def _outcome(kind: Kind, stage: str, message: str, ctx=None, t_compile=None) -> Outcome:
    metrics = ctx.metrics.copy() if ctx is not None else RunMetrics()
    if metrics.t_compile is None:
        metrics.t_compile = t_compile
    return Outcome.failed(Kind(kind), stage, message, metrics=metrics,
                          artifacts=_list_files(ctx.artifact_dir) if ctx else [])


def _tool_error(stage: str, exc: BaseException, ctx=None) -> Outcome:
    """A fault in our own code: `tool_error`, with the whole traceback kept as an artifact."""
    message, _files = whose_fault.describe_ours(exc, ctx.artifact_dir if ctx is not None else None)
    return _outcome(Kind.TOOL_ERROR, stage, message, ctx)


def _list_files(folder: str) -> list:
    found = []
    for root, _dirs, files in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, f), folder) for f in files]
    return sorted(found)


def _drop_empty(folder: str) -> None:
    if os.path.isdir(folder) and not os.listdir(folder):
        shutil.rmtree(folder, ignore_errors=True)


def _private_channel():
    """Move the protocol off fd 0/1 so compiler chatter on stdout cannot corrupt it."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(0, "rb", buffering=0), os.fdopen(reply_fd, "wb")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    route_name, options = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    faulthandler.enable()
    requests, replies = _private_channel()
    server = WorkerServer(route_name, options)
    while True:
        message = protocol.recv(requests)
        if message is None:
            return 0
        try:
            reply = server.handle(message)
        except Exception as exc:  # noqa: BLE001 - our own fault, reported as such
            reply = _tool_error("worker", exc, None).to_wire()
        protocol.send(replies, reply)
        if message["request"] == Request.SHUTDOWN.value:
            _exit_now()


def _exit_now():
    """Exit without the interpreter's teardown: with torch and a compiler loaded it takes
    about a second, which every campaign paid once per worker at its start (the route probe)
    and again at its end. The route released its own state in on_shutdown."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
