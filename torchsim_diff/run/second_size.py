"""The second size of a dynamic-shape case: the same graph at other concrete sizes, run
through the function its first size compiled, which is where recompilation and guard bugs
show (a guard that lets a kernel specialised for 17 run on 18 elements, a recompile that
reads stale strides).

    >>> second = resized(case)       # a Case, or None when no size of the graph is free

A size is free when no node attribute names it as a size (a `view(3, 17)` ties its sizes to
the program text, which must stay the same); sizes only grow, so an index or a window below
a size stays valid. Every input dimension of a free
size gets the new size, so sizes that agree (matmul K, broadcast partners, an index's range)
keep agreeing; strides are rebuilt so that each input keeps its layout classes. The resized
case is kept only if it validates and eager runs it; otherwise each free size is tried alone.
"""
from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from torchsim_diff.case import layout
from torchsim_diff.case.graph import Case
from torchsim_diff.routes import route_class
from torchsim_diff.routes.compile_options import SECOND_SIZE_MARK, replays_second_size

STAGE = "second_size"
# Attributes whose integers are no sizes (dimension indices, amounts, offsets) or only bound
# a size from below (an index, a window, k of topk), which a larger size keeps valid.
NOT_SIZES = {"dim", "dims", "dim0", "dim1", "keepdim", "correction", "diagonal", "shifts", "value",
             "alpha", "beta", "min_val", "max_val", "min", "max", "negative_slope", "eps", "index",
             "start", "stop", "step", "length", "k", "stride", "padding", "dilation", "kernel",
             "groups", "num_groups", "chunks"}


def wanted(route: str, options: dict | None, case: Case) -> bool:
    """Whether `route` compiles `case` with dynamic shapes and so owes it a second size."""
    if not getattr(route_class(route), "compile_settings", False):
        return False
    return replays_second_size(options or {}, case.to_dict())


def dynamic_setting(route: str, options: dict | None, case: Case):
    """True/False for routes with compile settings (the record's `dynamic`), else None."""
    if not getattr(route_class(route), "compile_settings", False):
        return None
    from torchsim_diff.routes.compile_options import dynamic_for
    return dynamic_for(options or {}, case.to_dict())


def replay(check, verdict, timeout_s=None, timings=()):
    """Run the passing `verdict`'s case again at a second size through `check(case, route,
    timeout_s)` (the same warm worker); a failure there becomes the verdict, marked as a
    second-size failure (stage, message, bucket). The metrics named in `timings` (seconds)
    are the sums over both runs."""
    second = resized(verdict.case)
    if second is None:
        verdict.metrics.second_size = {"shapes": None, "reason": "no free size"}
        return verdict
    again = check(second, verdict.route, timeout_s)
    shapes = {spec["name"]: spec["shape"] for spec in second.inputs}
    summary = {"shapes": shapes, "status": again.status.value,
               "same_function": again.metrics.same_function}
    both = {k: (getattr(verdict.metrics, k) or 0.0) + (getattr(again.metrics, k) or 0.0) for k in timings}
    verdict.metrics = verdict.metrics.copy(**both, second_size=summary)
    if not again.failed:
        return verdict
    failed = dataclasses.replace(
        again, case=verdict.case, stage=STAGE,
        message=f"at the second size {_describe(shapes)} (same compiled function): {again.message}",
        metrics=again.metrics.copy(**both, second_size=summary))
    failed.refined = failed.signature + "|" + STAGE
    return failed


def _describe(shapes: dict) -> str:
    return ", ".join(f"{name} {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in shapes.items())


# -- the graph transform --------------------------------------------------------------------
def resized(case: Case) -> Case | None:
    """The case at a second size, or None when no free size gives a valid case."""
    if any("data" in spec for spec in case.inputs):
        return None         # explicit values belong to their sizes
    literal = set(_ints([{k: v for k, v in node.get("attrs", {}).items() if k not in NOT_SIZES}
                         for node in case.nodes]))
    sizes = {n for spec in case.inputs for n in spec["shape"]}
    free = sorted(n for n in sizes if n >= 2 and n not in literal)
    for mapping in _mappings(free, sizes | literal):
        candidate = _apply(case, mapping)
        if candidate is not None and _eager_runs(candidate):
            return candidate
    return None


def _mappings(free, taken):
    """Every free size changed at once first (most symbols move), then each alone."""
    if not free:
        return
    used, together = set(taken), {}
    for n in free:
        together[n] = _next_size(n, used)
        used.add(together[n])
    yield together
    if len(free) > 1:
        for n in free:
            yield {n: _next_size(n, taken)}


def _next_size(n: int, taken) -> int:
    """The next size above `n` that no dimension or attribute uses yet."""
    m = n + 1
    while m in taken:
        m += 1
    return m


def _ints(obj):
    if isinstance(obj, bool):
        return
    if isinstance(obj, int):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _ints(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _ints(value)


def _apply(case: Case, mapping: dict) -> Case | None:
    from torchsim_diff.case.validate import InvalidCase, validate_case
    data = case.to_dict()
    for spec in data["inputs"]:
        if not _resize_input(spec, mapping):
            return None
    data["values"] = dict(data["values"], **{SECOND_SIZE_MARK: case.case_id})
    try:
        return validate_case(data)
    except InvalidCase:
        return None


def _resize_input(spec: dict, mapping: dict) -> bool:
    """Resize one input spec in place; False when its layout classes would change."""
    old_shape, geometry = spec["shape"], spec["layout"]
    shape = [mapping.get(n, n) for n in old_shape]
    strides = _strides(old_shape, shape, geometry["strides"])
    slack = geometry["storage_size"] - geometry["offset"] - layout.span(old_shape, geometry["strides"])
    storage = geometry["offset"] + layout.span(shape, strides) + max(slack, 0)
    classes = layout.layout_classes(shape, strides, geometry["offset"], storage, bool(spec.get("mutated")))
    if sorted(classes) != sorted(geometry["classes"]):
        return False
    spec["shape"] = shape
    spec["layout"] = dict(geometry, strides=strides, storage_size=max(storage, 1))
    domain = spec.get("domain", {})
    if "high" in domain:
        spec["domain"] = dict(domain, high=mapping.get(domain["high"], domain["high"]))
    return True


def _strides(old_shape, shape, old_strides) -> list:
    """Strides for `shape` that keep the dims' order and each dim's spacing relative to the
    extent of the dim inside it (a slice step, padding, channels-last all survive)."""
    moving = sorted((d for d, s in enumerate(old_strides) if s != 0), key=lambda d: (old_strides[d], -d))
    strides, inner = list(old_strides), None
    for d in moving:
        if inner is not None:
            ratio = Fraction(old_strides[d], old_strides[inner] * old_shape[inner])
            strides[d] = math.ceil(ratio * strides[inner] * shape[inner])
        inner = d
    return strides


def _eager_runs(case: Case) -> bool:
    """Eager runs the resized program (index ranges, unique indices and shapes still fit)."""
    import torch
    from torchsim_diff.case.program_check import load_program
    program = load_program(case.program_source())
    try:
        with torch.no_grad():
            program(*layout.materialize_all(case.to_dict()))
    except Exception:  # noqa: BLE001 - any rejection means this size is not valid for the graph
        return False
    return True
