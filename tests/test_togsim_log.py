"""The TOGSim log parser, on real logs saved from TOGSim runs (tests/fixtures/togsim/*.log;
README.md there says how each was made) and on those logs with a line taken out."""
import os
import re

import pytest

from torchsim_diff.timing.togsim_log import LogError, parse_log

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "togsim")


def text_of(name: str) -> str:
    with open(os.path.join(FIXTURES, name)) as log:
        return log.read()


def last_number(text: str, pattern: str) -> int:
    return int(re.findall(pattern, text)[-1])


@pytest.mark.parametrize("name", ["gemm_c1.log", "gemm_c2.log", "elementwise_c1.log"])
def test_figures_match_the_closing_report(name):
    text = text_of(name)
    figures = parse_log(text)
    assert figures.total_cycles == last_number(text, r"Total execution cycles: (\d+)")
    responses = [int(n) for n in re.findall(r"DMA active_cycles, \d+ DMA idle_cycles \d+, DRAM BW [\d.]+ GB/s \((\d+) responses", text)]
    assert figures.dram_bytes() == sum(responses) * last_number(text, r"Request_size: (\d+)B")
    assert all(core.cycles <= figures.total_cycles for core in figures.cores)


def test_a_two_core_run_has_two_cores_with_their_own_figures():
    figures = parse_log(text_of("gemm_c2.log"))
    assert [core.core for core in figures.cores] == [0, 1]
    assert all(core.instructions["COMP"] > 0 for core in figures.cores)


def test_periodic_stats_before_the_end_are_not_taken_for_the_final_ones():
    text = text_of("gemm_c1.log")
    figures = parse_log(text)
    periodic = "Core [0] : DMA active_cycles 1, DMA idle_cycles 2, DRAM BW 0.000 GB/s (999999 responses)\n"
    assert parse_log(periodic + text) == figures


def test_the_units_are_named_per_core():
    figures = parse_log(text_of("gemm_c2.log"))
    assert {"core0.systolic0", "core0.vector", "core1.systolic0", "core1.vector"} <= set(figures.units())


MISSING = {
    "total": ("Total execution cycles", "Total execution cycles"),
    "finished": ("Simulation finished", "Simulation finished"),
    "dram config": ("[Config/DRAM] DRAM Bandwidth", "[Config/DRAM]"),
    "core clock": ("[Config/Core]", "[Config/Core]"),
    "vector line": ("Vector unit", "Vector unit"),
    "dma line": ("DMA active_cycles,", "DMA active_cycles"),
    "core total": ("Total_cycles", "Total_cycles"),
}


@pytest.mark.parametrize("marker, named", MISSING.values(), ids=MISSING.keys())
def test_a_missing_line_is_a_log_error_naming_it(marker, named):
    text = "\n".join(line for line in text_of("gemm_c1.log").splitlines() if marker not in line)
    with pytest.raises(LogError) as error:
        parse_log(text)
    assert named in str(error.value)
