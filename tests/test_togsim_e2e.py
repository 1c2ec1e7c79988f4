"""End to end on a real TOGSim: a generated TOG runs, its log parses, and the checks hold.
Skipped, with the reason, where TORCHSIM_DIFF_TOGSIM does not name a TOGSim binary."""
import pytest

pytest.importorskip("onnx", reason="onnx is not installed: pip install 'torchsim-diff[togsim]'")

from torchsim_diff.timing import checks  # noqa: E402
from torchsim_diff.timing.hw_config import HardwareConfig  # noqa: E402
from torchsim_diff.timing.tog_kernels import ElementwiseTiling, GemmTiling, elementwise, gemm  # noqa: E402
from torchsim_diff.timing.togsim_runner import Outcome, Unavailable, find_togsim, simulate  # noqa: E402

INSTALL = find_togsim()
pytestmark = pytest.mark.skipif(isinstance(INSTALL, Unavailable),
                                reason=getattr(INSTALL, "reason", ""))

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
