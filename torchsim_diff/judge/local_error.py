"""Each node's local error: its route value against the float64 op applied to the route's own
values of that node's inputs.

A node compared with the program's float64 value through the whole graph up to it (the
carried figure, op_figures.measure) inherits every error upstream: one wrong or
ill-conditioned producer charges its error to every op after it. The local figure asks only
what the op itself did with the values it was given:

    truth = op(inputs upcast to float64)       # the route's own values of the node's inputs
    eager = op(the same inputs, in the case dtype)
    local figures = compare(route's node value, eager, truth)

so its error / eager's error (Stats.err_over_eager: eager's floored at one ulp of the output's
scale) is the op's own against eager's on the same inputs.

A case with an in-place node gives no local figures: a view returned as an intermediate holds
its values at the end of the program, after the in-place node wrote through it, not those the
nodes before read (nor the view's own result).

    figures = local_stats(case, {"v0": route_v0, "v1": route_v1, ...})   # node id -> Stats
"""
from __future__ import annotations

import torch

from torchsim_diff.case import layout
from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.judge import comparison
from torchsim_diff.ops import get_op


def local_stats(case, values: dict) -> dict:
    """node id -> its local Stats (comparison.Stats) for every node of `case` whose value is in
    `values` (node id -> the route's tensor) and whose inputs are the case's (as materialised)
    or in `values`; {} for a case with an in-place node (module docstring)."""
    if any(get_op(node["op"]).mutates for node in case.nodes):
        return {}
    env = dict(zip((spec["name"] for spec in case.inputs), layout.materialize_all(case.to_dict())))
    env.update(values)
    figures = {}
    for node in case.nodes:
        if node["id"] not in values or not set(node["args"]) <= set(env):
            continue
        found = node_stats(get_op(node["op"]).emit(list(node["args"]), node.get("attrs", {})),
                           {name: env[name] for name in node["args"]}, values[node["id"]])
        if found is not None:
            figures[node["id"]] = found
    return figures


def node_stats(expression: str, inputs: dict, got: torch.Tensor) -> comparison.Stats | None:
    """The Stats of `got` against `expression` evaluated on `inputs` (name -> tensor) in their
    dtype and in float64; None where the expression does not run on them or its result is no
    tensor of `got`'s shape and dtype."""
    try:
        eager = eval_expression(expression, {"torch": torch, **inputs})
        truth = eval_expression(expression, {"torch": torch, **{k: _float64(v) for k, v in inputs.items()}})
    except (RuntimeError, ValueError, TypeError, IndexError, ArithmeticError):   # a view of a contiguous copy, say
        return None
    if not all(isinstance(t, torch.Tensor) for t in (eager, truth)) or eager.shape != got.shape \
            or eager.dtype != got.dtype:
        return None
    _mismatch, stats = comparison.compare(got, eager.detach(), truth.detach(), where="node")
    return stats


def _float64(value):
    """A floating tensor in float64; anything else as it is."""
    return value.double() if isinstance(value, torch.Tensor) and value.dtype.is_floating_point else value

