"""Reduce a failing case to a small one that still fails in the same bucket on a route.

    >>> result = reduce_case(case, "inductor", out_dir="reports/reduce")
    >>> print(result.summary())
    >>> print(result.reduced.program_source())

Greedy reduction over passes, each proposing smaller variants of the current case in
order: drop outputs and nodes, bypass a node by one of its operands, cut a subgraph by
making a node's result a new input, shrink dimensions, simplify layouts towards
contiguous, simplify values (seed 0, then explicit small values) and, last, raise a
float16/bfloat16 case to float32. Every candidate is made readable (dead nodes and unused
inputs dropped, names renumbered) and must be valid before a route sees it: its program
runs on meta tensors and in eager. Valid candidates are checked in parallel, one Checker
(one warm worker per route) per job; the earliest candidate in pass order that keeps the
bucket is accepted, so the result does not depend on timing.
"""
from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import os
import queue
import time

import torch

from torchsim_diff import layout, values
from torchsim_diff.check import Checker
from torchsim_diff.graph import Case, CaseError
from torchsim_diff.ops import get_op

# Value domain an operand position needs (op name -> {position: domain}); others take "real".
OPERAND_DOMAINS = {
    "log": {0: "positive"}, "sqrt": {0: "positive"}, "rsqrt": {0: "positive"},
    "reciprocal": {0: "nonzero"}, "div": {1: "nonzero"}, "fmod": {1: "nonzero"},
    "pow": {0: "positive", 1: "small"},
}
# Stricter domains first: a domain on the left satisfies every requirement to its right.
DOMAIN_ORDER = ("positive", "nonzero", "small", "real")
SATISFIES = {"positive": {"positive", "nonzero", "real"}, "nonzero": {"nonzero", "real"},
             "small": {"small", "real"}, "real": {"real"}}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class ReduceError(ValueError):
    """The case cannot be reduced on that route (it does not fail there, or is invalid)."""


@dataclasses.dataclass
class ReduceResult:
    original: Case
    reduced: Case
    bucket: str
    route: str
    runs: int
    seconds: float

    @property
    def size_before(self) -> tuple:
        return self.original.size()

    @property
    def size_after(self) -> tuple:
        return self.reduced.size()

    def summary(self) -> str:
        (n0, i0, e0), (n1, i1, e1) = self.size_before, self.size_after
        return (f"Reduced the case failing on {self.route} in bucket {self.bucket} from {n0} nodes, "
                f"{i0} inputs and {e0} input elements to {n1} nodes, {i1} inputs and {e1} input "
                f"elements in {self.runs} route runs and {self.seconds:.1f} s.")


def reduce_case(case: Case, route: str, *, out_dir: str, jobs: int | None = None, timeout_s: float = 120,
                max_runs: int = 2000, progress=None) -> ReduceResult:
    """Shrink `case` while it keeps failing on `route` in its original bucket.

    jobs: parallel Checkers (default: the number of cores). max_runs: route runs allowed
    before stopping with the smallest case so far. progress: called with one line per
    accepted step.
    """
    jobs = _check_options(jobs, max_runs)
    started = time.perf_counter()
    with _Evaluator(route, out_dir=out_dir, jobs=jobs, timeout_s=timeout_s, max_runs=max_runs) as evaluator:
        bucket = evaluator.bucket_of_original(case)
        reducer = _Reducer(evaluator, bucket, progress or (lambda line: None))
        reduced = reducer.run(case)
        runs = evaluator.runs
    return ReduceResult(case, reduced, bucket, route, runs, time.perf_counter() - started)


def _check_options(jobs, max_runs) -> int:
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be a positive integer (or None for one per core)")
    if not isinstance(max_runs, int) or max_runs < 1:
        raise ValueError(f"max_runs={max_runs!r} must be a positive integer")
    return jobs


# -- checking candidates on the route ------------------------------------------------------
class _Evaluator:
    """Buckets of cases on one route, with one Checker per parallel job and a cache."""

    def __init__(self, route: str, *, out_dir: str, jobs: int, timeout_s: float, max_runs: int):
        self.route, self.jobs, self.max_runs = route, jobs, max_runs
        self.runs = 0
        self.cache: dict = {}
        self.checkers: queue.Queue = queue.Queue()
        for job in range(jobs):
            self.checkers.put(Checker(out_dir=os.path.join(out_dir, f"job{job}"), timeout_s=timeout_s,
                                      tag=f"reduce{job}"))
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.pool.shutdown(wait=True)
        while not self.checkers.empty():
            self.checkers.get().close()

    @property
    def exhausted(self) -> bool:
        return self.runs >= self.max_runs

    def bucket_of_original(self, case: Case) -> str:
        self.runs += 1
        verdict = self._check(case)
        if not verdict.failed:
            raise ReduceError(f"the case does not fail on route {self.route!r} (status {verdict.status.value}); "
                              "only failing cases can be reduced")
        return verdict.bucket

    def first_keeping(self, candidates: list, bucket: str):
        """The earliest candidate whose bucket is `bucket`, or None."""
        todo = [c for c in candidates if c.case_id not in self.cache][: self.max_runs - self.runs]
        self.runs += len(todo)
        for case, verdict in zip(todo, self.pool.map(self._check, todo)):
            self.cache[case.case_id] = verdict.bucket
        for case in candidates:
            if self.cache.get(case.case_id) == bucket:
                return case
        return None

    def _check(self, case: Case):
        checker = self.checkers.get()
        try:
            return checker.check(case, self.route)
        finally:
            self.checkers.put(checker)


class _Reducer:
    def __init__(self, evaluator: _Evaluator, bucket: str, progress):
        self.evaluator, self.bucket, self.progress = evaluator, bucket, progress

    def run(self, case: Case) -> Case:
        current = case
        passes = [_drop_outputs, _drop_nodes, _bypass_nodes, _cut_nodes, _shrink_dims,
                  _simplify_layouts, _simplify_values]
        changed = True
        while changed and not self.evaluator.exhausted:
            changed = False
            for make in passes:
                current, accepted = self._run_pass(make, current)
                changed |= accepted
        current, _ = self._run_pass(_raise_precision, current)
        return current

    def _run_pass(self, make, current: Case):
        """Apply one pass until none of its candidates keeps the bucket."""
        accepted = False
        while not self.evaluator.exhausted:
            found = self._first_keeping(_valid_candidates(make(current), current))
            if found is None:
                break
            current, accepted = self._accept(make, current, found), True
        return current, accepted

    def _first_keeping(self, candidates):
        """The earliest candidate that keeps the bucket, checked `jobs` at a time."""
        batch = []
        for candidate in candidates:
            batch.append(candidate)
            if len(batch) == self.evaluator.jobs:
                found = self.evaluator.first_keeping(batch, self.bucket)
                if found is not None or self.evaluator.exhausted:
                    return found
                batch = []
        return self.evaluator.first_keeping(batch, self.bucket) if batch else None

    def _accept(self, make, old: Case, new: Case) -> Case:
        self.progress(f"{make.__name__.strip('_').replace('_', ' ')}: {old.size()} -> {new.size()} "
                      f"after {self.evaluator.runs} runs")
        return new


def _valid_candidates(raw, current: Case):
    seen = {current.case_id}
    for candidate in raw:
        candidate = _tidy(candidate) if candidate is not None else None
        if candidate is None or candidate.case_id in seen or not _is_valid(candidate):
            continue
        seen.add(candidate.case_id)
        yield candidate


# -- validity --------------------------------------------------------------------------------
def meta_results(case: Case) -> dict:
    """Meta tensors of every input and node of `case` (raises when the program is invalid)."""
    env = {}
    for spec in case.inputs:
        lay = spec["layout"]
        storage = torch.empty(lay["storage_size"], dtype=layout.dtype_of(spec["dtype"]), device="meta")
        env[spec["name"]] = storage.as_strided(spec["shape"], lay["strides"], lay["offset"])
    for node in case.nodes:
        expr = get_op(node["op"]).emit(list(node["args"]), node.get("attrs", {}))
        env[node["id"]] = eval(expr, {"torch": torch, **env})  # noqa: S307 - our own emitted code
    return env


def _is_valid(case: Case) -> bool:
    """The case passes schema checks, runs on meta tensors and runs in eager."""
    try:
        Case.from_dict(case.to_dict())
        meta_results(case)
        namespace: dict = {}
        exec(compile(case.program_source(), "<reduce candidate>", "exec"), namespace)  # noqa: S102
        namespace["program"](*layout.materialize_all(case.to_dict()))
    except Exception:  # noqa: BLE001 - any rejection by torch makes the candidate invalid
        return False
    return True


# -- readability: drop what is dead, renumber the rest -------------------------------------
def _tidy(case: Case) -> Case | None:
    """`case` without dead nodes and unused inputs, renumbered x0.., v0.. (None if invalid)."""
    data = case.to_dict()
    live = _live_refs(data)
    data["nodes"] = [n for n in data["nodes"] if n["id"] in live]
    data["inputs"] = [i for i in data["inputs"] if i["name"] in live]
    renames = {spec["name"]: f"x{k}" for k, spec in enumerate(data["inputs"])}
    renames.update({node["id"]: f"v{k}" for k, node in enumerate(data["nodes"])})
    for spec in data["inputs"]:
        spec["name"] = renames[spec["name"]]
    for node in data["nodes"]:
        node["id"] = renames[node["id"]]
        node["args"] = [renames[a] for a in node["args"]]
    data["outputs"] = [renames[o] for o in data["outputs"]]
    return _candidate(data)


def _live_refs(data: dict) -> set:
    """Names an output or an in-place node (an effect) depends on."""
    live = set(data["outputs"])
    for node in reversed(data["nodes"]):
        if node["id"] in live or get_op(node["op"]).mutates:
            live.add(node["id"])
            live.update(node["args"])
    return live


def _replace_uses(data: dict, old: str, new: str) -> None:
    for node in data["nodes"]:
        node["args"] = [new if a == old else a for a in node["args"]]
    data["outputs"] = [new if o == old else o for o in data["outputs"]]


def _uses(data: dict, ref: str) -> list:
    """(node, argument position) pairs that read `ref`."""
    return [(n, k) for n in data["nodes"] for k, a in enumerate(n["args"]) if a == ref]


# -- passes: each yields candidate cases (or None), best first --------------------------------
def _candidate(data: dict):
    """The candidate case, or None when the edit broke the schema (a mutated input overlapping...)."""
    try:
        return Case.from_dict(data)
    except CaseError:
        return None


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
    for position, node in enumerate(case.nodes):
        if get_op(node["op"]).mutates or (not node["args"]):
            continue
        result = metas[node["id"]]
        domain = _domain_for(case, node["id"], result.dtype)
        if domain is None:
            continue
        data = case.to_dict()
        name = f"cut{position}"
        shape = list(result.shape)
        data["inputs"].append(_contiguous_input(name, shape, layout.dtype_name(result.dtype), domain))
        data["nodes"] = [n for n in data["nodes"] if n["id"] != node["id"]]
        _replace_uses(data, node["id"], name)
        yield _candidate(data)


def _domain_for(case: Case, ref: str, dtype: torch.dtype):
    """A value domain for a new input replacing `ref` that keeps every consumer valid."""
    if dtype == torch.bool:
        return {"kind": "bool"}
    if not dtype.is_floating_point and case.dtype in FLOAT_DTYPES:
        return None   # an index result: its range depends on the tensor it indexes
    needed = {OPERAND_DOMAINS.get(n["op"], {}).get(k, "real") for n, k in _uses(case.to_dict(), ref)}
    for domain in DOMAIN_ORDER:
        if needed <= SATISFIES[domain]:
            return {"kind": domain}
    return None


def _contiguous_input(name: str, shape, dtype: str, domain: dict, mutated: bool = False) -> dict:
    geometry = _contiguous_geometry(shape)
    classes = layout.layout_classes(shape, geometry["strides"], 0, geometry["storage_size"], mutated)
    return {"name": name, "shape": list(shape), "dtype": dtype, "domain": domain,
            "layout": {"classes": classes, **geometry}, "mutated": mutated}


def _contiguous_geometry(shape) -> dict:
    strides = layout.contiguous_strides(shape)
    return {"strides": strides, "offset": 0, "storage_size": max(layout.span(shape, strides), 1)}


def _shrink_dims(case: Case):
    """Smaller sizes: everywhere a size occurs first, then one input dimension at a time."""
    sizes = sorted({s for spec in case.inputs for s in spec["shape"] if s > 1}, reverse=True)
    for size in sizes:
        for smaller in _smaller_sizes(size):
            yield _substitute_size(case, size, smaller)
    for k, spec in enumerate(case.inputs):
        for dim, size in enumerate(spec["shape"]):
            if size == 1:
                yield _without_unit_dim(case, k, dim)
            for smaller in _smaller_sizes(size):
                data = case.to_dict()
                shape = list(spec["shape"])
                shape[dim] = smaller
                data["inputs"][k] = _reshaped(data["inputs"][k], shape)
                yield _candidate(data)


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


def _substitute_size(case: Case, size: int, smaller: int) -> Case:
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
    return _candidate(data)


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
        old_view = _materialize(case, k)
        storage = torch.full((geometry["storage_size"],), layout.guard_value(old_view.dtype), dtype=old_view.dtype)
        storage.as_strided(shape, geometry["strides"], geometry["offset"]).copy_(old_view)
        spec["data"] = values.encode(storage)
    spec["layout"] = {"classes": layout.layout_classes(shape, geometry["strides"], geometry["offset"],
                                                       geometry["storage_size"], bool(spec.get("mutated"))),
                      **geometry}
    return spec


def _materialize(case: Case, k: int) -> torch.Tensor:
    vals = case.values
    return layout.materialize(case.inputs[k], int(vals.get("seed", 0)), k, bool(vals.get("special", False)))


def _simplify_values(case: Case):
    """Seed 0 and no special values, then explicit small values per float input."""
    if case.values.get("seed", 0) != 0 or case.values.get("special"):
        data = case.to_dict()
        data["values"] = {"seed": 0, "special": False}
        yield _candidate(data)
    for k, spec in enumerate(case.inputs):
        kind = spec.get("domain", {}).get("kind", "real")
        if not spec["dtype"].startswith(("float", "bfloat")) or kind not in SATISFIES:
            continue
        if layout.is_overlapping(spec["shape"], spec["layout"]["strides"]):
            continue      # aliasing views share storage elements: their values are not per element
        view = _materialize(case, k)
        for simple in _simple_values(view, kind):
            if "data" in spec and torch.equal(simple, view):
                continue
            yield _with_values(case, k, simple)


def _simple_values(view: torch.Tensor, kind: str) -> list:
    """Constant, then rounded values, both inside the input's domain."""
    constant = torch.full_like(view, 0.0 if kind in ("real", "small") else 1.0)
    rounded = torch.round(view.double() * 2) / 2
    if kind == "positive":
        rounded = rounded.clamp(min=0.5)
    elif kind == "nonzero":
        half = torch.where(view < 0, -0.5, 0.5).double()
        rounded = torch.where(rounded.abs() < 0.5, half, rounded)
    elif kind == "small":
        rounded = rounded.clamp(-1.0, 1.0)
    return [constant, rounded.to(view.dtype)]


def _with_values(case: Case, k: int, view: torch.Tensor) -> Case:
    data = case.to_dict()
    spec = data["inputs"][k]
    lay = spec["layout"]
    storage = torch.full((lay["storage_size"],), layout.guard_value(view.dtype), dtype=view.dtype)
    storage.as_strided(spec["shape"], lay["strides"], lay["offset"]).copy_(view)
    spec["data"] = values.encode(storage)
    return _candidate(data)


def _raise_precision(case: Case):
    """A float16/bfloat16 case as float32 (kept only when the bucket stays the same)."""
    if case.dtype not in ("float16", "bfloat16"):
        return
    data = case.to_dict()
    data["dtype"] = "float32"
    for k, spec in enumerate(data["inputs"]):
        if spec["dtype"] != case.dtype:
            continue
        spec["dtype"] = "float32"
        if "data" in spec:
            lay = spec["layout"]
            storage = layout.storage_of(_materialize(case, k))[: lay["storage_size"]]
            spec["data"] = values.encode(storage.to(torch.float32))
    yield _candidate(data)
