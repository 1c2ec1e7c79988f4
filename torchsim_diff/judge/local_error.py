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

In-place nodes make some values unknowable from what a run returns: an intermediate is
returned as it stands at the program's end, so a view whose storage an in-place node writes
holds what was written, not what the view computed nor what nodes read from it; and an input
read after an in-place node wrote it no longer holds its materialised values. Those nodes get
no local figure (stale_nodes tells them by replaying the case eagerly and following storages).

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
    or in `values`, but those of stale_nodes."""
    stale = stale_nodes(case)
    env = dict(zip((spec["name"] for spec in case.inputs), layout.materialize_all(case.to_dict())))
    env.update(values)
    figures = {}
    for node in case.nodes:
        if node["id"] not in values or node["id"] in stale or not set(node["args"]) <= set(env):
            continue
        found = node_stats(get_op(node["op"]).emit(list(node["args"]), node.get("attrs", {})),
                           {name: env[name] for name in node["args"]}, values[node["id"]])
        if found is not None:
            figures[node["id"]] = found
    return figures


def stale_nodes(case) -> set:
    """Ids of the nodes whose local figure cannot be trusted (module docstring): in-place nodes,
    nodes whose result shares storage with one an in-place node writes, nodes reading such a
    result, and nodes reading an input after an in-place node wrote its storage. Found by
    running the case eagerly in its dtype; all of them if that run fails."""
    names = [spec["name"] for spec in case.inputs]
    tensors, written_before, written = {}, {}, set()   # node id -> storages written before it; all written
    try:
        for node, tensors in case.eager_steps():
            written_before[node["id"]] = set(written)
            if get_op(node["op"]).mutates:              # the storage an in-place node writes is its first argument's
                written.add(_storage(tensors[node["args"][0]]))
    except Exception:  # noqa: BLE001 - the reference ran this case; if a replay here does not, trust no node
        return {node["id"] for node in case.nodes}
    return {node["id"] for node in case.nodes if _stale(node, tensors, names, written_before[node["id"]], written)}


def _stale(node, tensors: dict, inputs: list, written_before: set, written: set) -> bool:
    if get_op(node["op"]).mutates or _storage(tensors[node["id"]]) in written:
        return True
    for arg in node["args"]:
        held = _storage(tensors[arg])
        if held in (written_before if arg in inputs else written):
            return True
    return False


def _storage(value):
    """Where a tensor's elements live (None for anything else)."""
    return value.untyped_storage().data_ptr() if isinstance(value, torch.Tensor) else None


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
    _mismatch, stats = comparison.compare(got, eager.detach(), truth.detach(), where=comparison.Where("node"))
    return stats


def _float64(value):
    """A floating tensor in float64; anything else as it is."""
    return value.double() if isinstance(value, torch.Tensor) and value.dtype.is_floating_point else value

