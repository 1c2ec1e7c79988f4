"""One fuzz example end to end against stand-ins for TOGSim (scripts written here that read the
config they are given and print a log in TOGSim's format): every check gets a verdict, a
TOGSim slower on more cores fails `more_cores`, and a crash stops at a failed `run` verdict."""
import stat
import sys

import pytest

pytest.importorskip("onnx", reason="onnx is not installed: pip install 'torchsim-diff[togsim]'")

from torchsim_diff.timing.fuzz_example import examine  # noqa: E402
from torchsim_diff.timing.hw_config import HardwareConfig  # noqa: E402
from torchsim_diff.timing.tog_kernels import GemmTiling  # noqa: E402
from torchsim_diff.timing.togsim_runner import TOGSimInstall  # noqa: E402

# Prints TOGSim's closing report with `cycles` computed from the config's core count.
FAKE = """#!{python}
import json, sys
config = json.load(open(sys.argv[sys.argv.index("--config") + 1]))
cores = config["num_cores"]
cycles = {cycles}
print("[info] [Config/Core] Core 0: 1000 MHz, Systolic array per core: 1")
print("[info] [Config/DRAM] DRAM Bandwidth 64 GB/s, Freq: 1000 MHz, Channels: 4, Request_size: 32B")
print("[info] Simulation finished")
for core in range(cores):
    print(f"[info] Core [{{core}}] : Systolic array [0] utilization(%) 1.00, active_cycles 10, idle_cycles {{cycles - 10}}")
    print(f"[info] Core [{{core}}] : DMA active_cycles, 10 DMA idle_cycles {{cycles - 10}}, DRAM BW 1.000 GB/s (4 responses)")
    print(f"[info] Core [{{core}}] : Vector unit utilization(%) 0.00, active cycle 0, idle_cycle {{cycles}}")
    print(f"[info] Core [{{core}}] : Total_cycles {{cycles}}")
print(f"[info] Total execution cycles: {{cycles}}")
"""

TILING = GemmTiling(m=32, n=32, k=32, tm=16, tn=32, tk=32, macs_per_cycle=1024)
HARDWARE = HardwareConfig(num_cores=1)


def fake(tmp_path, cycles_expression: str) -> TOGSimInstall:
    script = tmp_path / "Simulator"
    script.write_text(FAKE.format(python=sys.executable, cycles=cycles_expression))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return TOGSimInstall(str(script))


def by_check(verdicts) -> dict:
    return {verdict.check: verdict for verdict in verdicts}


def test_every_check_gets_a_verdict_and_a_sound_model_passes_them(tmp_path):
    verdicts = by_check(examine(fake(tmp_path, "100000"), TILING, HARDWARE, timeout_s=30))
    assert set(verdicts) == {"run", "dram_bound", "compute_bound", "units_busy", "units_work", "units_accounted",
                             "determinism", "more_work", "more_cores", "tiling"}
    assert all(verdicts.values()), [v.message for v in verdicts.values() if not v]


def test_a_model_slower_on_more_cores_fails_more_cores_only(tmp_path):
    verdicts = by_check(examine(fake(tmp_path, "100000 * cores"), TILING, HARDWARE, timeout_s=30))
    assert not verdicts["more_cores"] and verdicts["more_cores"].figures["ratio"] == 2
    assert [name for name, verdict in verdicts.items() if not verdict] == ["more_cores"]


def test_a_crash_is_a_failed_run_and_nothing_else_is_checked(tmp_path):
    verdicts = examine(fake(tmp_path, "1 // 0"), TILING, HARDWARE, timeout_s=30)
    assert [(v.check, v.passed) for v in verdicts] == [("run", False)]
    assert "crash" in verdicts[0].message and "exit status 1" in verdicts[0].message
