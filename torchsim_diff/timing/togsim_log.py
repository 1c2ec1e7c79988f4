"""TOGSim's log read into figures: total cycles, each core's units busy and idle, DRAM traffic.

TOGSim logs through spdlog (`[time] [info] message`); the figures are in its closing report,
printed after `Simulation finished`: per core, the systolic arrays' and the vector unit's active
and idle cycles, the DMA's, the DRAM responses it received, and its own cycle count; then
`Total execution cycles: N`. The same per-core lines also appear every stats period while it
runs, so only those after the last `Simulation finished` count. The DRAM request size and core
clock come from the config lines at the start.
"""
from __future__ import annotations

import dataclasses
import re

FINISHED = "Simulation finished"
_CORE = r"Core \[(?P<core>\d+)\] : "
PATTERNS = {
    "total": re.compile(r"Total execution cycles: (?P<cycles>\d+)"),
    "core_clock": re.compile(r"\[Config/Core\] Core (?P<core>\d+): (?P<mhz>\d+) MHz"),
    "dram": re.compile(r"\[Config/DRAM\] DRAM Bandwidth (?P<gbs>[\d.]+) GB/s, Freq: (?P<mhz>\d+) MHz, "
                       r"Channels: (?P<channels>\d+), Request_size: (?P<bytes>\d+)B"),
    "systolic": re.compile(_CORE + r"Systolic array \[(?P<unit>\d+)\] utilization\(%\) [\d.]+, "
                           r"active_cycles (?P<active>\d+), idle_cycles (?P<idle>\d+)"),
    "dma": re.compile(_CORE + r"DMA active_cycles,? (?P<active>\d+),? DMA idle_cycles (?P<idle>\d+), "
                      r"DRAM BW [\d.]+ GB/s \((?P<responses>\d+) responses\)"),
    "vector": re.compile(_CORE + r"Vector unit (?:u|U)tilization\(%\) [\d.]+, "
                         r"active[ _]cycles? (?P<active>\d+), idle_cycles? (?P<idle>\d+)"),
    "core_total": re.compile(_CORE + r"Total_cycles (?P<cycles>\d+)"),
    "instructions": re.compile(_CORE + r"(?P<opcode>\w+)\s+inst_count (?P<count>\d+)"),
}


TOTAL_LINE = "Total execution cycles: N"


class LogError(ValueError):
    """A TOGSim log without a figure the parser needs; the message names the missing line,
    `line` holds its shape."""

    def __init__(self, message: str, line: str):
        super().__init__(message)
        self.line = line


@dataclasses.dataclass(frozen=True)
class Unit:
    active: int
    idle: int

    def busy_fraction(self, cycles: int) -> float:
        return self.active / cycles if cycles else 0.0


@dataclasses.dataclass(frozen=True)
class CoreFigures:
    core: int
    cycles: int
    systolic_arrays: tuple
    vector: Unit
    dma: Unit
    dram_responses: int
    instructions: dict

    def units(self) -> dict:
        """Every compute unit of the core by a readable name."""
        named = {f"core{self.core}.systolic{i}": unit for i, unit in enumerate(self.systolic_arrays)}
        named[f"core{self.core}.vector"] = self.vector
        return named


@dataclasses.dataclass(frozen=True)
class TOGSimFigures:
    total_cycles: int
    cores: tuple
    core_freq_mhz: int
    dram_request_bytes: int
    stated_dram_gbs: float

    def dram_bytes(self) -> int:
        """Bytes moved to and from DRAM: each response is one request of the configured size."""
        return sum(core.dram_responses for core in self.cores) * self.dram_request_bytes

    def units(self) -> dict:
        return {name: unit for core in self.cores for name, unit in core.units().items()}

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"dram_bytes": self.dram_bytes()}


def parse_log(text: str) -> TOGSimFigures:
    """The figures of a finished TOGSim run; LogError names the first line that is missing."""
    final = _final_report(text)
    total = _one(PATTERNS["total"], final, TOTAL_LINE)
    dram = _one(PATTERNS["dram"], text, "[Config/DRAM] DRAM Bandwidth ... Request_size: NB")
    clock = _one(PATTERNS["core_clock"], text, "[Config/Core] Core 0: N MHz")
    core_ids = sorted({int(m["core"]) for m in PATTERNS["core_total"].finditer(final)})
    if not core_ids:
        raise LogError(f"TOGSim log has no line 'Core [i] : Total_cycles N' after '{FINISHED}'",
                       "Core [i] : Total_cycles N")
    return TOGSimFigures(
        total_cycles=int(total["cycles"]), cores=tuple(_core(final, core) for core in core_ids),
        core_freq_mhz=int(clock["mhz"]), dram_request_bytes=int(dram["bytes"]),
        stated_dram_gbs=float(dram["gbs"]))


def _final_report(text: str) -> str:
    position = text.rfind(FINISHED)
    if position < 0:
        raise LogError(f"TOGSim log has no line '{FINISHED}': the run did not end normally", FINISHED)
    return text[position:]


def _core(final: str, core: int) -> CoreFigures:
    def of_core(name: str) -> list:
        return [m for m in PATTERNS[name].finditer(final) if int(m["core"]) == core]

    def one(name: str, shape: str) -> re.Match:
        found = of_core(name)
        if not found:
            raise LogError(f"TOGSim log has no line '{shape}' for core {core} after '{FINISHED}'", shape)
        return found[-1]

    systolic = sorted(of_core("systolic"), key=lambda m: int(m["unit"]))
    vector, dma = one("vector", "Core [i] : Vector unit utilization(%) ..."), one("dma", "Core [i] : DMA active_cycles ...")
    return CoreFigures(
        core=core, cycles=int(one("core_total", "Core [i] : Total_cycles N")["cycles"]),
        systolic_arrays=tuple(Unit(int(m["active"]), int(m["idle"])) for m in systolic),
        vector=Unit(int(vector["active"]), int(vector["idle"])),
        dma=Unit(int(dma["active"]), int(dma["idle"])), dram_responses=int(dma["responses"]),
        instructions={m["opcode"]: int(m["count"]) for m in of_core("instructions")})


def _one(pattern: re.Pattern, text: str, shape: str) -> re.Match:
    found = None
    for found in pattern.finditer(text):
        pass
    if found is None:
        raise LogError(f"TOGSim log has no line '{shape}'", shape)
    return found
