"""The trigger of a minimal case's failure, found by ablation: the layout, dtype and value
features of its inputs the failure needs (ablations: each feature taken away, the failure run
again), the special elements it needs (needed_specials, delta debugging), and whether its first
divergent op is part of the cause (neutral_substitutes: the op replaced by ones that compute
nothing a compiler could get wrong). triage.refine.ReduceThenBucket runs them on the route."""
from __future__ import annotations

import torch

from torchsim_diff.case import layout
from torchsim_diff.case.graph import Case
from torchsim_diff.ops import get_op
from torchsim_diff.triage.case_edits import _candidate, _is_valid, _materialize, _tidy, _with_values, meta_results
from torchsim_diff.triage.graph_passes import _is_written, _with_geometry
from torchsim_diff.triage.value_passes import _raise_precision


def ablations(case: Case):
    """(feature, [cases without it]) for each layout, dtype or value-class feature of `case`'s
    inputs: the feature is needed when the failure vanishes in every one of the cases."""
    for feature, candidate in _single_ablations(case):
        yield feature, [candidate]
    yield from value_ablations(case)


def _single_ablations(case: Case):
    for k, spec in enumerate(case.inputs):
        if spec.get("mutated") and not _is_written(case, spec["name"]):
            data = case.to_dict()
            data["inputs"][k]["mutated"] = False
            candidate = _candidate(data)
            if candidate is not None and _is_valid(candidate):
                yield "inout", candidate
        for feature, geometry in _input_ablations(spec):
            data = case.to_dict()
            data["inputs"][k] = _with_geometry(case, k, geometry)
            candidate = _candidate(data)
            if candidate is not None and _is_valid(candidate):
                yield feature, candidate
    for candidate in _raise_precision(case):
        if candidate is not None and _is_valid(candidate):
            yield case.dtype, candidate


# A special value's elements (NaN, Inf, subnormal) are replaced by the first of these ordinary
# values (inside every value domain) that no other element of the view holds: replaced by a
# value its neighbours hold, a subnormal in a view of ones would hide a roll or a permutation
# that moved it, and be named the trigger. A negative one keeps its sign (_signed): -tiny // inf
# is -1 in Python's floor division, 1.0 // inf is 0, so a subnormal made 1.0 was named the
# trigger of a floor division's sign bug. Negative values are shifted up to PLAIN_VALUE.
PLAIN_VALUES = (1.0, 0.5, 0.75, 0.625, 0.875)
PLAIN_VALUE = PLAIN_VALUES[0]


def value_ablations(case: Case):
    """(value class, [cases without it]) for each of NaN, Inf, subnormal and negative values
    that a float input's view holds, then 'negative' again for negative integer attributes (a
    shift, a dim counted from the end) made non-negative (_without_negative_attrs). Negative
    values are taken away two ways (_without): a failure that needs their sign vanishes in
    both, one that needs their order or their magnitude only in one."""
    for k, spec in enumerate(case.inputs):
        if not spec["dtype"].startswith(("float", "bfloat")) or layout.is_overlapping(spec["shape"], spec["layout"]["strides"]):
            continue      # aliasing views share storage elements: their values are not per element
        view = _materialize(case, k)
        for value_class, where in _value_classes(view).items():
            variants = [_with_values(case, k, new) for new in _without(value_class, where, view)]
            variants = [c for c in variants if c is not None and _is_valid(c)]
            if variants:
                yield value_class, variants
    variants = [c for c in _without_negative_attrs(case) if _is_valid(c)]
    if variants:
        yield "negative", variants


def _without(value_class: str, where: torch.Tensor, view: torch.Tensor) -> list:
    """Views without the value class at `where`: special values made PLAIN_VALUE; negative
    values made their magnitude (magnitudes kept), and every finite value shifted up by the
    same amount (their order kept: what an argmax, a sort or a max reads)."""
    if value_class != "negative":
        return [torch.where(where, _signed(_plain_value(view, where), view), view)]
    finite = torch.isfinite(view)
    shift = PLAIN_VALUE - view[finite].double().min().item()
    return [torch.where(where, view.abs(), view), torch.where(finite, (view.double() + shift).to(view.dtype), view)]


def _signed(plain: float, values: torch.Tensor) -> torch.Tensor:
    """`plain` where `values` are not below 0, -plain where they are (a NaN counts as positive),
    in their dtype: an ordinary value in a special value's place, with its sign."""
    return torch.where(values < 0, -plain, plain).to(values.dtype)


def _plain_value(view: torch.Tensor, where: torch.Tensor) -> float:
    """The first of PLAIN_VALUES that no element of `view` outside `where` holds (the first
    when they all appear)."""
    return _plain_values(view, where)[0]


def _plain_values(view: torch.Tensor, where: torch.Tensor) -> list:
    """PLAIN_VALUES that no element of `view` outside `where` holds, in order, then the others."""
    others = view[~where]
    unused = [v for v in PLAIN_VALUES if not bool((others == v).any())]
    return unused + [v for v in PLAIN_VALUES if v not in unused]


def _value_classes(view: torch.Tensor) -> dict:
    """value class (signatures.VALUE_CLASSES) -> mask of the elements of `view` in it, for those present."""
    tiny = torch.finfo(view.dtype).tiny
    masks = {"nan": torch.isnan(view), "inf": torch.isinf(view),
             "subnormal": (view != 0) & (view.abs() < tiny), "negative": torch.isfinite(view) & (view < 0)}
    return {name: mask for name, mask in masks.items() if bool(mask.any())}


# -- the special elements a failure needs (part of its trigger) --------------------------------
# A minimal case may still hold special values that play no part: the ladder of
# _simplify_values tries 0, the sign and integers, and a subnormal dividend that only 0 was
# tried for stays. Each special element is made ordinary in groups, one class at a time, then
# halves, then alone (delta); those the failure needs stay. An element is idle when the
# failure survives it made ordinary either way: the first or the second of PLAIN_VALUES that the
# view's other elements do not hold (1.0, an integer, may pass where 0.5 fails: a floor
# division's remainder of 1.0 by -inf is exact).
SPECIAL_CLASSES = ("nan", "inf", "subnormal")
ORDINARY_CHOICES = 2


def special_elements(case: Case) -> list:
    """(input position, flat element index, value class) of each NaN, Inf and subnormal element
    of the float inputs' views (aliasing views are left out: their elements share storage)."""
    found = []
    for k, spec in enumerate(case.inputs):
        if not spec["dtype"].startswith(("float", "bfloat")) or layout.is_overlapping(spec["shape"], spec["layout"]["strides"]):
            continue
        classes = _value_classes(_materialize(case, k))
        for value_class in SPECIAL_CLASSES:
            if value_class in classes:
                found += [(k, int(e), value_class) for e in classes[value_class].reshape(-1).nonzero().reshape(-1)]
    return found


def without_elements(case: Case, elements: list, choice: int = 0) -> Case | None:
    """`case` with the special `elements` (special_elements' triples) made ordinary: each input's
    become the `choice`-th of PLAIN_VALUES that none of that view's ordinary elements holds."""
    current = case
    for k in sorted({k for k, _e, _c in elements}):
        view = _materialize(current, k)
        special = torch.zeros(view.numel(), dtype=torch.bool)
        for name, mask in _value_classes(view).items():
            if name in SPECIAL_CLASSES:
                special |= mask.reshape(-1)
        flat = view.reshape(-1).clone()
        chosen = [e for j, e, _c in elements if j == k]
        flat[chosen] = _signed(_plain_values(flat, special)[choice], flat[chosen])
        current = _with_values(current, k, flat.reshape(view.shape))
        if current is None:
            return None
    return current


def needed_specials(case: Case, still_fails) -> Case:
    """`case` with every special element the failure does not need made ordinary (the same
    case when it needs them all); still_fails(candidate) -> the failure survives in it."""
    from torchsim_diff.delta import needed_parts
    elements = special_elements(case)
    if not elements:
        return case
    last = [case]       # the candidate of the last removal kept: every idle element made ordinary

    def fails_without(dropped):
        for choice in range(ORDINARY_CHOICES):
            candidate = without_elements(case, dropped, choice)
            if candidate is not None and _is_valid(candidate) and still_fails(candidate):
                last[0] = candidate
                return True
        return False

    groups = [[e for e in elements if e[2] == value_class] for value_class in SPECIAL_CLASSES]
    needed_parts(elements, fails_without, groups)
    return last[0]


def ordinary_variants(case: Case) -> list:
    """`case` with every NaN, Inf, subnormal and zero element of its float inputs' views made
    ordinary, once per ORDINARY_CHOICES (the first, then the second of PLAIN_VALUES the view's
    other elements do not hold); [] when it holds none. A NaN or Inf mismatch that still fails
    in one as wrong values is that wrong value's bug: the reduction zeroed what a special value
    met (a matmul's dropped tail reads as a NaN lost once the other operand is 0)."""
    variants = []
    for choice in range(ORDINARY_CHOICES):
        current, changed = case, False
        for k, spec in enumerate(case.inputs):
            if not spec["dtype"].startswith(("float", "bfloat")) or layout.is_overlapping(spec["shape"], spec["layout"]["strides"]):
                continue
            flat = _materialize(current, k).reshape(-1).clone()
            odd = (flat == 0) | ~torch.isfinite(flat) | (flat.abs() < torch.finfo(flat.dtype).tiny)
            if not bool(odd.any()):
                continue
            flat[odd] = _signed(_plain_values(flat, odd)[choice], flat[odd])
            current = _with_values(current, k, flat.reshape(spec["shape"]))
            changed = True
            if current is None:
                break
        if changed and current is not None and _is_valid(current):
            variants.append(current)
    return variants


def _without_negative_attrs(case: Case) -> list:
    """`case` with every negative integer attribute (alone or in a list) made non-negative, two
    ways: its magnitude, and counted from the start of its node's first operand's dims (the
    same dim, when it names one: ablating a dim of -2 to 2 would reduce another dim, and
    make the sign look like the trigger). [] when it has none."""
    if not any(_negative_ints(value) for node in case.nodes for value in node["attrs"].values()):
        return []
    ranks = _first_operand_ranks(case)
    magnitudes, from_start = case.to_dict(), case.to_dict()
    for k, node in enumerate(case.nodes):
        rank = ranks.get(node["id"])
        for name, value in node["attrs"].items():
            magnitudes["nodes"][k]["attrs"][name] = _map_ints(value, abs)
            from_start["nodes"][k]["attrs"][name] = _map_ints(
                value, lambda v: v + rank if rank is not None and v + rank >= 0 else abs(v))
    variants = {c.case_id: c for c in map(_candidate, (magnitudes, from_start)) if c is not None}
    return list(variants.values())


def _negative_ints(value) -> bool:
    values = value if isinstance(value, list) else [value]
    return any(isinstance(v, int) and not isinstance(v, bool) and v < 0 for v in values)


def _map_ints(value, change):
    """`value` (an attribute) with `change` applied to its negative integers."""
    if isinstance(value, list):
        return [_map_ints(v, change) for v in value]
    return change(value) if _negative_ints(value) else value


def _first_operand_ranks(case: Case) -> dict:
    """node id -> the number of dims of its first operand, for nodes whose first operand is a tensor."""
    try:
        tensors = meta_results(case)
    except Exception:  # noqa: BLE001 - an invalid case has no ranks; its candidates are refused anyway
        return {}
    ranks = {}
    for node in case.nodes:
        first = node["args"][0] if node["args"] else None
        first = first[0] if isinstance(first, list) and first else first
        if isinstance(first, str) and first in tensors:
            ranks[node["id"]] = tensors[first].dim()
    return ranks


# -- is the first divergent op part of the cause? ------------------------------------------------
# Neutral ops that read their operands whole and compute nothing a compiler could get wrong
# on its own: a failure that survives one of them in the divergent op's place is the trigger's.
NEUTRAL_UNARY = ("neg", "contiguous")
NEUTRAL_BINARY = "add"
NEUTRAL_INPLACE = ("add_", "copy_")


def neutral_substitutes(case: Case, node: dict):
    """Valid cases with `node` replaced by a neutral op over its operands (the same id, so its
    uses stay); a non-mutating node becomes the only output."""
    seen = {case.case_id}
    for op, args, attrs in _neutral_nodes(node):
        data = case.to_dict()
        target = next(n for n in data["nodes"] if n["id"] == node["id"])
        target.update(op=op, args=args, attrs=attrs)
        if not get_op(op).mutates:
            data["outputs"] = [node["id"]]
        candidate = _candidate(data)
        candidate = _tidy(candidate) if candidate is not None else None
        if candidate is not None and candidate.case_id not in seen and _is_valid(candidate):
            seen.add(candidate.case_id)
            yield candidate


def _neutral_nodes(node: dict) -> list:
    """(op, args, attrs) of the neutral nodes that may stand in for `node` (not itself)."""
    args = list(dict.fromkeys(node["args"]))
    if get_op(node["op"]).mutates:
        view = {"view": node["attrs"].get("view")}
        target = node["args"][0]
        found = [(op, [target, source], view) for op in NEUTRAL_INPLACE for source in node["args"][1:]]
        found.append((NEUTRAL_INPLACE[0], [target, target], view))     # x.add_(x): no other operand needed
    else:
        found = [(op, [a], {}) for a in args for op in NEUTRAL_UNARY[:1]]
        found += [(NEUTRAL_BINARY, [args[0], args[min(1, len(args) - 1)]], {})] if args else []
        found += [(op, [a], {}) for a in args for op in NEUTRAL_UNARY[1:]]
    return [(op, a, k) for op, a, k in found if (op, a) != (node["op"], node["args"])]


def _input_ablations(spec: dict) -> list:
    """(feature, geometry without it): broadcast dims made real, strides made contiguous,
    the storage offset removed."""
    shape, lay = spec["shape"], spec["layout"]
    strides, offset = lay["strides"], lay["offset"]
    found = []
    if any(st == 0 and n > 1 for n, st in zip(shape, strides)):
        found.append(("broadcast", _dense_geometry(shape, strides, offset)))
    elif strides != layout.contiguous_strides(shape) and any(n > 1 for n in shape):
        dense = layout.contiguous_strides(shape)
        if [st for n, st in zip(shape, strides) if n > 1] != [st for n, st in zip(shape, dense) if n > 1]:
            found.append(("strided", {"strides": dense, "offset": offset,
                                      "storage_size": max(offset + layout.span(shape, dense), 1)}))
    if offset > 0:
        found.append(("offset", {"strides": strides, "offset": 0,
                                 "storage_size": max(layout.span(shape, strides), 1)}))
    return found


def _dense_geometry(shape, strides, offset: int) -> dict:
    """Strides with every dimension real, in the order of the old strides (stride-0 dims innermost)."""
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    dense, step = [0] * len(shape), 1
    for d in reversed(order):
        dense[d] = step
        step *= max(shape[d], 1)
    return {"strides": dense, "offset": offset, "storage_size": max(offset + layout.span(shape, dense), 1)}
