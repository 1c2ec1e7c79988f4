"""RunMetrics: what one run of one case measured and noticed, besides the values it computed.

Three hands fill it, each its own fields. The route, while it compiles and runs the case
(routes.base.RunContext.metrics): its tools' seconds per stage, its cost figure, what ran on the
host instead of the target. The route worker: the compile and run times. The checker, around
the run: the worker's start-up, the localisation of a wrong value, a second size, a batch, a
kill from outside. Some of these decide verdicts (`killed_by`, `host_parts`), so they are
fields, never string keys.

It crosses the worker pipe as a plain dict (to_wire / from_wire), as worker.protocol.Outcome
does. Standard library only: route workers import it.

    >>> metrics = RunMetrics()
    >>> metrics.add_stage("clang", 0.25)
    >>> metrics.stage_s
    {'clang': 0.25}
"""
from __future__ import annotations

import contextlib
import dataclasses
import time

# Seconds of a case that are not the harness's per-case overhead: the route compiling and
# running it, starting its worker (once, or after a crash), and localising a failure.
NOT_HARNESS_TIMES = ("t_compile", "t_run", "t_start", "t_diagnose")


@dataclasses.dataclass
class RunMetrics:
    """One run's figures; see the module docstring for who fills which.

    The route's: stage_s (seconds per tool stage: "export", "lowering", "clang", "spike", ...),
    cost and cost_unit (the target's own figure: instructions retired on Spike, TOGSim cycles),
    cost_per_launch (one cost per kernel launch), vlen (the vector length the target ran at),
    host_parts (parts of the case that ran on the host, not on the target), same_function
    (the compiled function of an earlier case was reused), kernels and kernel_launches (Triton
    kernels generated and launched), versions (what the route says it ran), divergent_kernel
    (the first kernel launch whose values differ, where the route finds it itself).
    The worker's: t_compile, t_run. The checker's: t_start (the worker's start-up), t_diagnose
    (localising a failure), divergent_kernel (where localising found it), dynamic (the
    dynamic-shape setting the case ran under), second_size (the rerun at another size), batch
    (cases compiled together), killed_by and killed_at (a signal from outside, and the stage it
    came in).
    """

    t_compile: float | None = None
    t_run: float | None = None
    stage_s: dict = dataclasses.field(default_factory=dict)
    cost: float | None = None
    cost_unit: str | None = None
    cost_per_launch: list = dataclasses.field(default_factory=list)
    vlen: int | None = None
    host_parts: list = dataclasses.field(default_factory=list)
    same_function: bool | None = None
    kernels: int | None = None
    kernel_launches: int | None = None
    versions: dict | None = None
    divergent_kernel: dict | None = None
    t_start: float | None = None
    t_diagnose: float | None = None
    dynamic: object = None
    second_size: dict | None = None
    batch: int | None = None
    killed_by: str | None = None
    killed_at: str | None = None

    def add_stage(self, stage: str, seconds: float) -> None:
        """Add `seconds` to the time of `stage` (a stage may run more than once per case)."""
        self.stage_s[stage] = self.stage_s.get(stage, 0.0) + seconds

    @contextlib.contextmanager
    def timed(self, stage: str):
        """Add the seconds the block takes to `stage`, however it ends."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add_stage(stage, time.perf_counter() - started)

    def note_host_part(self, what: str) -> None:
        if what not in self.host_parts:
            self.host_parts.append(what)

    def outside_harness_s(self) -> float:
        """Seconds of the case spent in the route, its start-up and its localisation."""
        return sum(getattr(self, name) or 0.0 for name in NOT_HARNESS_TIMES)

    def copy(self, **changes) -> "RunMetrics":
        return dataclasses.replace(self.from_wire(self.to_wire()), **changes)

    def to_wire(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, message: dict | None) -> "RunMetrics":
        """The metrics a wire dict holds; names this version does not know are left out (a
        worker of another version may send more)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (message or {}).items() if k in known})
