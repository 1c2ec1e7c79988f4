"""Which (op, edge) cells a case meets: each node's declared edges (`OpSpec.edges`) checked on the
operands that node really gets, running the case's program node by node in eager, in its dtype.

An edge met somewhere in the graph but masked or transformed before it reaches the op does not
count: the check reads the op's own operands (the written view of an in-place op, a Python
number in its place in the call).

    >>> cells_met(case)
    {('reciprocal', 'x0=+0'), ('sum', 'no dim'), ...}
    >>> meant_reached(case)            # the cells the generator meant (case.values["meant"])
    [('reciprocal', 'x0=+0', True), ...]
"""
from __future__ import annotations

import torch

from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.ops import get_op
from torchsim_diff.ops.edges import NoEdges, met


def declared_edges(spec) -> tuple:
    """The op's edges; none for an op that declares NoEdges."""
    return () if isinstance(spec.edges, NoEdges) else tuple(spec.edges or ())


def operand_slots(node: dict) -> list:
    """Where each operand of the node's torch call comes from, in the call's order: ("arg", j)
    for its j-th argument, ("scalar", None) for its Python number."""
    slots = [("arg", j) for j in range(len(node["args"]))]
    attrs = node.get("attrs", {})
    if "scalar" in attrs:
        # A left number comes before the node's last tensor (`where(cond, 2.0, x)`, `pow(2, x)`).
        slots.insert(len(slots) - 1 if attrs.get("scalar_side") == "left" else len(slots), ("scalar", None))
    return slots


def operands_of(node: dict, env: dict) -> list:
    """The node's operands in its torch call's order (operand_slots): tensors from `env`
    (name -> value), the written view for an in-place op, and its Python number where the node
    has one."""
    # Imported here: a family module imported before the registry loads them all would move its
    # ops to the front of the registry, whose order the op schedule lists ops in.
    from torchsim_diff.ops.inplace import target_expr

    attrs = node.get("attrs", {})
    tensors = [env[name] for name in node["args"]]
    if get_op(node["op"]).mutates and attrs.get("view"):
        tensors[0] = eval_expression(target_expr("target", attrs["view"]), {"torch": torch, "target": tensors[0]})
    return [attrs["scalar"] if kind == "scalar" else tensors[j] for kind, j in operand_slots(node)]


def cells_met_by_node(case) -> dict:
    """node id -> the labels of its op's declared edges that node meets at its own operands."""
    found = {}
    for node, env in case.eager_steps():
        spec = get_op(node["op"])
        operands = operands_of(node, env)
        found[node["id"]] = {edge.label for edge in declared_edges(spec) if met(edge, operands, node.get("attrs", {}))}
    return found


def cells_met(case) -> set:
    """(op name, edge label) for every declared edge some node of `case` meets at its operands."""
    ops = {node["id"]: node["op"] for node in case.nodes}
    return {(ops[node_id], label) for node_id, labels in cells_met_by_node(case).items() for label in labels}


def meant_cells(case) -> list:
    """(node id, op name, edge label) for each cell the case meant to meet (the generator records
    them in the case's values as "meant": [[node id, label], ...]); a cell whose node is gone (a
    reduced case) or whose op declares no such edge is left out."""
    ops = {node["id"]: node["op"] for node in case.nodes}
    found = []
    for node_id, label in case.values.get("meant", []):
        if node_id in ops and label in {edge.label for edge in declared_edges(get_op(ops[node_id]))}:
            found.append((node_id, ops[node_id], label))
    return found


def meant_reached(case) -> list:
    """(op name, edge label, reached) for each cell the case meant: reached when the very node that
    meant it meets it at its own operands, in eager."""
    by_node = cells_met_by_node(case)
    return [(op, label, label in by_node.get(node_id, ())) for node_id, op, label in meant_cells(case)]
