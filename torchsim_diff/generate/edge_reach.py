"""Which (op, edge) cells a case meets: each node's declared edges (`OpSpec.edges`) checked on the
operands that node really gets, running the case's program node by node in eager, in its dtype.

An edge met somewhere in the graph but masked or transformed before it reaches the op does not
count: the check reads the op's own operands (the written view of an in-place op, a Python
number in its place in the call).

    >>> cells_met(case)
    {('reciprocal', 'x0=+0'), ('sum', 'no dim'), ...}
"""
from __future__ import annotations

import torch

from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.ops import get_op
from torchsim_diff.ops.edges import NoEdges, met


def declared_edges(spec) -> tuple:
    """The op's edges; none for an op that declares NoEdges."""
    return () if isinstance(spec.edges, NoEdges) else tuple(spec.edges or ())


def operands_of(node: dict, env: dict) -> list:
    """The node's operands in its torch call's order: tensors from `env` (name -> value), the
    written view for an in-place op, and its Python number where the node has one."""
    # Imported here: a family module imported before the registry loads them all would move its
    # ops to the front of the registry, whose order the op schedule lists ops in.
    from torchsim_diff.ops.inplace import target_expr

    attrs = node.get("attrs", {})
    operands = [env[name] for name in node["args"]]
    if get_op(node["op"]).mutates and attrs.get("view"):
        operands[0] = eval_expression(target_expr("target", attrs["view"]), {"torch": torch, "target": operands[0]})
    if "scalar" in attrs:
        # A left number comes before the node's last tensor (`where(cond, 2.0, x)`, `pow(2, x)`).
        position = len(operands) - 1 if attrs.get("scalar_side") == "left" else len(operands)
        operands.insert(position, attrs["scalar"])
    return operands


def cells_met(case) -> set:
    """(op name, edge label) for every declared edge some node of `case` meets at its operands."""
    found = set()
    for node, env in case.eager_steps():
        spec = get_op(node["op"])
        operands = operands_of(node, env)
        found |= {(spec.name, edge.label) for edge in declared_edges(spec) if met(edge, operands, node.get("attrs", {}))}
    return found
