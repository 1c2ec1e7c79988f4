"""Every check on TOGSim's timings passes on sound figures and fails, with its figures, on
figures that break it. Figures are recorded ones (the saved real logs) or made up to sit just
on either side of a bound."""
import dataclasses
import os

import pytest

from torchsim_diff.timing import checks
from torchsim_diff.timing.hw_config import HardwareConfig
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


def _matmul_and_vector(tiles: int, matmul_cycles: int, vector_cycles: int) -> TOG:
    return TOG("t", (Loop("m", tiles, (Compute(matmul_cycles, ComputeKind.MATMUL),
                                       Compute(vector_cycles, ComputeKind.VECTOR)), LoopKind.OUTER),), {})


def test_units_work_holds_where_each_kind_is_active_at_most_for_its_computes():
    tog = _matmul_and_vector(4, 10, 3)      # 40 matmul cycles, 12 vector cycles
    assert checks.units_work(figures(100, systolic_active=40, vector_active=12), tog)
    assert checks.units_work(figures(100, systolic_active=38, vector_active=0), tog)


def test_units_work_holds_on_the_recorded_gemm_whose_arrays_are_active_exactly_for_their_computes():
    from torchsim_diff.timing.tog_kernels import GemmTiling, gemm
    tog = gemm(GemmTiling(128, 128, 128, 64, 64, 64, async_loads=True))     # 8 tiles of 1024 cycles
    verdict = checks.units_work(recorded("gemm_c1.log"), tog)
    assert verdict and verdict.figures["active"]["systolic"] == verdict.figures["work"]["systolic"] == 8192


@pytest.mark.parametrize("unit,kind", [("systolic_active", "systolic"), ("vector_active", "vector")])
def test_units_work_fails_on_a_kind_active_one_cycle_past_its_computes(unit, kind):
    verdict = checks.units_work(figures(100, **{unit: {"systolic": 41, "vector": 13}[kind]}), _matmul_and_vector(4, 10, 3))
    assert not verdict and verdict.message.startswith(f"{kind} units active longer")
    assert verdict.figures["work"] == {"systolic": 40, "vector": 12}


def test_units_work_fails_on_the_recorded_vector_unit_that_counts_an_instructions_last_cycle():
    # the known defect's run: one vector compute of 64 / 16 = 4 cycles, reported as 5 active
    from torchsim_diff.timing.tog_kernels import ElementwiseTiling, elementwise
    tog = elementwise(ElementwiseTiling(8, 8, 8, 8, inputs=1, elements_per_cycle=16, element_size=2))
    verdict = checks.units_work(recorded("vector_idle.log"), tog)
    assert not verdict and verdict.figures["active"]["vector"] == 5 and verdict.figures["work"]["vector"] == 4


def test_units_accounted_holds_where_every_unit_adds_up():
    consistent = CoreFigures(0, 100, (Unit(40, 60),), Unit(10, 90), Unit(30, 70), 0, {})
    assert checks.units_accounted(TOGSimFigures(100, (consistent,), 1000, 32, 64.0))


def test_units_accounted_fails_on_the_recorded_vector_unit_that_never_counts_idle():
    # TOGSim adds each period's vector idle cycles to no total: the closing report says 0
    verdict = checks.units_accounted(recorded("gemm_tpuv3_ramulator2.log"))
    assert not verdict and verdict.figures["off_units"] == {"core0.vector": 0}


def test_units_accounted_names_the_kinds_off_so_one_defect_is_one_bucket():
    verdict = checks.units_accounted(recorded("vector_idle.log"))
    assert not verdict and "(vector with no idle cycles)" in verdict.message
    both = CoreFigures(0, 100, (Unit(40, 50),), Unit(10, 0), Unit(30, 70), 0, {})
    assert "(systolic; vector with no idle cycles)" in checks.units_accounted(
        TOGSimFigures(100, (both,), 1000, 32, 64.0)).message


# -- the bounds, on runs that broke the earlier ones ---------------------------------------
BURST4 = HardwareConfig(num_cores=1, dram_freq_mhz=500, dram_channels=1, dram_request_bytes=32,
                        dram_burst_length=4, dram_latency_cycles=1)


def test_the_stated_dram_peak_is_no_bound_with_a_long_burst():
    # 94 cycles moved 768 B; the stated 500 MHz x 1 x 32 B x 2 / 4 = 8 B/cycle would need 96
    run = recorded("dram_bound_burst4.log")
    assert BURST4.stated_dram_bytes_per_core_cycle() == 8.0
    assert not checks.dram_bound(run, BURST4.stated_dram_bytes_per_core_cycle())
    # the simple model takes one 32 B request per channel per DRAM cycle: 16 B per core cycle
    assert BURST4.peak_dram_bytes_per_core_cycle() == 16.0
    assert checks.dram_bound(run, BURST4.peak_dram_bytes_per_core_cycle())


def test_the_dram_peak_is_capped_by_one_request_per_core_port_per_cycle():
    # 4 channels could take 128 B/cycle, but one core injects one 32 B request a cycle
    assert HardwareConfig(num_cores=1).peak_dram_bytes_per_core_cycle() == 32.0
    assert HardwareConfig(num_cores=2).peak_dram_bytes_per_core_cycle() == 64.0
    assert HardwareConfig(num_cores=8).peak_dram_bytes_per_core_cycle() == 128.0
    run = recorded("gemm_c1.log")                       # 327680 B in 10496 cycles: just above
    assert checks.dram_bound(run, 32.0).figures["ratio"] == pytest.approx(1.025)
    assert not checks.dram_bound(run, 31.0)


def test_whole_picosecond_periods_make_a_clock_slightly_fast():
    # 1200 MHz ticks every 833 ps, not 833.33: its peak is 1000/833 requests per ns
    hardware = HardwareConfig(num_cores=4, dram_freq_mhz=1200, dram_channels=1)
    assert hardware.peak_dram_bytes_per_core_cycle() == pytest.approx(32 * 1000 / 833)


def test_more_cores_allows_the_dram_contention_of_a_short_run():
    fewer, more = recorded("more_cores_c2.log"), recorded("more_cores_c4.log")   # 118 and 136 cycles
    assert not checks.more_cores(fewer, more)                                      # 1.15x > 1.1x
    hardware = dataclasses.replace(BURST4, num_cores=4, dram_burst_length=1)
    contention = checks.dram_contention_cycles(fewer.dram_bytes() / 3, 4, hardware.peak_dram_bytes_per_core_cycle(),
                                               hardware.round_trip_cycles())
    # 3 tiles of 512 B; 4 cores x 512 B at 16 B/cycle, plus 2 + 2 x 10 cycles of round trip
    assert contention == 4 * 512 / 16 + 22
    verdict = checks.more_cores(fewer, more, contention_cycles=contention)
    assert verdict and verdict.figures["allowed_cycles"] == pytest.approx(1.1 * 118 + 150)
    assert not checks.more_cores(fewer, recorded("more_cores_c4.log"), contention_cycles=6)


# -- the second model on GEMM --------------------------------------------------------------
def test_the_systolic_estimate_is_macs_over_the_arrays_plus_fill_and_drain():
    assert checks.systolic_gemm_cycles(256, 256, 256, 128, 128, 1) == 1024 + 256
    assert checks.systolic_gemm_cycles(256, 256, 256, 128, 128, 4) == 256 + 256


def test_cross_model_passes_within_an_order_of_magnitude_and_fails_beyond():
    run = recorded("gemm_c1.log")                       # 10496 cycles, 327680 DRAM bytes
    assert checks.cross_model(run, compute_estimate=2000, peak_bytes_per_cycle=32.0)   # memory: 10240
    verdict = checks.cross_model(run, compute_estimate=200_000, peak_bytes_per_cycle=32.0)
    assert not verdict and verdict.figures["ratio"] == pytest.approx(10496 / 200_000)
    assert not checks.cross_model(run, compute_estimate=100, peak_bytes_per_cycle=3000.0)
