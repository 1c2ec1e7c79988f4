"""Every check on TOGSim's timings passes on sound figures and fails, with its figures, on
figures that break it. Figures are recorded ones (the saved real logs) or made up to sit just
on either side of a bound."""
import os

import pytest

from torchsim_diff.timing import checks
from torchsim_diff.timing.tog import TOG, Compute, ComputeKind, Loop, LoopKind
from torchsim_diff.timing.togsim_log import CoreFigures, TOGSimFigures, Unit, parse_log

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "togsim")


def recorded(name: str) -> TOGSimFigures:
    with open(os.path.join(FIXTURES, name)) as log:
        return parse_log(log.read())


def figures(cycles, cores=1, responses=0, systolic_active=0, vector_active=0, dma_active=0, request_bytes=32):
    def core(i):
        return CoreFigures(i, cycles, (Unit(systolic_active, cycles - systolic_active),),
                           Unit(vector_active, max(cycles - vector_active, 0)), Unit(dma_active, 0), responses, {})
    return TOGSimFigures(cycles, tuple(core(i) for i in range(cores)), 1000, request_bytes, 64.0)


def matmul_graph(tiles: int, cycles: int) -> TOG:
    return TOG("t", (Loop("m", tiles, (Compute(cycles, ComputeKind.MATMUL),), LoopKind.OUTER),), {})


# -- determinism ---------------------------------------------------------------------------
def test_determinism_passes_on_two_equal_recorded_runs():
    assert checks.determinism(recorded("gemm_c1.log"), recorded("gemm_c1.log"))


def test_determinism_fails_when_cycles_differ():
    verdict = checks.determinism(figures(100), figures(101))
    assert not verdict and verdict.figures["cycles"] == [100, 101] and "differ" in verdict.message


def test_determinism_fails_when_dram_traffic_differs():
    assert not checks.determinism(figures(100, responses=4), figures(100, responses=5))


# -- physical bounds -----------------------------------------------------------------------
def test_dram_bound_holds_on_a_recorded_run():
    run = recorded("gemm_c1.log")
    assert run.dram_bytes() > 0
    assert checks.dram_bound(run, peak_bytes_per_cycle=run.stated_dram_gbs * 1000 / run.core_freq_mhz)


def test_dram_bound_fails_below_bytes_over_peak():
    # 100 responses x 32 B at 64 B/cycle need 50 cycles
    assert checks.dram_bound(figures(50, responses=100), 64.0)
    verdict = checks.dram_bound(figures(49, responses=100), 64.0)
    assert not verdict and verdict.figures["bound_cycles"] == 50 and "faster than the peak" in verdict.message


def test_compute_bound_divides_matmul_work_by_every_systolic_array():
    graph = matmul_graph(tiles=8, cycles=100)          # 800 matmul cycles
    assert checks.compute_bound(figures(200, cores=2), graph, systolic_arrays_per_core=2)
    verdict = checks.compute_bound(figures(199, cores=2), graph, systolic_arrays_per_core=2)
    assert not verdict and verdict.figures["bounding_unit"] == "matmul"


def test_compute_bound_counts_one_vector_unit_per_core():
    graph = TOG("t", (Loop("m", 4, (Compute(30),), LoopKind.OUTER),), {})
    assert not checks.compute_bound(figures(119), graph, systolic_arrays_per_core=4)
    assert checks.compute_bound(figures(120), graph, systolic_arrays_per_core=4)


def test_units_busy_holds_on_a_recorded_run():
    assert checks.units_busy(recorded("gemm_c1.log"))


@pytest.mark.parametrize("unit", ["systolic_active", "vector_active", "dma_active"])
def test_units_busy_fails_on_a_unit_active_longer_than_the_run(unit):
    verdict = checks.units_busy(figures(100, **{unit: 101}))
    assert not verdict and list(verdict.figures["over_busy"].values()) == [101]


# -- metamorphic ---------------------------------------------------------------------------
def test_more_work_fails_when_the_larger_run_is_faster():
    assert checks.more_work(figures(100), figures(100))
    verdict = checks.more_work(figures(100), figures(99))
    assert not verdict and "fewer cycles" in verdict.message


def test_tiling_allows_the_stated_factor_either_way_and_no_more():
    assert checks.tiling(figures(100), figures(400), factor=4)
    assert checks.tiling(figures(100), figures(25), factor=4)
    assert not checks.tiling(figures(100), figures(401), factor=4)
    assert not checks.tiling(figures(100), figures(24), factor=4)


def test_more_cores_fails_beyond_the_slack():
    assert checks.more_cores(figures(100, cores=1), figures(110, cores=2), slack=1.1)
    verdict = checks.more_cores(figures(100, cores=1), figures(111, cores=2), slack=1.1)
    assert not verdict and verdict.figures["more_cores"] == 2 and "1.11x" in verdict.message


def test_units_accounted_holds_where_every_unit_adds_up():
    consistent = CoreFigures(0, 100, (Unit(40, 60),), Unit(10, 90), Unit(30, 70), 0, {})
    assert checks.units_accounted(TOGSimFigures(100, (consistent,), 1000, 32, 64.0))


def test_units_accounted_fails_on_the_recorded_vector_unit_that_never_counts_idle():
    # TOGSim adds each period's vector idle cycles to no total: the closing report says 0
    verdict = checks.units_accounted(recorded("gemm_tpuv3_ramulator2.log"))
    assert not verdict and verdict.figures["off_units"] == {"core0.vector": 0}
