"""The TOG writer: what it writes reads back with onnx as the nodes, attributes, edges and
metadata TOGSim parses."""
import json

import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed: pip install 'torchsim-diff[togsim]'")
from onnx import helper  # noqa: E402

from torchsim_diff.timing.tog import InvalidTOG, TOG, Compute, Loop  # noqa: E402
from torchsim_diff.timing.tog_kernels import GemmTiling, gemm  # noqa: E402
from torchsim_diff.timing.tog_writer import write_tog  # noqa: E402

TILING = GemmTiling(m=64, n=32, k=48, tm=32, tn=32, tk=16, async_loads=True)


@pytest.fixture
def written(tmp_path):
    onnx_path, attr_path = write_tog(gemm(TILING), str(tmp_path))
    model = onnx.load(onnx_path)
    with open(attr_path) as attr:
        return model, json.load(attr)


def attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def by_type(model, op_type) -> list:
    return [n for n in model.graph.node if n.op_type == op_type]


def test_nodes_come_in_nest_order_with_loops_closed(written):
    model, _ = written
    kinds = [n.op_type for n in model.graph.node]
    assert kinds == ["loop_index_node"] * 3 + ["load_node"] * 2 + ["memory_wait_node"] * 2 + \
        ["compute_node", "loop_end_node", "store_node", "loop_end_node", "loop_end_node"]


def test_every_input_is_an_earlier_output(written):
    model, _ = written
    produced = set()
    for node in model.graph.node:
        assert set(node.input) <= produced, node.name
        produced.update(node.output)


def test_loop_attributes_carry_range_and_kind(written):
    model, _ = written
    loops = {attrs(n)["torchsim_loop_idx"].decode(): attrs(n) for n in by_type(model, "loop_index_node")}
    assert loops["k"]["torchsim_end"] == 48 and loops["k"]["torchsim_stride"] == 16
    assert loops["k"]["torchsim_loop_type"] == b"accumulation_loop"
    assert loops["m"]["torchsim_loop_type"] == b"outer_loop"


def test_load_attributes_carry_tile_offsets_and_tags(written):
    model, _ = written
    a = attrs(by_type(model, "load_node")[0])
    assert a["torchsim_base_addr"] == b"arg0"
    assert a["torchsim_tile_size"] == [32, 16] and a["torchsim_tile_stride"] == [48, 1]
    assert a["torchsim_loop_idx_list"] == [b"m", b"k"] and a["torchsim_loop_stride_list"] == [48 * 4, 4]
    assert a["torchsim_is_async"] == 1 and a["torchsim_element_size"] == 4


def test_the_wait_after_both_loads_depends_on_both(written):
    model, _ = written
    loads = {n.output[0] for n in by_type(model, "load_node")}
    waits = by_type(model, "memory_wait_node")
    assert all(set(w.input) == loads for w in waits)
    assert attrs(waits[0])["torchsim_tag_stride_list"] == [-1, 1]


def test_metadata_and_addresses(written):
    model, attributes = written
    assert {p.key: p.value for p in model.metadata_props} == {"systolic_size": "128", "stonneGraph": "0"}
    assert set(attributes["address_info"]) == {"arg0", "arg1", "arg2"}
    assert len(set(attributes["address_info"].values())) == 3


def test_an_empty_tag_list_is_written_as_typed_empty_list(tmp_path):
    from torchsim_diff.timing.tog import Load, LoopKind
    untagged = Load("arg0", (4,), (1,), ("m",), (16,), (), ())
    tog = TOG("t", (Loop("m", 8, (untagged, Compute(1)), LoopKind.OUTER, stride=4),), {"arg0": 0})
    onnx_path, _ = write_tog(tog, str(tmp_path))
    node = by_type(onnx.load(onnx_path), "load_node")[0]
    assert attrs(node)["torchsim_tag_idx_list"] == []


def test_an_invalid_graph_is_not_written(tmp_path):
    with pytest.raises(InvalidTOG):
        write_tog(TOG("t", (Compute(1),), {}), str(tmp_path))
    assert list(tmp_path.iterdir()) == []
