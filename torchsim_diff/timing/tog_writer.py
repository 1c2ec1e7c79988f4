"""A TOG written as the ONNX model and attribute JSON that TOGSim reads.

TOGSim uses ONNX as a container: one node per TOG node, in topological order, op_type naming
the node kind (`loop_index_node`, `load_node`, ...), attributes `torchsim_*`, edges by
input/output names, and model metadata `systolic_size` and `stonneGraph`. A loop is a
`loop_index_node` before its body and a `loop_end_node` after it; the node after a loop depends
on its end. Within a body each node depends on the one before it, except that a run of loads
(or waits) shares its predecessor and the node after the run depends on all of them.
The attribute JSON gives each buffer its DRAM address (`address_info`).

Needs the `onnx` package (extra `togsim`).
"""
from __future__ import annotations

import json
import os

import onnx
from onnx import AttributeProto, helper

from torchsim_diff.timing.tog import TOG, Compute, Load, Loop, Store, Wait, validate

OPSET = 13
PRODUCER = "torchsim-diff"


def write_tog(tog: TOG, folder: str, stem: str = "tile_graph") -> tuple:
    """Validate `tog` and write `<stem>.onnx` and `<stem>.attr.json` into `folder`; return both
    paths."""
    validate(tog)
    onnx_path = os.path.join(folder, f"{stem}.onnx")
    attr_path = os.path.join(folder, f"{stem}.attr.json")
    onnx.save(to_model(tog), onnx_path)
    with open(attr_path, "w") as out:
        json.dump(attributes(tog), out, indent=1)
    return onnx_path, attr_path


def attributes(tog: TOG) -> dict:
    """The attribute JSON: each buffer's DRAM address."""
    return {"address_info": {name: int(address) for name, address in tog.addresses.items()}}


def to_model(tog: TOG) -> onnx.ModelProto:
    """The ONNX model of `tog` (not validated: `write_tog` validates)."""
    emitter = _Emitter()
    emitter.body(tog.body, parents=[])
    graph = helper.make_graph(emitter.nodes, tog.name, inputs=[], outputs=[])
    model = helper.make_model(graph, producer_name=PRODUCER, opset_imports=[helper.make_opsetid("", OPSET)])
    helper.set_model_props(model, {"systolic_size": str(tog.systolic_size), "stonneGraph": "0"})
    return model


class _Emitter:
    """Turns the nested TOG into the flat, topologically ordered node list."""

    def __init__(self):
        self.nodes = []

    def body(self, body: tuple, parents: list) -> list:
        """Emit `body` after `parents`; return the outputs the next node depends on."""
        previous, run, run_type = parents, [], None
        for node in body:
            if run and run_type is not type(node):
                previous, run = [n.output[0] for n in run], []
            if isinstance(node, (Load, Wait)):
                run.append(self.emit(node, previous))
                run_type = type(node)
            elif isinstance(node, Loop):
                previous = self.loop(node, previous)
            else:
                previous = [self.emit(node, previous).output[0]]
        if run:
            previous = [n.output[0] for n in run]
        return previous

    def loop(self, loop: Loop, parents: list) -> list:
        start = self.emit_op("loop_index_node", parents, _loop_attributes(loop))
        last = self.body(loop.body, [start.output[0]])
        end = self.emit_op("loop_end_node", last, {"torchsim_loop_idx": loop.index})
        return [end.output[0]]

    def emit(self, node, parents: list) -> onnx.NodeProto:
        op_type, attrs = _node_attributes(node)
        return self.emit_op(op_type, parents, attrs)

    def emit_op(self, op_type: str, parents: list, attrs: dict) -> onnx.NodeProto:
        name = f"{op_type}{len(self.nodes)}"
        node = helper.make_node(op_type, inputs=list(parents), outputs=[f"{name}_output"], name=name)
        node.attribute.extend(_attribute(key, value) for key, value in {"torchsim_name": name, **attrs}.items())
        self.nodes.append(node)
        return node


def _loop_attributes(loop: Loop) -> dict:
    return {"torchsim_loop_idx": loop.index, "torchsim_start": loop.start, "torchsim_end": loop.end,
            "torchsim_stride": loop.stride, "torchsim_loop_type": loop.kind.value}


def _node_attributes(node) -> tuple:
    if isinstance(node, Compute):
        return "compute_node", {"torchsim_cycle": node.cycles, "torchsim_compute_type": int(node.kind),
                                "torchsim_overlapping_cycle": node.overlapping_cycles}
    if isinstance(node, Wait):
        return "memory_wait_node", {
            "torchsim_base_addr": node.buffer, "torchsim_tag_idx_list": list(node.tag_indices),
            "torchsim_tag_stride_list": list(node.tag_strides),
            "torchsim_tag_divider_list": list(node.tag_dividers)}
    op_type = "load_node" if isinstance(node, Load) else "store_node"
    return op_type, {
        "torchsim_base_addr": node.buffer, "torchsim_tile_size": list(node.tile_size),
        "torchsim_tile_stride": list(node.tile_stride), "torchsim_element_size": node.element_size,
        "torchsim_tag_idx_list": list(node.tag_indices), "torchsim_tag_stride_list": list(node.tag_strides),
        "torchsim_loop_idx_list": list(node.loop_indices),
        "torchsim_loop_stride_list": list(node.loop_strides),
        "torchsim_is_async": int(node.is_async), "torchsim_indirect_mode": 0}


# Attribute names whose value is a list of strings; every other list holds ints. Stating the
# type keeps empty lists writable (ONNX cannot infer the type of an empty list).
_STRING_LISTS = {"torchsim_tag_idx_list", "torchsim_loop_idx_list"}


def _attribute(name: str, value) -> AttributeProto:
    if isinstance(value, list):
        kind = AttributeProto.STRINGS if name in _STRING_LISTS else AttributeProto.INTS
        return helper.make_attribute(name, value, attr_type=kind)
    return helper.make_attribute(name, value)
