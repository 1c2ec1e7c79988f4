"""Hypothesis strategies for TOGs and hardware configs that are valid by construction.

A TOG is drawn as the parameters of a tiled kernel (`tog_kernels`): sizes as a tile size times
a tile count, so every tile is whole; accumulation loops, asynchronous loads with their waits,
inner-loop splits and compute rates are drawn flags and small choices. Hypothesis shrinks
those numbers, so a failure reduces to the fewest, smallest tiles and the fewest features
that still show it. Configs draw core and systolic-array counts and a simple-DRAM model
(channel count and request size are powers of two, as TOGSim's address mapping needs).
"""
from __future__ import annotations

from hypothesis import strategies as st

from torchsim_diff.timing.hw_config import HardwareConfig
from torchsim_diff.timing.tog_kernels import ElementwiseTiling, GemmTiling, elementwise, gemm

TILE_SIZES = (8, 16, 32, 64, 128)
MAX_TILES_PER_DIM = 4


@st.composite
def gemm_tilings(draw, max_tiles_per_dim: int = MAX_TILES_PER_DIM) -> GemmTiling:
    """A GEMM tiling: each of m, n, k a drawn tile size times 1..max_tiles_per_dim tiles."""
    tm, tn, tk = (draw(st.sampled_from(TILE_SIZES)) for _ in range(3))
    counts = [draw(st.integers(1, max_tiles_per_dim)) for _ in range(3)]
    accumulate = draw(st.booleans())
    return GemmTiling(
        m=tm * counts[0], n=tn * counts[1], k=tk * counts[2], tm=tm, tn=tn, tk=tk,
        accumulate=accumulate, async_loads=draw(st.booleans()),
        inner_splits=draw(st.sampled_from((1, 2, 4))),
        macs_per_cycle=draw(st.sampled_from((64, 256, 1024))),
        element_size=draw(st.sampled_from((2, 4))))


@st.composite
def elementwise_tilings(draw, max_tiles_per_dim: int = MAX_TILES_PER_DIM) -> ElementwiseTiling:
    """An elementwise tiling over a rows x cols array with 1..3 inputs."""
    tr, tc = draw(st.sampled_from(TILE_SIZES)), draw(st.sampled_from(TILE_SIZES))
    return ElementwiseTiling(
        rows=tr * draw(st.integers(1, max_tiles_per_dim)), cols=tc * draw(st.integers(1, max_tiles_per_dim)),
        tr=tr, tc=tc, inputs=draw(st.integers(1, 3)),
        elements_per_cycle=draw(st.sampled_from((16, 64, 256))), element_size=draw(st.sampled_from((2, 4))))


def tilings(max_tiles_per_dim: int = MAX_TILES_PER_DIM) -> st.SearchStrategy:
    """A GEMM or elementwise tiling (GEMM first: it shrinks towards GEMM)."""
    return st.one_of(gemm_tilings(max_tiles_per_dim), elementwise_tilings(max_tiles_per_dim))


def togs(max_tiles_per_dim: int = MAX_TILES_PER_DIM) -> st.SearchStrategy:
    """A TOG of a tiled GEMM or elementwise kernel, valid by the format's rules."""
    return tilings(max_tiles_per_dim).map(build)


def build(tiling):
    """The TOG of a tiling drawn by `tilings`."""
    return gemm(tiling) if isinstance(tiling, GemmTiling) else elementwise(tiling)


@st.composite
def hardware_configs(draw, max_cores: int = 4) -> HardwareConfig:
    """An NPU with 1..max_cores cores, 1..2 systolic arrays each, and a simple DRAM."""
    return HardwareConfig(
        num_cores=draw(st.integers(1, max_cores)),
        systolic_arrays_per_core=draw(st.integers(1, 2)),
        dram_channels=draw(st.sampled_from((1, 2, 4, 8, 16))),
        dram_request_bytes=draw(st.sampled_from((32, 64))),
        dram_burst_length=draw(st.sampled_from((1, 2, 4))),
        dram_latency_cycles=draw(st.integers(1, 200)),
        dram_freq_mhz=draw(st.sampled_from((500, 1000, 2000))))
