"""One fuzz example of TOGSim itself: a drawn kernel tiling and NPU config, run through TOGSim
and every check that applies, with a failure named by the check that broke.

`examine` runs the tiling (twice: determinism), the same kernel with twice the rows (more
work), with half-height tiles (the same work in more tiles) and on twice the cores (more
cores), and returns one `Verdict` per check. A run that crashes, hangs or logs no total is a
failed `run` verdict and the checks needing it are skipped.
"""
from __future__ import annotations

import dataclasses
import tempfile

from torchsim_diff.timing import checks
from torchsim_diff.timing.hw_config import HardwareConfig
from torchsim_diff.timing.tog_kernels import GemmTiling
from torchsim_diff.timing.tog_strategies import build
from torchsim_diff.timing.togsim_runner import Outcome, RunResult, TOGSimInstall, simulate


def examine(install: TOGSimInstall, tiling, hardware: HardwareConfig, timeout_s: float) -> list:
    """Every check's verdict on one drawn (tiling, hardware)."""
    base = _run(install, tiling, hardware, timeout_s)
    verdicts = [_run_verdict(base, tiling, hardware)]
    if base.outcome is not Outcome.OK:
        return verdicts
    figures, tog = base.figures, build(tiling)
    verdicts += checks.one_run(figures, tog, hardware)
    for name, variant, compare in _variants(tiling, hardware):
        other = _run(install, *variant, timeout_s)
        verdicts.append(compare(figures, other.figures) if other.outcome is Outcome.OK
                        else _run_verdict(other, *variant, check=f"run:{name}"))
    return verdicts


def _variants(tiling, hardware: HardwareConfig) -> list:
    """(name, (tiling, hardware), comparison of base figures with the variant's)."""
    more_rows = _with_rows(tiling, 2 * _rows(tiling))
    more_cores = dataclasses.replace(hardware, num_cores=2 * hardware.num_cores)
    found = [("determinism", (tiling, hardware), checks.determinism),
             ("more_work", (more_rows, hardware), checks.more_work),
             ("more_cores", (tiling, more_cores), lambda fewer, more: _more_cores(fewer, more, tiling, more_cores))]
    finer = _finer(tiling)
    if finer is not None:
        found.append(("tiling", (finer, hardware), checks.tiling))
    return found


def _more_cores(fewer, more, tiling, hardware: HardwareConfig) -> checks.Verdict:
    """more_cores with the DRAM contention `hardware` (the config with more cores) allows."""
    tile_bytes = fewer.dram_bytes() / build(tiling).outer_tiles()
    contention = checks.dram_contention_cycles(tile_bytes, hardware.num_cores,
                                               hardware.peak_dram_bytes_per_core_cycle(),
                                               hardware.round_trip_cycles())
    return checks.more_cores(fewer, more, contention_cycles=contention)


def _run(install, tiling, hardware, timeout_s) -> RunResult:
    with tempfile.TemporaryDirectory(prefix="togsim-") as folder:
        return simulate(install, build(tiling), hardware, folder, timeout_s)


def _run_verdict(result: RunResult, tiling, hardware, check: str = "run") -> checks.Verdict:
    ok = result.outcome is Outcome.OK
    return checks.Verdict(check, ok, f"{check}: ok" if ok else f"{result.outcome.value}: {result.message}",
                          {"outcome": result.outcome.value, "seconds": result.seconds,
                           "tiling": dataclasses.asdict(tiling), "hardware": dataclasses.asdict(hardware)})


def _rows(tiling) -> int:
    return tiling.m if isinstance(tiling, GemmTiling) else tiling.rows


def _with_rows(tiling, rows: int):
    return dataclasses.replace(tiling, **({"m": rows} if isinstance(tiling, GemmTiling) else {"rows": rows}))


def _finer(tiling):
    """The same sizes with tiles half as tall, or None when a tile is already 8 rows."""
    field = "tm" if isinstance(tiling, GemmTiling) else "tr"
    height = getattr(tiling, field)
    return dataclasses.replace(tiling, **{field: height // 2}) if height >= 16 else None
