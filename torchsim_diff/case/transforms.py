"""Cases made from a case: every intermediate as an output, and the node that diverges first.

    >>> widened, refs = intermediates_as_outputs(case)     # output k of widened is node refs[k]
    >>> first_divergent_node(case, checker.check(widened, route), refs)
"""
from __future__ import annotations

from torchsim_diff.case.graph import Case
from torchsim_diff.ops import get_op


def intermediates_as_outputs(case):
    """(case', refs): `case` returning every non-mutating node's result (in program order)
    after its own outputs are dropped, so output k of case' is the value of refs[k]. The
    effects of in-place nodes stay, compared through the input storages as always."""
    refs = [n["id"] for n in case.nodes if not get_op(n["op"]).mutates]
    data = case.to_dict()
    data["outputs"] = refs
    return Case.from_dict(data), refs


def first_divergent_node(case, verdict_on_intermediates, refs) -> dict | None:
    """The node of `case` whose value diverges first, from the verdict of the
    intermediates_as_outputs case (None when that verdict names no output)."""
    where = verdict_on_intermediates.where
    if not verdict_on_intermediates.failed or where is None or where.place != "output":
        return None
    ref = refs[where.key]
    return next(n for n in case.nodes if n["id"] == ref)
