"""The reducer's passes over a case's graph and inputs' shapes, each a generator of candidate
cases (or None), best first: drop outputs, keep a window of the graph, drop and bypass nodes, cut
a subgraph by making a node's result an input, simpler ops, smaller dimensions, layouts towards
contiguous. The order they run in is triage.reduce's (PASSES, HANG_PASSES)."""
from __future__ import annotations

import copy

import torch

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case
from torchsim_diff.case.program_check import load_program
from torchsim_diff.ops import get_op
from torchsim_diff.triage.case_edits import (DOMAIN_ORDER, FLOAT_DTYPES, OPERAND_DOMAINS, SATISFIES, _candidate,
                                             _materialize, _replace_uses, _storage_and_cover, _uses, meta_results)
from torchsim_diff.triage.value_passes import SIZE_FREE_KINDS, _Domain


def _drop_outputs(case: Case):
    for k in reversed(range(len(case.outputs))):
        data = case.to_dict()
        del data["outputs"][k]
        yield _candidate(data)


def _drop_nodes(case: Case):
    """Remove in-place nodes (their write goes away too). Readers of a whole-input write's
    result read the input instead; a write through a view must have no readers."""
    for node in reversed(case.nodes):
        data = case.to_dict()
        readers = _uses(data, node["id"])
        if not get_op(node["op"]).mutates or (readers and node.get("attrs", {}).get("view")):
            continue
        data["nodes"] = [n for n in data["nodes"] if n["id"] != node["id"]]
        data["outputs"] = [o for o in data["outputs"] if o != node["id"]]
        _replace_uses(data, node["id"], node["args"][0])
        yield _candidate(data)


def _bypass_nodes(case: Case):
    """Replace a node by one of its operands (relu(x) -> x)."""
    for node in reversed(case.nodes):
        if get_op(node["op"]).mutates:
            continue
        for arg in dict.fromkeys(node["args"]):
            data = case.to_dict()
            data["nodes"] = [n for n in data["nodes"] if n["id"] != node["id"]]
            _replace_uses(data, node["id"], arg)
            yield _candidate(data)


def _cut_nodes(case: Case):
    """Make a node's result a new input of the same shape and dtype (drops its subgraph)."""
    try:
        metas = meta_results(case)
    except Exception:  # noqa: BLE001 - an invalid current case has nothing to cut
        return
    computed = _eager_results(case)
    for position, node in enumerate(case.nodes):
        if get_op(node["op"]).mutates or (not node["args"]):
            continue
        spec = _cut_input(case, node["id"], f"cut{position}", metas, computed)
        if spec is None:
            continue
        data = case.to_dict()
        data["inputs"].append(spec)
        data["nodes"] = [n for n in data["nodes"] if n["id"] != node["id"]]
        _replace_uses(data, node["id"], spec["name"])
        yield _candidate(data)


def _cut_input(case: Case, ref: str, name: str, metas: dict, computed: dict) -> dict | None:
    """A contiguous input standing for `ref`, holding the values eager computed for `ref`, in the
    narrowest domain every reader of `ref` accepts that holds them; where none holds them, in the
    narrowest one, with drawn values. None when no domain fits (an index computed from floats).
    (The narrowest alone cut log(x) out of max(log(x)) as positive values drawn afresh: the zeros
    and the NaN log made were lost, and with them the failure.)"""
    result = metas[ref]
    domains = _domains_for(case, ref, result.dtype)
    if not domains:
        return None
    value = computed.get(ref)
    usable = (value is not None and value.shape == result.shape and value.dtype == result.dtype
              and value.numel() > 0)
    holding = [d for d in domains if usable and (value.dtype == torch.bool or _Domain({d}).holds(value))]
    domain = {"kind": (holding or domains)[0]}
    spec = _contiguous_input(name, list(result.shape), layout.dtype_name(result.dtype), domain)
    if holding:
        spec["data"] = values.encode(value)
    return spec


def _eager_results(case: Case) -> dict:
    """Eager's value of each non-mutating node's result, by id ({} when eager cannot run it)."""
    refs = [n["id"] for n in case.nodes if not get_op(n["op"]).mutates]
    data = case.to_dict()
    data["outputs"] = refs
    try:
        wide = Case.from_dict(data)
        results = load_program(wide.program_source())(*layout.materialize_all(wide.to_dict()))
    except Exception:  # noqa: BLE001 - no values to offer: cut inputs get drawn ones
        return {}
    return {ref: r.detach().clone() for ref, r in zip(refs, results) if isinstance(r, torch.Tensor)}


WINDOW_DEPTHS = (0, 1, 2)


def _keep_windows(case: Case):
    """The case cut down to one node and its producers up to WINDOW_DEPTHS deep, smallest
    windows first (the later node first among equals); operands from outside the window
    become inputs (_cut_input), the case's inputs stay as they are."""
    if len(case.nodes) < 2:
        return
    try:
        metas = meta_results(case)
    except Exception:  # noqa: BLE001 - an invalid current case has no windows
        return
    computed = _eager_results(case)
    windows = {}
    for node in reversed(case.nodes):
        for depth in WINDOW_DEPTHS:
            kept = _window(case, node["id"], depth)
            if kept and len(kept) < len(case.nodes):
                windows.setdefault(tuple(kept), node["id"])
    for kept, last in sorted(windows.items(), key=lambda item: len(item[0])):
        yield _windowed(case, kept, last, metas, computed)


def _window(case: Case, last: str, depth: int) -> list | None:
    """Positions of node `last` and its producers up to `depth` deep (None: it reaches an in-place node)."""
    position = {n["id"]: k for k, n in enumerate(case.nodes)}
    kept, frontier = set(), [last]
    for _ in range(depth + 1):
        above = []
        for ref in frontier:
            node = case.nodes[position[ref]]
            if get_op(node["op"]).mutates:
                return None
            kept.add(position[ref])
            above += [a for a in node["args"] if a in position and position[a] not in kept]
        frontier = above
    return sorted(kept)


def _windowed(case: Case, kept, last: str, metas: dict, computed: dict) -> Case | None:
    data = case.to_dict()
    nodes = [data["nodes"][k] for k in kept]
    inside = {n["id"] for n in nodes} | {spec["name"] for spec in data["inputs"]}
    cuts = {}
    for node in nodes:
        for arg in node["args"]:
            if arg not in inside and arg not in cuts:
                spec = _cut_input(case, arg, f"cut_{arg}", metas, computed)
                if spec is None:
                    return None
                data["inputs"].append(spec)
                cuts[arg] = spec["name"]
        node["args"] = [cuts.get(a, a) for a in node["args"]]
    data["nodes"], data["outputs"] = nodes, [last]
    return _candidate(data)


def _domains_for(case: Case, ref: str, dtype: torch.dtype) -> list:
    """The value domains (their kinds) for a new input replacing `ref` that keep every consumer
    valid, narrowest first."""
    if dtype == torch.bool:
        return ["bool"]
    if not dtype.is_floating_point and case.dtype in FLOAT_DTYPES:
        return []     # an index result: its range depends on the tensor it indexes
    needed = {OPERAND_DOMAINS.get(n["op"], {}).get(k, "real") for n, k in _uses(case.to_dict(), ref)}
    return [domain for domain in DOMAIN_ORDER if needed <= SATISFIES[domain]]


def _contiguous_input(name: str, shape, dtype: str, domain: dict, mutated: bool = False) -> dict:
    geometry = _contiguous_geometry(shape)
    classes = layout.layout_classes(shape, geometry["strides"], 0, geometry["storage_size"], mutated)
    return {"name": name, "shape": list(shape), "dtype": dtype, "domain": domain,
            "layout": {"classes": classes, **geometry}, "mutated": mutated}


def _contiguous_geometry(shape) -> dict:
    strides = layout.contiguous_strides(shape)
    return {"strides": strides, "offset": 0, "storage_size": max(layout.span(shape, strides), 1)}


# Simplest op first per arity: a failure that survives swapping its op for one of these does
# not depend on that op, so one bug met through many ops reduces to one case (one bucket).
CANONICAL_OPS = {1: ("neg", "abs", "relu"), 2: ("add", "mul"), 3: ("where",)}
MATMUL_OPS = ("mm", "bmm", "matmul")
INPLACE_OPS = ("add_", "mul_")     # pointwise writes of one operand (attributes: the written view)


def _canonical_ops(case: Case):
    """Each node with its op replaced by a simpler one of the same arity (attributes the
    simpler op declares kept within the matmul and reduction families, dropped for pointwise ops)."""
    for position, node in enumerate(case.nodes):
        spec = get_op(node["op"])
        simpler = list(CANONICAL_OPS.get(len(node["args"]), ()))
        if spec.mutates:
            simpler = list(INPLACE_OPS) if len(node["args"]) == 2 else []
        elif spec.family == "matmul":
            simpler = list(MATMUL_OPS) + simpler
        elif spec.family == "reduction":
            simpler = ["sum"] + simpler
        for name in simpler[: simpler.index(node["op"]) if node["op"] in simpler else None]:
            data = case.to_dict()
            keep = get_op(name).family == spec.family and spec.family != "pointwise"
            declared = get_op(name).signature
            attrs = {k: v for k, v in node.get("attrs", {}).items() if keep and k in declared}
            if spec.mutates:
                attrs = {"view": node.get("attrs", {}).get("view")}
            data["nodes"][position] = {**node, "op": name, "attrs": attrs}
            yield _candidate(data)


def _shrink_dims(case: Case):
    """Smaller sizes: everywhere a size occurs first (keeping the leading values, then the
    trailing ones), then one input dimension at a time."""
    sizes = sorted({s for spec in case.inputs for s in spec["shape"] if s > 1}, reverse=True)
    for size in sizes:
        for smaller in _smaller_sizes(size):
            yield _substitute_size(case, size, smaller)
            yield _substitute_size(case, size, smaller, trailing=True)
    for k, spec in enumerate(case.inputs):
        for dim, size in enumerate(spec["shape"]):
            if size == 1:
                yield _without_unit_dim(case, k, dim)
            for smaller in _smaller_sizes(size):
                data = case.to_dict()
                shape = list(spec["shape"])
                shape[dim] = smaller
                data["inputs"][k] = _reshaped(data["inputs"][k], shape)
                yield _candidate(_narrowed_values(case, data))


def _without_unit_dim(case: Case, k: int, dim: int) -> Case:
    data = case.to_dict()
    spec = data["inputs"][k]
    lay = spec["layout"]
    shape = spec["shape"][:dim] + spec["shape"][dim + 1:]
    strides = lay["strides"][:dim] + lay["strides"][dim + 1:]
    spec["shape"], lay["strides"] = shape, strides
    lay["classes"] = layout.layout_classes(shape, strides, lay["offset"], lay["storage_size"],
                                           bool(spec.get("mutated")))
    return _candidate(data)


def _smaller_sizes(size: int) -> list:
    return [s for s in dict.fromkeys([1, 2, size // 2, size - 1]) if 0 < s < size]


def _substitute_size(case: Case, size: int, smaller: int, trailing: bool = False) -> Case:
    """Replace `size` by `smaller` in every input shape, index range and size-like attribute."""
    data = case.to_dict()
    for k, spec in enumerate(data["inputs"]):
        shape = [smaller if s == size else s for s in spec["shape"]]
        data["inputs"][k] = _reshaped(spec, shape)
        domain = data["inputs"][k].get("domain", {})
        if domain.get("high") == size:
            domain["high"] = smaller
    for node in data["nodes"]:
        attrs = node.get("attrs", {})
        for key in ("shape", "size", "normalized_shape", "repeats"):
            if isinstance(attrs.get(key), list):
                attrs[key] = [smaller if s == size else s for s in attrs[key]]
        for key in ("length", "stop"):
            if attrs.get(key) == size:
                attrs[key] = smaller
    return _candidate(_narrowed_values(case, data, trailing))


def _narrowed_values(case: Case, data: dict, trailing: bool = False) -> dict:
    """`data` (`case` with smaller input shapes) with each shrunk input holding the leading
    (or trailing) values of its old view; index inputs (their bound may have shrunk too) and
    aliasing views are drawn afresh."""
    for k, (old, new) in enumerate(zip(case.inputs, data["inputs"])):
        shape, lay = new["shape"], new["layout"]
        if "data" in new or shape == old["shape"] or len(shape) != len(old["shape"]):
            continue
        if old.get("domain", {}).get("kind", "real") not in SIZE_FREE_KINDS:
            continue
        if layout.is_overlapping(shape, lay["strides"]) or any(n > m for n, m in zip(shape, old["shape"])):
            continue
        view = _materialize(case, k)[tuple(slice(m - n if trailing else 0, m if trailing else n)
                                           for n, m in zip(shape, old["shape"]))]
        storage = torch.full((lay["storage_size"],), layout.guard_value(view.dtype), dtype=view.dtype)
        storage.as_strided(shape, lay["strides"], lay["offset"]).copy_(view)
        new["data"] = values.encode(storage)
    return data


def _reshaped(spec: dict, shape) -> dict:
    """`spec` with a new shape, keeping its dimension order, broadcast dims and offset."""
    spec = copy.deepcopy(spec)
    old = spec["layout"]
    order = sorted(range(len(shape)), key=lambda d: -old["strides"][d])
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        if old["strides"][d] != 0:
            strides[d] = step
            step *= max(shape[d], 1)
    offset = old["offset"]
    size = max(offset + layout.span(shape, strides), 1)
    spec["shape"] = list(shape)
    spec["layout"] = {"classes": layout.layout_classes(shape, strides, offset, size, bool(spec.get("mutated"))),
                      "strides": strides, "offset": offset, "storage_size": size}
    spec.pop("data", None)
    return spec


def _simplify_layouts(case: Case):
    """Contiguous first, then no offset, then no slack after the view."""
    for k, spec in enumerate(case.inputs):
        lay, shape = spec["layout"], spec["shape"]
        contiguous = _contiguous_geometry(shape)
        no_offset = {"strides": lay["strides"], "offset": 0,
                     "storage_size": max(layout.span(shape, lay["strides"]), 1)}
        trimmed = {"strides": lay["strides"], "offset": lay["offset"],
                   "storage_size": max(lay["offset"] + layout.span(shape, lay["strides"]), 1)}
        for geometry in (contiguous, no_offset, trimmed):
            if all(lay[key] == geometry[key] for key in geometry):
                continue
            data = case.to_dict()
            data["inputs"][k] = _with_geometry(case, k, geometry)
            yield _candidate(data)
        if spec.get("mutated") and not _is_written(case, spec["name"]):
            data = case.to_dict()
            data["inputs"][k]["mutated"] = False
            data["inputs"][k]["layout"]["classes"] = layout.layout_classes(
                shape, lay["strides"], lay["offset"], lay["storage_size"], False)
            yield _candidate(data)


def _is_written(case: Case, name: str) -> bool:
    return any(get_op(n["op"]).mutates and n["args"][0] == name for n in case.nodes)


def _with_geometry(case: Case, k: int, geometry: dict) -> dict:
    """Input `k` with new strides/offset/storage; explicit values follow the view."""
    spec = copy.deepcopy(case.inputs[k])
    shape = spec["shape"]
    if "data" in spec:
        storage = _storage_for_geometry(case, k, geometry)
        if storage is None:
            del spec["data"]
        else:
            spec["data"] = values.encode(storage)
    spec["layout"] = {"classes": layout.layout_classes(shape, geometry["strides"], geometry["offset"],
                                                       geometry["storage_size"], bool(spec.get("mutated"))),
                      **geometry}
    return spec


def _storage_for_geometry(case: Case, k: int, geometry: dict) -> torch.Tensor | None:
    """Input `k`'s values in a storage of the new geometry; an aliasing view keeps its storage
    elements when its strides stay (None when they change: its values are drawn afresh)."""
    spec = case.inputs[k]
    old_view = _materialize(case, k)
    storage = torch.full((geometry["storage_size"],), layout.guard_value(old_view.dtype), dtype=old_view.dtype)
    if not layout.is_overlapping(spec["shape"], geometry["strides"]):
        storage.as_strided(spec["shape"], geometry["strides"], geometry["offset"]).copy_(old_view)
        return storage
    if geometry["strides"] != spec["layout"]["strides"]:
        return None
    old, covered = _storage_and_cover(case, k)
    storage[layout.covered_mask(spec["shape"], geometry["strides"], geometry["offset"], geometry["storage_size"])] = old[covered]
    return storage
