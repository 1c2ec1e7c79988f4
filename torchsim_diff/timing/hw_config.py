"""The hardware TOGSim models: the keys of its JSON config that timing depends on.

TOGSim reads many more keys (PyTorchSim's codegen options, booksim and ramulator paths); this
writes the ones its simulator core needs, with the simple DRAM model (a fixed latency, one
request per channel per DRAM cycle) and the simple interconnect, which need no other file.
A user's own config file is passed through unchanged by the runner instead.
"""
from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class HardwareConfig:
    """An NPU: cores, each with systolic arrays and a vector unit, sharing DRAM channels."""
    num_cores: int = 1
    systolic_arrays_per_core: int = 1
    core_freq_mhz: int = 1000
    dram_freq_mhz: int = 1000
    dram_channels: int = 4
    dram_request_bytes: int = 32
    dram_burst_length: int = 2
    dram_latency_cycles: int = 100
    icnt_latency_cycles: int = 10
    icnt_injection_ports_per_core: int = 1
    icnt_freq_mhz: int = 0          # 0: the core's clock
    stats_period_cycles: int = 1_000_000

    def stated_dram_bytes_per_core_cycle(self) -> float:
        """The DRAM peak TOGSim states in its log (freq x channels x request bytes x 2 / burst
        length), in bytes per core cycle. Not a bound of the simple model: it ignores the
        burst length (see `peak_dram_bytes_per_core_cycle`)."""
        bytes_per_us = self.dram_freq_mhz * self.dram_channels * self.dram_request_bytes * 2 / self.dram_burst_length
        return bytes_per_us / self.core_freq_mhz

    def peak_dram_bytes_per_core_cycle(self) -> float:
        """The most bytes per core cycle the run can move to and from DRAM: the lesser of
        - the simple DRAM model's peak: each channel takes one request of `dram_request_bytes`
          per DRAM cycle, reads and writes alike, whatever the burst length;
        - the cores' injection: each core puts at most one request per injection port on the
          interconnect per interconnect cycle (TOGSim's Simulator::icnt_cycle), whatever the
          interconnect model.
        Clocks tick in whole picoseconds (TOGSim's period is 10^6 // MHz), so a clock may run a
        little faster than its nominal frequency; the peak uses the real periods."""
        core = _period_ps(self.core_freq_mhz)
        dram = self.dram_channels * self.dram_request_bytes * core / _period_ps(self.dram_freq_mhz)
        injection = (self.num_cores * self.icnt_injection_ports_per_core * self.dram_request_bytes
                     * core / _period_ps(self.icnt_freq_mhz or self.core_freq_mhz))
        return min(dram, injection)

    def round_trip_cycles(self) -> float:
        """Core cycles one DRAM request spends at least in flight without queueing: the DRAM
        latency (in DRAM cycles) and the interconnect both ways."""
        return self.dram_latency_cycles * self.core_freq_mhz / self.dram_freq_mhz + 2 * self.icnt_latency_cycles

    def to_json(self) -> dict:
        return {
            "num_cores": self.num_cores,
            "core_freq_mhz": self.core_freq_mhz,
            "core_stats_print_period_cycles": self.stats_period_cycles,
            "num_systolic_array_per_core": self.systolic_arrays_per_core,
            "dram_type": "simple",
            "dram_freq_mhz": self.dram_freq_mhz,
            "dram_channels": self.dram_channels,
            "dram_req_size_byte": self.dram_request_bytes,
            "dram_num_burst_length": self.dram_burst_length,
            "dram_latency": self.dram_latency_cycles,
            "dram_stats_print_period_cycles": self.stats_period_cycles,
            "icnt_type": "simple",
            "icnt_latency_cycles": self.icnt_latency_cycles,
            "icnt_freq_mhz": self.icnt_freq_mhz or self.core_freq_mhz,
            "icnt_injection_ports_per_core": self.icnt_injection_ports_per_core,
        }

    @classmethod
    def from_json(cls, config: dict) -> "HardwareConfig":
        """The figures the checks need from a TOGSim config (a user's own file); keys TOGSim
        defaults take TOGSim's defaults (one systolic array, burst length 1)."""
        return cls(
            num_cores=int(config["num_cores"]), core_freq_mhz=int(config["core_freq_mhz"]),
            systolic_arrays_per_core=int(config.get("num_systolic_array_per_core", 1)),
            dram_freq_mhz=int(config["dram_freq_mhz"]), dram_channels=int(config["dram_channels"]),
            dram_request_bytes=int(config["dram_req_size_byte"]),
            dram_burst_length=int(config.get("dram_num_burst_length", 1)),
            dram_latency_cycles=int(config.get("dram_latency", 0)),
            icnt_latency_cycles=int(config.get("icnt_latency_cycles", 0)),
            icnt_injection_ports_per_core=int(config.get("icnt_injection_ports_per_core", 1)),
            icnt_freq_mhz=int(config.get("icnt_freq_mhz", 0)),
            stats_period_cycles=int(config["core_stats_print_period_cycles"]))

    def write(self, path: str) -> str:
        with open(path, "w") as out:
            json.dump(self.to_json(), out, indent=1)
        return path


def _period_ps(mhz: int) -> int:
    """A clock's period as TOGSim keeps it: whole picoseconds."""
    return 1_000_000 // mhz
