"""The TOG model: the format's rules refuse what TOGSim would crash or hang on, and the kernels
and strategies only build TOGs that follow them."""
import dataclasses

import pytest
from hypothesis import given, settings

from torchsim_diff.timing.tog import (TOG, Compute, ComputeKind, InvalidTOG, Load, Loop, LoopKind, Store,
                                      Wait, validate, wait_for)
from torchsim_diff.timing.tog_kernels import ElementwiseTiling, GemmTiling, elementwise, gemm
from torchsim_diff.timing.tog_strategies import hardware_configs, togs

ADDRESSES = {"arg0": 0x1000, "arg1": 0x2000}


def load(buffer="arg0", **changes):
    base = Load(buffer, (8, 8), (8, 1), ("m",), (256,), ("m",), (1,))
    return dataclasses.replace(base, **changes)


def store(**changes):
    return dataclasses.replace(Store("arg1", (8, 8), (8, 1), ("m",), (256,), ("m",), (1,)), **changes)


def graph(*body, kind=LoopKind.OUTER, index="m", end=32, stride=8):
    return TOG("t", (Loop(index, end, tuple(body), kind, stride=stride),), ADDRESSES)


def test_a_plain_tiled_graph_is_valid():
    tog = graph(load(), Compute(10), store())
    assert validate(tog) is tog


BAD_GRAPHS = {
    "no outer loop": (graph(load(), Compute(10), store(), kind=LoopKind.NORMAL), "outermost loop"),
    "index read as constant": (graph(Compute(1), index="col"), "start with 'c'"),
    "zero stride": (graph(Compute(1), stride=0), "stride=0"),
    "empty range": (graph(Compute(1), end=0), "start < end"),
    "unknown buffer": (graph(load("arg9"), Compute(1)), "no address"),
    "element size": (graph(load(element_size=3), Compute(1)), "element_size=3"),
    "tile dims mismatch": (graph(load(tile_stride=(1,)), Compute(1)), "same length"),
    "five tile dims": (graph(load(tile_size=(1,) * 5, tile_stride=(1,) * 5), Compute(1)), "1..4"),
    "index not enclosing": (graph(load(loop_indices=("z",)), Compute(1)), "'z' is neither"),
    "tag not enclosing": (graph(load(tag_indices=("z",)), Compute(1)), "tag index 'z'"),
    "two store tags": (graph(store(tag_indices=("m", "m"), tag_strides=(1, 1))), "exactly one tag"),
    "negative cycles": (graph(Compute(-1)), "cycles=-1"),
    "overlap past cost": (graph(Compute(5, ComputeKind.MATMUL, 6)), "overlapping_cycles=6"),
    "async never waited": (graph(load(is_async=True), Compute(1)), "never waited"),
    "wait without load": (graph(Wait("arg0", ("m",), (1,), (8,)), Compute(1)), "no asynchronous load"),
    "duplicate index": (graph(Loop("m", 4, (Compute(1),))), "unique"),
}


@pytest.mark.parametrize("tog, fragment", BAD_GRAPHS.values(), ids=BAD_GRAPHS.keys())
def test_a_graph_breaking_a_rule_is_refused_with_the_rule(tog, fragment):
    with pytest.raises(InvalidTOG) as error:
        validate(tog)
    assert fragment in str(error.value)


def test_the_wait_of_an_accumulated_async_load_marks_the_accumulation_index():
    outer, acc = Loop("m", 64, (), LoopKind.OUTER, stride=64), Loop("k", 32, (), LoopKind.ACCUMULATION, stride=16)
    async_load = load(loop_indices=("m", "k"), loop_strides=(128, 4), is_async=True)
    wait = wait_for(async_load, (outer, acc), systolic_size=32)
    assert wait == Wait("arg0", ("k", "m"), (-1, 1), (1, 32))


def test_compute_occupancy_multiplies_by_trip_counts_and_leaves_out_overlap():
    tog = graph(Loop("k", 4, (Compute(10, ComputeKind.MATMUL, 3), Compute(5)), LoopKind.ACCUMULATION), end=16, stride=8)
    occupancy = tog.compute_occupancy()
    assert occupancy[ComputeKind.MATMUL] == 2 * 4 * 7 and occupancy[ComputeKind.VECTOR] == 2 * 4 * 5


def test_gemm_work_and_tiles_follow_its_sizes():
    small, large = (gemm(GemmTiling(m, 64, 64, 32, 32, 32, macs_per_cycle=1024)) for m in (64, 128))
    assert (small.outer_tiles(), large.outer_tiles()) == (4, 8)
    assert large.compute_occupancy()[ComputeKind.MATMUL] == 2 * small.compute_occupancy()[ComputeKind.MATMUL]


@pytest.mark.parametrize("tiling", [
    GemmTiling(64, 64, 64, 32, 32, 32, async_loads=True, inner_splits=2),
    GemmTiling(64, 64, 64, 32, 32, 32, accumulate=False),
    ElementwiseTiling(64, 32, 16, 16, inputs=3)], ids=["gemm-async-inner", "gemm-no-acc", "elementwise"])
def test_kernels_follow_the_format(tiling):
    build = gemm if isinstance(tiling, GemmTiling) else elementwise
    validate(build(tiling))


@settings(max_examples=40, deadline=None)
@given(togs(), hardware_configs())
def test_drawn_graphs_follow_the_format(tog, hardware):
    validate(tog)
    assert hardware.dram_channels & (hardware.dram_channels - 1) == 0
