"""The route protocol: how a compiler route compiles and runs one case.

A route is a class with a `name`, `available()` and `compile()`; it is registered in
`torchsim_diff.routes` (or through the `torchsim_diff.routes` entry-point group) and
runs inside a worker process (`torchsim_diff.worker.server`), possibly under another
Python interpreter. This module, and every route module, imports only the standard
library, numpy, torch and the route's own toolchain at import time; heavy toolchains are
imported inside methods so that listing routes stays cheap.

Outcomes, not exceptions, cross the route boundary: a route signals a known failure by
raising `RouteFailure(kind, stage, message)` or `Unsupported(reason)`; the worker turns
those (and any other exception, as compile_error/runtime_error by the stage it escaped
from) into an outcome record.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any, Callable, Sequence

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.run_metrics import RunMetrics

# Seconds a case may take before its worker is killed and the case is a `timeout`: the one
# default every front end (CLI, pytest plugin, campaigns, reducer) shares. Routes that run
# their own subprocesses (Spike) keep their own limits below it, so theirs fires first.
DEFAULT_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Project:
    """An upstream project a bug is filed with: its repository, where a new issue is filed, and
    the (bug, versions) sections of its issue template."""
    name: str
    repo: str
    file_at: str
    sections: tuple


@dataclasses.dataclass(frozen=True)
class ReportFacts:
    """What a bug report says of a route, so that report/ never keys on a route's name.

    project: the upstream a failure on this route is filed with, unless its cause names another.
    upstream: that project's tracker, where it is none of the built-in ones (buckets.projects).
    compiler: upstream project -> how a report's title names the compiler on this route.
    toolchain: what repro.py needs besides torch ("": nothing; None: torchsim-diff itself).
    script: (import line before torch, the compiler's name) of a repro.py that runs the route
        itself; None: repro.py runs the case through torchsim-diff's checker.
    torch_compile: compiled by torch.compile with the campaign's settings (the settings a
        bundle writes, the ones it tries without, CompilerBisector's ablation).
    import_only: repro.py stops after the compiler's import stage (where the case cannot run
        on the host).
    plainest: rank among routes when a cause picks the case it shows (lower is plainer).
    bisect: CompilerBisector can ablate its torch.compile run (no patches of torch around it).
    dists: the distributions besides torch whose versions a report gives; settings: the
        environment lines it gives with them.
    """

    project: str = "pytorch"
    upstream: Project | None = None
    compiler: dict = dataclasses.field(default_factory=dict)
    toolchain: str | None = None
    script: tuple | None = None
    torch_compile: bool = False
    import_only: bool = False
    plainest: int = 100
    bisect: bool = False
    dists: tuple = ()
    settings: tuple = ()

    def compiler_name(self, project: str, route: str) -> str:
        return self.compiler.get(project, f"{project} ({route})")


class RouteFailure(Exception):
    """A route-detected failure with its kind and stage (e.g. Spike trap at stage 'run')."""

    def __init__(self, kind: Kind | str, stage: str, message: str, artifacts: dict | None = None):
        super().__init__(message)
        self.kind = Kind(kind)
        self.stage = stage
        self.message = message
        self.artifacts = dict(artifacts or {})


class Unsupported(RouteFailure):
    """The route cannot express this case (coverage, never a bug)."""

    def __init__(self, reason: str, stage: str = "compile"):
        super().__init__(Kind.UNSUPPORTED, stage, reason)


@dataclasses.dataclass
class RunContext:
    """What a route may use while compiling and running one case.

    artifact_dir: empty folder for this case's files (kernel sources, IR, logs); the
        harness keeps it for failing cases and removes it for passing ones.
    metrics: the route adds its own figures here (results.run_metrics.RunMetrics: its stages'
        seconds, its cost, what ran on the host).
    options: route options from the command line (e.g. {"isa": "rv64gcv", "vlen": 256}).
    """

    artifact_dir: str
    case: dict
    metrics: RunMetrics = dataclasses.field(default_factory=RunMetrics)
    options: dict = dataclasses.field(default_factory=dict)

    def artifact(self, name: str) -> str:
        """Path for an artifact file called `name` (created folders included)."""
        path = os.path.join(self.artifact_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path


class Compiled:
    """A compiled program: call it with the case's inputs (views into guarded storages).

    It returns the program's outputs and leaves mutated inputs holding their final values,
    exactly like the eager program does.
    """

    def __call__(self, inputs: Sequence[Any], ctx: RunContext) -> Sequence[Any]:  # pragma: no cover
        raise NotImplementedError


class FunctionCompiled(Compiled):
    """Wraps a plain callable taking the inputs."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, inputs, ctx):
        return self.fn(*inputs)


def allow_many_programs() -> None:
    """Lift Dynamo's per-code-object recompile limits; the worker calls this once, since
    it compiles thousands of different programs whatever the route: some torch versions compile every program through one shared
    wrapper frame, and hit the limit (FailOnRecompileLimitHit under fullgraph) after 8."""
    import torch._dynamo.config as dynamo_config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 1_000_000)


class Route:
    """Base class for routes. Subclasses set `name` and implement `compile`.

    Class attributes:
        name: registry name (``--routes NAME``).
        description: one line for `torchsim-diff routes`.
        boundary: how inputs reach the compiled code, shown by `routes` (e.g. strided
            inputs made contiguous at the boundary).
        python_env: environment variable naming the interpreter the worker runs under
            (None: the fuzzer's own interpreter).
        cacheable: whether a compiled program may be reused for other input values
            of the same graph and layouts.
        option_names: the route options it takes (``--route-option NAME.KEY=VALUE``); the
            command line refuses any other key before a worker starts (`check_options`).
        report: what a bug report says of the route (ReportFacts): its upstream, how titles
            name its compiler, what repro.py needs.
    """

    name: str = ""
    description: str = ""
    boundary: str = "inputs passed as-is (exact strides, offsets and storages)"
    python_env: str | None = None
    cacheable: bool = True
    option_names: tuple = ()
    report: ReportFacts = ReportFacts()

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Raise ValueError naming a key the route does not take, and those it does. A route
        whose values need checking does that in __init__ (or overrides this)."""
        unknown = [key for key in options if key not in cls.option_names]
        if unknown:
            takes = ", ".join(cls.option_names) if cls.option_names else "no options"
            raise ValueError(f"route {cls.name} has no option {unknown[0]!r}; it takes {takes}")

    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})

    @classmethod
    def interpreter(cls) -> str:
        """The Python interpreter this route's worker runs under."""
        if cls.python_env and os.environ.get(cls.python_env):
            return os.environ[cls.python_env]
        return sys.executable

    @classmethod
    def worker_env(cls, options: dict) -> dict:
        """Environment variables the worker needs before it imports anything
        (e.g. TRITON_INTERPRET=1 must be set before triton is imported)."""
        return {}

    def available(self) -> tuple[bool, str]:
        """(True, versions) when the route can run here, else (False, reason)."""
        return True, ""

    def setup(self) -> None:
        """Called once in the worker before the first case (env, shims)."""

    def warm_up(self) -> None:
        """Called once in a fresh worker after setup, before its first case is timed: pay
        one-time costs here (imports, a compiler's first-use initialisation)."""
        import torch
        torch.zeros(1).add_(1)

    def compile(self, program: Callable, example_inputs: Sequence[Any], ctx: RunContext) -> Compiled:
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the worker is asked to shut down: remove what setup() made
        (scratch folders, helper processes). The worker then exits without the interpreter's
        own teardown (a second with torch loaded), so nothing may be left to atexit."""

    def versions(self) -> dict:
        """Versions of every component the route uses, for reports."""
        import torch
        return {"torch": torch.__version__}
