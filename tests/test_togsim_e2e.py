"""End to end on a real TOGSim: a generated TOG runs, its log parses, and the checks hold.
Skipped, with the reason, where TORCHSIM_DIFF_TOGSIM does not name a TOGSim binary."""
import os

import pytest

pytest.importorskip("onnx", reason="onnx is not installed: pip install 'torchsim-diff[togsim]'")

from torchsim_diff.timing import checks  # noqa: E402
from torchsim_diff.timing.gemm_cross_model import SWEEP, examine_gemm  # noqa: E402
from torchsim_diff.timing.hw_config import HardwareConfig  # noqa: E402
from torchsim_diff.timing.tog_kernels import ElementwiseTiling, GemmTiling, elementwise, gemm  # noqa: E402
from torchsim_diff.timing.togsim_runner import Outcome, Unavailable, find_togsim, simulate  # noqa: E402

INSTALL = find_togsim()
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(isinstance(INSTALL, Unavailable),
                                                  reason=getattr(INSTALL, "reason", ""))]

HARDWARE = HardwareConfig(num_cores=1, dram_channels=4)
TILING = GemmTiling(m=128, n=128, k=128, tm=64, tn=64, tk=64, async_loads=True)


def run(tmp_path, tog, hardware=HARDWARE, name="run"):
    folder = tmp_path / name
    folder.mkdir()
    result = simulate(INSTALL, tog, hardware, str(folder), timeout_s=60)
    assert result.outcome is Outcome.OK, f"{result.message}\n{result.command}\n{result.log_tail}"
    return result.figures


def test_a_generated_gemm_runs_and_meets_every_bound(tmp_path):
    tog = gemm(TILING)
    figures = run(tmp_path, tog)
    assert figures.total_cycles > 0 and figures.dram_bytes() > 0
    assert checks.dram_bound(figures, HARDWARE.peak_dram_bytes_per_core_cycle())
    assert checks.compute_bound(figures, tog, HARDWARE.systolic_arrays_per_core)
    assert checks.units_busy(figures)


def test_the_same_graph_twice_gives_the_same_cycles(tmp_path):
    tog = elementwise(ElementwiseTiling(64, 64, 32, 32))
    assert checks.determinism(run(tmp_path, tog, name="a"), run(tmp_path, tog, name="b"))


def test_dram_bytes_cover_every_tile_loaded_and_stored(tmp_path):
    tiling = ElementwiseTiling(64, 64, 32, 32, inputs=2)
    figures = run(tmp_path, elementwise(tiling))
    assert figures.dram_bytes() >= 3 * 64 * 64 * tiling.element_size


# -- the routes' real kernels and the second model ----------------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# the checks every run with a vector compute fails, by TOGSim's vector-unit statistics
KNOWN_VECTOR_DEFECTS = {"units_accounted": "togsim-vector-idle-not-accumulated",
                        "units_work": "togsim-vector-active-counts-finish-cycle"}


def test_a_triton_spike_cases_kernels_run_through_togsim_and_the_checks(tmp_path):
    from torchsim_diff.timing.kernel_timing import (RouteUnavailable, Settings, read_case, route_server,
                                                    time_case)
    from torchsim_diff.buckets.known_defects import known_defects
    case = read_case(os.path.join(ROOT, "corpora", "seed", "seed-01-float32.json"))
    settings = Settings(INSTALL, HARDWARE, str(tmp_path), 60, known_defects(os.path.join(ROOT, "corpora", "known")))
    try:
        with route_server() as server:
            _reply, timings, _skipped = time_case(case, settings, server)
    except RouteUnavailable as why:
        pytest.skip(str(why))
    assert timings, "the case launched no kernel that ran on Spike"
    for timing in timings:
        assert timing.outcome == "ok" and timing.cycles > 0 and timing.instret > 0
        assert timing.dram_ratio >= 1 and timing.compute_ratio >= 1
        failed = {v["check"]: v for v in timing.verdicts if not v["passed"]}
        assert set(failed) <= set(KNOWN_VECTOR_DEFECTS), failed
        assert all(v["known"] == KNOWN_VECTOR_DEFECTS[check] for check, v in failed.items())


@pytest.mark.parametrize("tiling", SWEEP, ids=lambda t: f"{t.m}x{t.n}x{t.k}/{t.tm}")
def test_togsim_agrees_with_the_systolic_estimate_on_gemm_within_an_order(tiling):
    for hardware in (HardwareConfig(), HardwareConfig(num_cores=2, systolic_arrays_per_core=2)):
        verdict = examine_gemm(INSTALL, tiling, hardware, timeout_s=120)
        assert verdict, verdict.message
