"""TOGs of route spike's kernels, one per linalg op, from a module the route recorded
(tests/fixtures/togsim/spike_seed01.linalg.mlir: corpora/seed/seed-01-float32.json lowered; that
run retired 86823 instructions). Expected tiles follow from the shapes in the module's text."""
import math
import os

import pytest

from torchsim_diff.timing.linalg_text import Unreadable, parse_module
from torchsim_diff.timing.linalg_togs import (MAX_ACCUMULATION_STEPS, MAX_OUTER_TILES, buffer_addresses,
                                              module_kernels)
from torchsim_diff.timing.tog import Compute, ComputeKind, Load, Loop, LoopKind, Store, validate
from torchsim_diff.timing.togsim_runner import Unavailable, find_togsim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "togsim", "spike_seed01.linalg.mlir")
INSTRET = 86823


@pytest.fixture(scope="module")
def module():
    with open(FIXTURE) as handle:
        return parse_module(handle.read())


@pytest.fixture(scope="module")
def kernels(module):
    found, skipped = module_kernels(module, INSTRET)
    assert not skipped
    return {kernel.name: kernel for kernel in found}


def leaves(tog, kind):
    return [node for node, _ in tog.walk() if isinstance(node, kind)]


def loop(tog, index):
    found, = [node for node in tog.loops() if node.index == index]
    return found


# -- the reader ----------------------------------------------------------------------------
def test_the_reader_finds_the_functions_buffers_and_every_linalg_op(module):
    assert [t.shape for _, t in module.arguments] == [(1, 17), (17, 3), (1, 3), (17,), (33,), (129, 1, 2, 1),
                                                      (1, 1, 2, 1)]
    assert module.returned == ("%3", "%7", "%arg3", "%9", "%transposed", "%12")
    assert [op.name for op in module.ops] == ["linalg.fill", "linalg.matmul", "linalg.generic", "linalg.fill",
                                             "linalg.generic", "linalg.generic", "linalg.generic",
                                             "linalg.transpose", "linalg.generic"]


def test_domains_come_from_the_operand_shapes_and_maps(module):
    matmul, transpose, power = module.ops[1], module.ops[7], module.ops[8]
    assert matmul.domain() == (1, 3, 17) and matmul.iterators == ("parallel", "parallel", "reduction")
    assert transpose.domain() == (3, 17) and transpose.inputs[0].indexing == ("d1", "d0")
    assert power.inputs[1].indexing == ("0", "d1", "d2", "d3")
    assert module.ops[4].iterators == ("reduction", "reduction") and module.ops[4].domain() == (17, 3)


@pytest.mark.parametrize("line, why", [
    ("%1 = linalg.fill ins(%c : f32) outs(%0 : tensor<?x3xf32>) -> tensor<?x3xf32>", "dynamic"),
    ("%1 = linalg.conv_2d ins(%a, %b : tensor<4xf32>, tensor<4xf32>) outs(%0 : tensor<4xf32>) -> tensor<4xf32>",
     "NAMED_OPS"),
])
def test_text_the_reader_does_not_know_is_refused_with_the_reason(line, why):
    with pytest.raises(Unreadable, match=why):
        parse_module(f"func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {{\n  {line}\n}}\n")


def test_an_index_expression_that_is_not_a_plain_dim_is_not_timed_and_says_so():
    text = ("#a = affine_map<(d0, d1) -> (d0 + d1)>\n#b = affine_map<(d0, d1) -> (d0, d1)>\n"
            "func.func @f(%arg0: tensor<8xf32>) -> tensor<4x5xf32> {\n"
            '  %1 = linalg.generic {indexing_maps = [#a, #b], iterator_types = ["parallel", "parallel"]} '
            "ins(%arg0 : tensor<8xf32>) outs(%0 : tensor<4x5xf32>) {\n}\n")
    kernels, skipped = module_kernels(parse_module(text), 100)
    assert kernels == [] and "d0 + d1" in skipped[0][1]


# -- the TOGs ------------------------------------------------------------------------------
def test_every_op_of_the_module_is_a_valid_tog(kernels):
    assert len(kernels) == 9
    for kernel in kernels.values():
        validate(kernel.tog)


def test_the_matmul_tiles_its_columns_and_accumulates_over_k(kernels):
    tog = kernels["op01-matmul"].tog            # (1x17) @ (17x3) into the fill's 1x3
    steps = math.ceil(17 / MAX_ACCUMULATION_STEPS)
    assert tog.outer_tiles() == 3 and loop(tog, "r").kind is LoopKind.ACCUMULATION
    assert (loop(tog, "r").stride, loop(tog, "r").trip_count()) == (steps, math.ceil(17 / steps))
    a, b, init = leaves(tog, Load)
    assert (a.tile_size, a.tile_stride, a.loop_indices, a.loop_strides) == ((steps,), (1,), ("r",), (4,))
    assert (b.tile_size, b.tile_stride) == ((steps,), (3,))            # a column slice of 17x3
    assert dict(zip(b.loop_indices, b.loop_strides)) == {"r": 3 * 4, "t": 4}
    assert init.tile_size == (1,)                                       # the fill's value, read
    store, = leaves(tog, Store)
    assert store.tile_size == (1,) and store.loop_strides == (4,) and store.tag_indices == ("t",)


def test_a_broadcast_operand_is_read_at_the_same_place_by_every_tile(kernels):
    tog = kernels["op08-generic"].tog           # pow(129x1x2x1, 1x1x2x1)
    rows = math.ceil(129 / MAX_OUTER_TILES)
    x, exponent = leaves(tog, Load)
    assert loop(tog, "t").stride == rows and tog.outer_tiles() == math.ceil(129 / rows)
    assert (x.tile_size, x.tile_stride, x.loop_strides) == ((rows * 2,), (1,), (2 * 4,))
    assert exponent.tile_size == (2,) and exponent.loop_indices == ()


def test_a_transpose_reads_columns_and_writes_rows(kernels):
    tog = kernels["op07-transpose"].tog         # 17x3 -> 3x17
    load, = leaves(tog, Load)
    store, = leaves(tog, Store)
    assert (load.tile_size, load.tile_stride, load.loop_strides) == ((17,), (3,), (4,))
    assert (store.tile_size, store.tile_stride, store.loop_strides) == ((17,), (1,), (17 * 4,))


def test_a_full_reduction_is_one_tile_that_accumulates(kernels):
    tog = kernels["op04-generic"].tog           # sum of 17x3 into 1x1
    assert tog.outer_tiles() == 1 and loop(tog, "r").kind is LoopKind.ACCUMULATION
    x, init = leaves(tog, Load)
    steps = math.ceil(17 / MAX_ACCUMULATION_STEPS)
    assert x.tile_size == (steps * 3,) and x.loop_strides == (3 * 4,) and init.tile_size == (1,)


def test_the_tiles_cover_every_byte_of_each_operand(module, kernels):
    value_at = {address: value for value, address in buffer_addresses(module).items()}
    for kernel in kernels.values():
        trips = {l.index: l.trip_count() for l in kernel.tog.loops()}
        for node, _ in kernel.tog.walk():
            if isinstance(node, (Load, Store)):
                moved = node.tile_bytes() * math.prod(trips[i] for i in node.loop_indices)
                value = value_at[kernel.tog.addresses[node.buffer]]
                assert moved >= module.types[value].nbytes, (kernel.name, value, node)


def test_buffers_are_the_arguments_then_the_results_then_the_rest_without_overlap(module):
    placed = buffer_addresses(module)
    order = [v for v, _ in module.arguments] + [v for v in module.returned if v not in dict(module.arguments)]
    assert list(placed)[:len(order)] == order
    spans = sorted((placed[v], placed[v] + module.types[v].nbytes) for v in placed)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))


def test_the_runs_instret_is_shared_by_iteration_points_on_the_vector_unit(module, kernels):
    points = [op.points() for op in module.ops]
    assert abs(sum(k.instret for k in kernels.values()) - INSTRET) <= len(points)
    for op, kernel in zip(module.ops, kernels.values()):
        assert kernel.instret == round(INSTRET * op.points() / sum(points))
        computes = leaves(kernel.tog, Compute)
        assert all(c.kind is ComputeKind.VECTOR for c in computes)
        steps = kernel.tog.outer_tiles() * math.prod(l.trip_count() for l in kernel.tog.loops()
                                                    if l.kind is LoopKind.ACCUMULATION)
        assert kernel.instret - steps < kernel.tog.compute_occupancy()[ComputeKind.VECTOR] <= max(kernel.instret, steps)


# -- end to end: a seed case on route spike through TOGSim -----------------------------------
INSTALL = find_togsim()


@pytest.mark.e2e
@pytest.mark.skipif(isinstance(INSTALL, Unavailable), reason=getattr(INSTALL, "reason", ""))
def test_a_spike_cases_linalg_kernels_run_through_togsim_and_the_checks(tmp_path, capsys):
    pytest.importorskip("onnx", reason="onnx is not installed: pip install 'torchsim-diff[togsim]'")
    from torchsim_diff.campaign.time_kernels import main
    from torchsim_diff.timing.kernel_timing import TIMING_FILE, read_timings
    case = os.path.join(ROOT, "corpora", "seed", "seed-01-float32.json")
    status = main([case, "--route", "spike", "--out", str(tmp_path), "--timeout", "60"])
    if status == 2 and "unavailable" in capsys.readouterr().err:
        pytest.skip("route spike is unavailable here")
    assert status == 0
    rows, problem = read_timings([str(tmp_path)])
    assert not problem and len(rows) == 9 and os.path.isfile(tmp_path / TIMING_FILE)
    for row in rows:
        assert row["outcome"] == "ok" and row["cycles"] > 0 and row["instret"] > 0
        assert row["dram_ratio"] >= 1 and row["compute_ratio"] >= 1
        failed = [v for v in row["verdicts"] if not v["passed"]]
        assert all(v["check"] in ("units_accounted", "units_work") and v["known"] for v in failed), failed
