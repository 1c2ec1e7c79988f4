"""Timing checked on the routes' real kernels: a case's triton-spike launches through TOGSim.

For a case, `time_case` runs it on route `triton-spike` in this process (its launches are
captured with the instructions Spike retired for each, `kernel_togs`), or on route `spike`
(one kernel per linalg op of its lowered module, `linalg_togs`), writes each kernel's TOG,
runs TOGSim on it (twice, and once more on twice the cores) with a time limit, and applies every
check that needs no second model (`checks`). Each kernel gives a `KernelTiming` row: cycles,
cycles over the DRAM and compute bounds, unit utilisation, and the checks that failed, each a
bucket with its reproducer (`togsim_buckets`) unless it is a known TOGSim defect.

Its command line is campaign.time_kernels.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os

from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.timing import checks
from torchsim_diff.timing.hw_config import HardwareConfig
from torchsim_diff.timing.kernel_togs import NotTimed, launch_tog
from torchsim_diff.timing.linalg_text import Unreadable, parse_module
from torchsim_diff.timing.linalg_togs import module_kernels
from torchsim_diff.timing.tog import TOG, validate
from torchsim_diff.timing.togsim_buckets import NOT_RUN, write_bucket
from torchsim_diff.timing.togsim_runner import DEFAULT_TIMEOUT_S, Outcome, RunResult, TOGSimInstall, simulate

ROUTE = "triton-spike"
ROUTES = (ROUTE, "spike")
LINALG_FILE = "kernel.linalg.mlir"     # what route spike keeps of a case's lowered module
TIMING_KEYS = ("case_id", "kernel", "programs", "instret", "outcome", "verdicts")
TIMING_FILE = "timing.jsonl"     # one KernelTiming row a line; `torchsim-diff table --tables timing` reads it


@dataclasses.dataclass
class KernelTiming:
    """One kernel launch's timing on TOGSim and the verdicts of the checks on it."""
    case_id: str
    kernel: str
    programs: int
    instret: int
    outcome: str
    seconds: float
    cycles: int | None = None
    dram_ratio: float | None = None       # cycles / DRAM bound (>= 1 when the bound holds)
    compute_ratio: float | None = None    # cycles / compute bound
    vector_utilisation: float | None = None
    dma_utilisation: float | None = None
    verdicts: list = dataclasses.field(default_factory=list)   # (check, passed, bucket, known)

    def row(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Settings:
    install: TOGSimInstall
    hardware: HardwareConfig
    out: str                      # buckets/ and runs/ go here
    timeout_s: float = DEFAULT_TIMEOUT_S
    known: dict = dataclasses.field(default_factory=dict)


# -- the route's launches ------------------------------------------------------------------
def captured_launches(kernels_folder: str) -> list:
    """(name, launch.json dict) of a capture folder, in launch order."""
    index = os.path.join(kernels_folder, "index.json")
    if not os.path.isfile(index):
        return []
    with open(index) as handle:
        names = json.load(handle)["launches"]
    found = []
    for name in names:
        with open(os.path.join(kernels_folder, name, "launch.json")) as handle:
            found.append((name, json.load(handle)))
    return found


@contextlib.contextmanager
def route_server(route: str = ROUTE):
    """The route (triton-spike or spike), warm, in this process (as its worker would run it), shut down on
    leaving; RouteUnavailable says why it cannot run here."""
    from torchsim_diff.worker.server import WorkerServer
    server = WorkerServer(route, {})
    if not server.ok:
        raise RouteUnavailable(f"route {route} unavailable: {server.reason}")
    try:
        yield server
    finally:
        server.on_shutdown({})


class RouteUnavailable(RuntimeError):
    pass


def run_on_route(case, artifact_dir: str, server) -> dict:
    """Run `case` on the route; its reply (ok, kind, message, metrics)."""
    return server.on_run({"case": case.to_dict(), "program": case.program_source(), "artifact_dir": artifact_dir})


# -- one kernel ----------------------------------------------------------------------------
def time_launch(case_id: str, name: str, launch: dict, settings: Settings) -> KernelTiming:
    """TOGSim's timing of one captured launch and every check's verdict on it."""
    return time_tog(case_id, name, launch_tog(launch), launch["spike_instret"], settings)


def time_tog(case_id: str, name: str, tog: TOG, instret: int, settings: Settings) -> KernelTiming:
    """TOGSim's timing of one kernel's TOG and every check's verdict on it."""
    tog = validate(tog)
    programs = tog.outer_tiles()
    folder = _fresh(os.path.join(settings.out, "runs", case_id, name))
    base = simulate(settings.install, tog, settings.hardware, folder, settings.timeout_s)
    timing = KernelTiming(case_id, name, programs, instret, base.outcome.value, base.seconds)
    if base.outcome is not Outcome.OK:
        verdict = checks.Verdict("run", False, f"{base.outcome.value}: {base.message}", {"outcome": base.outcome.value})
        _judge(timing, [verdict], base, settings)
        return timing
    _fill_figures(timing, tog, base, settings.hardware)
    _judge(timing, kernel_verdicts(tog, base, settings, folder), base, settings)
    return timing


def kernel_verdicts(tog: TOG, base: RunResult, settings: Settings, folder: str) -> list:
    hardware, figures = settings.hardware, base.figures
    verdicts = checks.one_run(figures, tog, hardware)
    again = simulate(settings.install, tog, hardware, _fresh(folder + ".again"), settings.timeout_s)
    if again.outcome is Outcome.OK:
        verdicts.append(checks.determinism(figures, again.figures))
    more = dataclasses.replace(hardware, num_cores=2 * hardware.num_cores)
    wider = simulate(settings.install, tog, more, _fresh(folder + ".cores"), settings.timeout_s)
    if wider.outcome is Outcome.OK:
        contention = checks.dram_contention_cycles(figures.dram_bytes() / tog.outer_tiles(), more.num_cores,
                                                   more.peak_dram_bytes_per_core_cycle(), more.round_trip_cycles())
        verdicts.append(checks.more_cores(figures, wider.figures, contention_cycles=contention))
    return verdicts


def _fill_figures(timing: KernelTiming, tog: TOG, run: RunResult, hardware: HardwareConfig) -> None:
    figures = run.figures
    dram = checks.dram_bound(figures, hardware.peak_dram_bytes_per_core_cycle())
    compute = checks.compute_bound(figures, tog, hardware.systolic_arrays_per_core)
    core_cycles = sum(core.cycles for core in figures.cores) or 1
    timing.cycles = figures.total_cycles
    timing.dram_ratio = round(dram.figures["ratio"], 3)
    timing.compute_ratio = round(compute.figures["ratio"], 3)
    timing.vector_utilisation = round(sum(c.vector.active for c in figures.cores) / core_cycles, 3)
    timing.dma_utilisation = round(sum(c.dma.active for c in figures.cores) / core_cycles, 3)


def _judge(timing: KernelTiming, verdicts: list, run: RunResult, settings: Settings) -> None:
    for verdict in verdicts:
        bucket = None
        if not verdict.passed:
            outcome = verdict.figures.get("outcome", NOT_RUN)
            bucket = write_bucket(os.path.join(settings.out, "buckets"), verdict, run.folder, run.command,
                                  outcome, settings.known)
        timing.verdicts.append({"check": verdict.check, "passed": verdict.passed,
                                "bucket": bucket.name if bucket else None,
                                "known": bucket.known if bucket else None, "message": verdict.message})


def _fresh(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    return folder


# -- one case ------------------------------------------------------------------------------
def time_case(case, settings: Settings, server, route: str = ROUTE) -> tuple:
    """(route reply, [KernelTiming], [(kernel name, why not timed)]) of one case."""
    artifacts = os.path.join(settings.out, "artifacts", case.case_id)
    reply = run_on_route(case, artifacts, server)
    if route != ROUTE:
        return (reply,) + time_linalg_kernels(case.case_id, artifacts, reply, settings)
    timings, skipped = [], []
    for name, launch in captured_launches(os.path.join(artifacts, "kernels")):
        try:
            timings.append(time_launch(case.case_id, name, launch, settings))
        except NotTimed as why:
            skipped.append((name, str(why)))
    return reply, timings, skipped


def time_linalg_kernels(case_id: str, artifacts: str, reply: dict, settings: Settings) -> tuple:
    """([KernelTiming], [(kernel name, why not timed)]) of route spike's run of a case: a TOG per
    linalg op of its kernel.linalg.mlir, costed by the run's instructions retired."""
    instret = RunMetrics.from_wire(reply.get("metrics")).cost
    path = os.path.join(artifacts, LINALG_FILE)
    if not reply.get("ok") or not isinstance(instret, int) or not os.path.isfile(path):
        return [], [("case", f"the route left no {LINALG_FILE} with an instret (ok={reply.get('ok')})")]
    with open(path) as handle:
        try:
            kernels, skipped = module_kernels(parse_module(handle.read()), instret)
        except Unreadable as why:
            return [], [("case", f"{LINALG_FILE}: {why}")]
    return [time_tog(case_id, k.name, k.tog, k.instret, settings) for k in kernels], skipped


def new_failures(timings: list) -> list:
    return [verdict for t in timings for verdict in t.verdicts if not verdict["passed"] and not verdict["known"]]


# -- timing.jsonl --------------------------------------------------------------------------
def write_timings(folder: str, timings: list) -> str:
    """Append the rows to `folder`/timing.jsonl."""
    path = os.path.join(folder, TIMING_FILE)
    with open(path, "a") as handle:
        for timing in timings:
            handle.write(json.dumps(timing.row(), default=str) + "\n")
    return path


def read_timings(dirs: list) -> tuple:
    """(kernel rows of every timing.jsonl under `dirs`, "" or one line naming what is wrong)."""
    paths = sorted(os.path.join(root, name) for folder in dirs for root, _dirs, names in os.walk(folder)
                   for name in names if name == TIMING_FILE)
    if not paths:
        return [], f"no {TIMING_FILE} under {', '.join(dirs)}"
    rows = []
    for path in paths:
        with open(path) as handle:
            for number, line in enumerate(handle, 1):
                try:
                    rows.append(_timing_row(json.loads(line)))
                except (ValueError, KeyError, TypeError):
                    return rows, f"{path}:{number}: not a kernel timing row"
    return rows, ""


def _timing_row(row) -> dict:
    if not isinstance(row, dict) or any(key not in row for key in TIMING_KEYS):
        raise ValueError("not a kernel timing row")
    return row


def read_case(path: str):
    """The case of a case file; ValueError with one line when it is not one."""
    from torchsim_diff.buckets.corpus import CorruptEntry, read_entry
    try:
        return read_entry(path).case           # a bare case or a corpus entry, validated
    except CorruptEntry as error:
        raise ValueError(str(error)) from None


def hardware_of(install: TOGSimInstall) -> HardwareConfig:
    if install.config is None:
        return HardwareConfig()
    with open(install.config) as handle:
        return HardwareConfig.from_json(json.load(handle))

