"""Checks on TOGSim's timings that need no second timing model.

Each check takes the figures of one or two runs (`togsim_log.TOGSimFigures`) and returns a
`Verdict`: passed or not, one sentence, and the figures it compared, so a failed check is a
bucket with its evidence. Three families:

- determinism: the same TOG and config give the same cycles;
- physical bounds: a run cannot beat its DRAM's peak bandwidth or its compute units' count,
  no unit is busy for more cycles than the run lasts or than the TOG gives it work for, and
  each unit's active and idle cycles add up to the run;
- metamorphic: more work never takes fewer cycles; the same work cut into more tiles stays
  within a stated factor; more cores never make it slower beyond a stated factor.

The stated factors are defaults chosen to flag only gross errors (a model's reasonable
overheads, such as per-tile DMA set-up, stay inside them); a caller may tighten them.
"""
from __future__ import annotations

import dataclasses

from torchsim_diff.timing.tog import ComputeKind, TOG
from torchsim_diff.timing.togsim_log import TOGSimFigures

TILING_FACTOR = 4.0        # the same work in more tiles: at most this many times slower or faster
CROSS_MODEL_FACTOR = 10.0  # TOGSim vs an analytic GEMM estimate: an order of magnitude either way
MORE_CORES_SLACK = 1.10    # more cores: at most 10% slower (scheduling noise), plus DRAM contention


@dataclasses.dataclass(frozen=True)
class Verdict:
    check: str
    passed: bool
    message: str
    figures: dict

    def __bool__(self) -> bool:
        return self.passed


def _verdict(check: str, passed: bool, message: str, **figures) -> Verdict:
    return Verdict(check, passed, message if not passed else f"{check}: ok", figures)


# -- determinism ---------------------------------------------------------------------------
def determinism(first: TOGSimFigures, second: TOGSimFigures) -> Verdict:
    """Two runs of one TOG and config: equal total cycles and equal DRAM traffic."""
    same = first.total_cycles == second.total_cycles and first.dram_bytes() == second.dram_bytes()
    return _verdict("determinism", same,
                    f"two runs of the same TOG and config differ: {first.total_cycles} vs "
                    f"{second.total_cycles} cycles, {first.dram_bytes()} vs {second.dram_bytes()} DRAM bytes",
                    cycles=[first.total_cycles, second.total_cycles],
                    dram_bytes=[first.dram_bytes(), second.dram_bytes()])


# -- physical bounds -----------------------------------------------------------------------
def one_run(figures: TOGSimFigures, tog: TOG, hardware) -> list:
    """The checks one run's figures answer alone (hardware: its hw_config.HardwareConfig)."""
    return [dram_bound(figures, hardware.peak_dram_bytes_per_core_cycle()),
            compute_bound(figures, tog, hardware.systolic_arrays_per_core),
            units_busy(figures), units_work(figures, tog), units_accounted(figures)]


def dram_bound(figures: TOGSimFigures, peak_bytes_per_cycle: float) -> Verdict:
    """cycles >= DRAM bytes / peak bytes per core cycle."""
    floor = figures.dram_bytes() / peak_bytes_per_cycle
    return _verdict("dram_bound", figures.total_cycles >= floor,
                    f"{figures.total_cycles} cycles moved {figures.dram_bytes()} DRAM bytes, faster than the "
                    f"peak of {peak_bytes_per_cycle:g} B/cycle allows (at least {floor:.0f} cycles)",
                    cycles=figures.total_cycles, dram_bytes=figures.dram_bytes(),
                    peak_bytes_per_cycle=peak_bytes_per_cycle, bound_cycles=floor,
                    ratio=_ratio(figures.total_cycles, floor))


def compute_bound(figures: TOGSimFigures, tog: TOG, systolic_arrays_per_core: int) -> Verdict:
    """cycles >= the TOG's compute occupancy of each unit kind / the number of such units."""
    floor, kind = compute_floor(tog, len(figures.cores), systolic_arrays_per_core)
    return _verdict("compute_bound", figures.total_cycles >= floor,
                    f"{figures.total_cycles} cycles is less than the {floor:.0f} cycles the TOG's {kind} "
                    f"computes need on {len(figures.cores)} core(s)",
                    cycles=figures.total_cycles, bound_cycles=floor, bounding_unit=kind,
                    ratio=_ratio(figures.total_cycles, floor))


def compute_floor(tog: TOG, cores: int, systolic_arrays_per_core: int) -> tuple:
    """(cycles, unit kind): the larger of matmul work over all systolic arrays and vector work
    over all vector units (one per core)."""
    occupancy = tog.compute_occupancy()
    matmul = (occupancy[ComputeKind.MATMUL] + occupancy[ComputeKind.PRELOAD]) / (cores * systolic_arrays_per_core)
    vector = occupancy[ComputeKind.VECTOR] / cores
    return (matmul, "matmul") if matmul >= vector else (vector, "vector")


def units_busy(figures: TOGSimFigures) -> Verdict:
    """No compute unit or DMA engine is active for more cycles than its core ran."""
    over = {}
    for core in figures.cores:
        named = dict(core.units(), **{f"core{core.core}.dma": core.dma})
        over.update({name: unit.active for name, unit in named.items() if unit.active > core.cycles})
    worst = max(over, key=over.get) if over else None
    return _verdict("units_busy", not over,
                    f"{len(over)} unit(s) busy longer than the run, e.g. {worst} active {over.get(worst)} cycles",
                    over_busy=over, cycles=figures.total_cycles)


def units_work(figures: TOGSimFigures, tog: TOG) -> Verdict:
    """No kind of compute unit is active for more cycles, over all cores, than the TOG's
    computes of that kind cost in all (TOG.compute_work): a unit is active only while it
    computes. The message names the kinds over, so that one defect makes one bucket."""
    work = tog.compute_work()
    given = {"systolic": work[ComputeKind.MATMUL] + work[ComputeKind.PRELOAD], "vector": work[ComputeKind.VECTOR]}
    active = {"systolic": sum(sa.active for core in figures.cores for sa in core.systolic_arrays),
              "vector": sum(core.vector.active for core in figures.cores)}
    over = [kind for kind in given if active[kind] > given[kind]]
    kinds, worst = " and ".join(over), next(iter(over), "vector")
    return _verdict("units_work", not over,
                    f"{kinds} units active longer than the TOG's {kinds} computes cost, e.g. {worst} active "
                    f"{active[worst]} cycles for {given[worst]} cycles of compute", active=active, work=given)


def units_accounted(figures: TOGSimFigures) -> Verdict:
    """Every unit's active plus idle cycles add up to its core's cycles: each cycle is one or
    the other. The message names the kinds of unit that are off, and whether their idle count
    is zero, so that one defect makes one bucket."""
    off, kinds = {}, set()
    for core in figures.cores:
        named = dict(core.units(), **{f"core{core.core}.dma": core.dma})
        for name, unit in named.items():
            if unit.active + unit.idle != core.cycles:
                off[name] = unit.active + unit.idle
                kinds.add(_unit_kind(name) + (" with no idle cycles" if unit.idle == 0 else ""))
    worst = next(iter(off), None)
    return _verdict("units_accounted", not off,
                    f"{len(off)} unit(s) whose active + idle cycles are not their core's cycles "
                    f"({'; '.join(sorted(kinds))}), e.g. {worst}: {off.get(worst)}",
                    off_units=off, cycles=figures.total_cycles)


def _unit_kind(name: str) -> str:
    """"core1.systolic0" -> "systolic"."""
    return name.split(".", 1)[1].rstrip("0123456789")


# -- a second model: GEMM on systolic arrays ------------------------------------------------
def systolic_gemm_cycles(m: int, n: int, k: int, rows: int, cols: int, arrays: int) -> float:
    """An analytic estimate of a GEMM on `arrays` rows x cols systolic arrays at full use:
    M*N*K multiply-adds, rows*cols per array per cycle, plus one fill and drain (rows + cols)."""
    return m * n * k / (rows * cols * arrays) + rows + cols


def cross_model(figures: TOGSimFigures, compute_estimate: float, peak_bytes_per_cycle: float,
                factor: float = CROSS_MODEL_FACTOR) -> Verdict:
    """TOGSim's cycles within `factor` either way of a roofline estimate: the larger of the
    analytic compute estimate and the run's DRAM bytes at the peak (a GEMM too small to fill
    the arrays waits on memory, which the compute estimate alone cannot say)."""
    memory = figures.dram_bytes() / peak_bytes_per_cycle
    estimate = max(compute_estimate, memory)
    ratio = _ratio(figures.total_cycles, estimate)
    return _verdict("cross_model", 1 / factor <= ratio <= factor,
                    f"TOGSim took {ratio:.2f}x the cycles of the systolic-array estimate "
                    f"({figures.total_cycles} vs {estimate:.0f}), outside 1/{factor:g}..{factor:g}",
                    cycles=figures.total_cycles, compute_estimate=compute_estimate, memory_estimate=memory,
                    ratio=ratio, factor=factor)


# -- metamorphic ---------------------------------------------------------------------------
def more_work(smaller: TOGSimFigures, larger: TOGSimFigures) -> Verdict:
    """The same kernel on more work never takes fewer cycles."""
    return _verdict("more_work", larger.total_cycles >= smaller.total_cycles,
                    f"more work took fewer cycles: {larger.total_cycles} < {smaller.total_cycles}",
                    smaller_cycles=smaller.total_cycles, larger_cycles=larger.total_cycles)


def tiling(coarse: TOGSimFigures, fine: TOGSimFigures, factor: float = TILING_FACTOR) -> Verdict:
    """The same work in more, smaller tiles takes within `factor` of the cycles of fewer tiles."""
    ratio = _ratio(fine.total_cycles, coarse.total_cycles)
    return _verdict("tiling", 1 / factor <= ratio <= factor,
                    f"the same work in more tiles took {ratio:.2f}x the cycles "
                    f"({fine.total_cycles} vs {coarse.total_cycles}), outside 1/{factor:g}..{factor:g}",
                    coarse_cycles=coarse.total_cycles, fine_cycles=fine.total_cycles, ratio=ratio, factor=factor)


def more_cores(fewer: TOGSimFigures, more: TOGSimFigures, slack: float = MORE_CORES_SLACK,
               contention_cycles: float = 0.0) -> Verdict:
    """The same TOG on more cores takes at most `slack` times the cycles it took on fewer, plus
    `contention_cycles` (`dram_contention_cycles`): cores share DRAM, so a tile that ran alone
    on fewer cores may now wait behind the other cores' requests, a cost no factor covers when
    the run is short."""
    ratio = _ratio(more.total_cycles, fewer.total_cycles)
    allowed = slack * fewer.total_cycles + contention_cycles
    return _verdict("more_cores", more.total_cycles <= allowed,
                    f"{len(more.cores)} cores took {ratio:.2f}x the cycles of {len(fewer.cores)} "
                    f"({more.total_cycles} vs {fewer.total_cycles}), more than the {slack:g}x + "
                    f"{contention_cycles:.0f} cycles of DRAM contention allowed",
                    fewer_cores=len(fewer.cores), more_cores=len(more.cores),
                    fewer_cycles=fewer.total_cycles, more_cycles=more.total_cycles, ratio=ratio, slack=slack,
                    contention_cycles=contention_cycles, allowed_cycles=allowed)


def dram_contention_cycles(tile_dram_bytes: float, cores: int, peak_bytes_per_cycle: float,
                           round_trip_cycles: float) -> float:
    """The delay shared DRAM may add to a run on `cores` cores without any defect: one tile's
    traffic from every core queued at once ahead of the last request (served at the peak),
    plus one request's round trip."""
    return cores * tile_dram_bytes / peak_bytes_per_cycle + round_trip_cycles


def _ratio(value: float, reference: float) -> float:
    return value / reference if reference else float("inf") if value else 1.0
