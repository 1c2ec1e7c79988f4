"""TOGSim against a second model on GEMM: the analytic systolic-array estimate.

A GEMM TOG (`tog_kernels.gemm`) whose tiles cost what a systolic_size x systolic_size array at
full use needs (macs_per_cycle = systolic_size^2) runs on TOGSim; `checks.cross_model` flags
cycles an order of magnitude away from max(M*N*K / (rows*cols*arrays) + rows + cols, DRAM
bytes / peak). `SWEEP` holds GEMMs of varied sizes and tilings for the check.
"""
from __future__ import annotations

import dataclasses
import tempfile

from torchsim_diff.timing import checks
from torchsim_diff.timing.hw_config import HardwareConfig
from torchsim_diff.timing.tog_kernels import GemmTiling, gemm
from torchsim_diff.timing.togsim_runner import Outcome, TOGSimInstall, simulate

SYSTOLIC = 128
SWEEP = tuple(GemmTiling(m, n, k, tm, tn, tk, macs_per_cycle=SYSTOLIC * SYSTOLIC, systolic_size=SYSTOLIC)
              for m, n, k, tm, tn, tk in (
                  (128, 128, 128, 128, 128, 128), (256, 256, 256, 128, 128, 128),
                  (512, 512, 512, 128, 128, 128), (1024, 1024, 1024, 128, 128, 128),
                  (512, 256, 1024, 128, 128, 128), (256, 256, 256, 64, 64, 64),
                  (512, 512, 128, 128, 128, 128), (128, 1024, 512, 128, 128, 128)))


def full_use(tiling: GemmTiling) -> GemmTiling:
    """The tiling with each tile costed as a full systolic array of its size computes it."""
    return dataclasses.replace(tiling, macs_per_cycle=tiling.systolic_size ** 2)


def examine_gemm(install: TOGSimInstall, tiling: GemmTiling, hardware: HardwareConfig,
                 timeout_s: float) -> checks.Verdict:
    """The cross_model verdict of one GEMM, or a failed `run` verdict."""
    with tempfile.TemporaryDirectory(prefix="togsim-gemm-") as folder:
        run = simulate(install, gemm(tiling), hardware, folder, timeout_s)
    if run.outcome is not Outcome.OK:
        return checks.Verdict("run", False, f"{run.outcome.value}: {run.message}", {"outcome": run.outcome.value})
    arrays = hardware.systolic_arrays_per_core * hardware.num_cores
    estimate = checks.systolic_gemm_cycles(tiling.m, tiling.n, tiling.k, tiling.systolic_size,
                                           tiling.systolic_size, arrays)
    return checks.cross_model(run.figures, estimate, hardware.peak_dram_bytes_per_core_cycle())
