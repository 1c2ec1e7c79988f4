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

from torchsim_diff.triage import signatures
from torchsim_diff.case import layout, validate, values
from torchsim_diff.run.checker import Checker
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import record_key, reduction_entry, reduction_of, refinement_key, refinement_line
from torchsim_diff.ops import get_op
from torchsim_diff.case.program_check import load_program
from torchsim_diff.worker import DEFAULT_TIMEOUT_S

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


def reduce_case(case: Case, route: str, *, out_dir: str, jobs: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                max_runs: int = 2000, progress=None, checkers: list | None = None, key=None,
                budget_s: float | None = None) -> ReduceResult:
    """Shrink `case` while it keeps failing on `route` in its original bucket.

    jobs: parallel Checkers (default: the number of cores). max_runs: route runs allowed
    before stopping with the smallest case so far. progress: called with one line per
    accepted step. checkers, key, budget_s: see _Evaluator (reduce, then bucket passes
    the campaign's warm Checker, signatures.reduction_key and its time budget).
    """
    jobs = _check_options(jobs, max_runs)
    started = time.perf_counter()
    with _Evaluator(route, out_dir=out_dir, jobs=jobs, timeout_s=timeout_s, max_runs=max_runs,
                    checkers=checkers, key=key, budget_s=budget_s) as evaluator:
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

    def __init__(self, route: str, *, out_dir: str, jobs: int, timeout_s: float, max_runs: int,
                 checkers: list | None = None, key=None, budget_s: float | None = None):
        """checkers: warm Checkers to borrow (not closed here) instead of starting `jobs` new
        ones. key: verdict -> what must stay the same (default: its bucket). budget_s:
        seconds after which the search stops with the smallest case so far."""
        self.route, self.max_runs = route, max_runs
        self.key = key or (lambda verdict: verdict.bucket)
        self.deadline = time.perf_counter() + budget_s if budget_s else None
        self.runs = 0
        self.cache: dict = {}
        self.checkers: queue.Queue = queue.Queue()
        self.owned = not checkers
        for job, checker in enumerate(checkers or []):
            self.checkers.put(checker)
        for job in range(jobs if self.owned else 0):
            self.checkers.put(Checker(out_dir=os.path.join(out_dir, f"job{job}"), timeout_s=timeout_s,
                                      tag=f"reduce{job}"))
        self.jobs = self.checkers.qsize()
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.pool.shutdown(wait=True)
        while self.owned and not self.checkers.empty():
            self.checkers.get().close()

    @property
    def exhausted(self) -> bool:
        late = self.deadline is not None and time.perf_counter() > self.deadline
        return late or self.runs >= self.max_runs

    def bucket_of_original(self, case: Case) -> str:
        self.runs += 1
        verdict = self._check(case)
        if not verdict.failed:
            raise ReduceError(f"the case does not fail on route {self.route!r} (status {verdict.status.value}); "
                              "only failing cases can be reduced")
        return self.key(verdict)

    def first_keeping(self, candidates: list, bucket: str):
        """The earliest candidate whose bucket is `bucket`, or None."""
        todo = [c for c in candidates if c.case_id not in self.cache][: self.max_runs - self.runs]
        self.runs += len(todo)
        for case, verdict in zip(todo, self.pool.map(self._check, todo)):
            self.cache[case.case_id] = self.key(verdict)
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
        passes = [_drop_outputs, _drop_nodes, _bypass_nodes, _cut_nodes, _canonical_ops, _shrink_dims,
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
    return validate.meta_results(case.to_dict())


def _is_valid(case: Case) -> bool:
    """The case passes schema checks, runs on meta tensors and runs in eager."""
    try:
        Case.from_dict(case.to_dict())
        meta_results(case)
        load_program(case.program_source())(*layout.materialize_all(case.to_dict()))
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
    return [constant, _in_domain(torch.round(view.double()), view, kind),
            _in_domain(torch.round(view.double() * 2) / 2, view, kind)]


def _in_domain(rounded: torch.Tensor, view: torch.Tensor, kind: str) -> torch.Tensor:
    """Rounded values moved back into the input's value domain."""
    if kind == "positive":
        rounded = rounded.clamp(min=0.5)
    elif kind == "nonzero":
        half = torch.where(view < 0, -0.5, 0.5).double()
        rounded = torch.where(rounded.abs() < 0.5, half, rounded)
    elif kind == "small":
        rounded = rounded.clamp(-1.0, 1.0)
    return rounded.to(view.dtype)


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


# -- reduce, then bucket ---------------------------------------------------------------------
DEFAULT_BUDGET_S = 60.0


@dataclasses.dataclass
class Refinement:
    """A failure's minimal case and the signature read from it (reduce, then bucket)."""

    signature: str
    reduced: dict                 # the minimal case (JSON dict)
    first_op: str | None
    trigger: list
    seconds: float
    runs: int
    reduced_artifacts: str | None = None
    minimal_bucket: str | None = None   # the minimal case's bucket as checked, before refinement

    def fields(self) -> dict:
        """Extra results.jsonl fields of a refined record (results.record.Record field -> value)."""
        return dict(signature=self.signature, reduced_case=self.reduced, first_op=self.first_op,
                    trigger=self.trigger, reduce_s=round(self.seconds, 3), reduce_runs=self.runs,
                    reduced_artifacts=self.reduced_artifacts, minimal_bucket=self.minimal_bucket)


class ReduceThenBucket:
    """Reduces each new failure, then buckets it from its minimal case.

        >>> refiner = ReduceThenBucket(checker, budget_s=60)
        >>> refiner.refine(verdict)      # sets verdict.refined; returns the record's extra fields
        >>> record.with_fields(**refiner.refine(verdict))

    The minimal case gives the first divergent op (every intermediate as an output, compared
    against float64) and the trigger (the layout and dtype features whose ablation makes the
    failure vanish). Results are cached by case hash and route, and by the failure's raw
    signature within a run: a failure already reduced costs nothing the second time.
    """

    def __init__(self, checker: Checker, *, budget_s: float = DEFAULT_BUDGET_S, cache_path: str | None = None):
        self.checker, self.budget_s, self.cache_path = checker, budget_s, cache_path
        self.by_case: dict = _load_cache(cache_path)
        self.by_raw: dict = {}

    def refine(self, verdict) -> dict:
        """The record fields (results.record.Record field -> value) of a new failure's reduction."""
        if not verdict.failed or not verdict.kind.reducible:
            return {}
        raw = verdict.signature
        key = f"{verdict.route}|{verdict.case.case_id}"
        found = self.by_case.get(key) or self.by_raw.get(raw)
        if found is None:
            try:
                found = self._reduce_and_classify(verdict)
            except ReduceError as exc:
                # Run again, the case no longer fails (a flaky failure, or one whose worker was
                # killed from outside): kept as found, in its raw bucket, and the run goes on.
                # Not cached: a later failure in the bucket may reproduce and be reduced.
                return dict(reduce_error=str(exc))
            self.by_case[key] = self.by_raw[raw] = found
            _save_cache(self.cache_path, self.by_case)
        verdict.refined, fields = reduction_of(found)
        return dict(fields, raw_bucket=classify_bucket(raw))

    def _reduce_and_classify(self, verdict) -> dict:
        started = time.perf_counter()
        result = reduce_case(verdict.case, verdict.route, out_dir=self.checker.out_dir, jobs=1,
                             checkers=[self.checker], key=signatures.reduction_key, budget_s=self.budget_s)
        minimal = self.checker.check(result.reduced, verdict.route)
        signature = minimal.signature
        first_op, trigger = None, []
        if minimal.failed and minimal.kind.value_failure:
            first_op = self._first_divergent_op(minimal)
            trigger = self._trigger(minimal)
            kind = minimal.kind
            if not minimal.case.nodes:   # no op left: a NaN is only what was read, like any wrong value
                kind = kind.reduces_as
            signature = signatures.refined_signature(verdict.route, kind, first_op, trigger)
        elif minimal.failed and minimal.kind != Kind.TIMEOUT:
            # An error that vanishes with a layout feature (an index read through the wrong
            # strides, say) is that layout's bug: the trigger keeps two such bugs apart even
            # where the error they end in reads the same. A hang is not ablated: each try
            # would cost a timeout.
            trigger = self._trigger(minimal)
            signature = signatures.with_trigger(minimal.signature, trigger)
        refinement = Refinement(signature or verdict.signature, result.reduced.to_dict(), first_op, trigger,
                                time.perf_counter() - started, result.runs + 1,
                                minimal.artifact_dir if minimal.artifacts else None,
                                minimal.bucket if minimal.failed else None)
        return reduction_entry(refinement.signature, refinement.fields())

    def _first_divergent_op(self, minimal) -> str | None:
        """The op whose value diverges first; the failing output's own op when the run with
        every intermediate as an output does not fail on an output."""
        try:
            wide, refs = signatures.intermediates_as_outputs(minimal.case)
        except CaseError:
            return minimal.op
        node = signatures.first_divergent_node(wide, self.checker.check(wide, minimal.route), refs)
        return node["op"] if node else minimal.op

    def _trigger(self, minimal) -> list:
        """Features of the minimal case without which the failure vanishes."""
        key = signatures.reduction_key(minimal)
        features = set()
        for feature, candidate in ablations(minimal.case):
            if feature not in features and signatures.reduction_key(self.checker.check(candidate, minimal.route)) != key:
                features.add(feature)
        features.update(symptoms(self.checker, minimal))
        return sorted(features)


def classify_bucket(signature: str | None) -> str | None:
    return signatures.bucket_of(signature) if signature else None


def ablations(case: Case):
    """(feature, case without it) for each layout or dtype feature of `case`'s inputs."""
    for k, spec in enumerate(case.inputs):
        for feature, geometry in _input_ablations(spec):
            data = case.to_dict()
            data["inputs"][k] = _with_geometry(case, k, geometry)
            candidate = _candidate(data)
            if candidate is not None and _is_valid(candidate):
                yield feature, candidate
    for candidate in _raise_precision(case):
        if candidate is not None and _is_valid(candidate):
            yield case.dtype, candidate


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


def symptoms(checker: Checker, verdict) -> set:
    """Features read from the failure itself: 'inout' when a mutated input's storage is
    wrong, 'unwritten' when the route left it as it was (a write lost, not a wrong value)."""
    where = verdict.where or ""
    name = where.split()[1] if where.startswith("input ") else None
    position = next((k for k, s in enumerate(verdict.case.inputs) if s["name"] == name), None)
    if position is None or not verdict.case.inputs[position].get("mutated"):
        return set()
    final = _route_storage(checker, verdict.case, verdict.route, position)
    ref = checker.reference(verdict.case, verdict.case.program_source())
    covered = ref.covered[position]
    initial, eager = ref.initial_storages[position], ref.storages[position]
    if final is None or final.shape != initial.shape:
        return {"inout"}
    unwritten = torch.equal(final[covered], initial[covered]) and not torch.equal(eager[covered], initial[covered])
    return {"inout", "unwritten"} if unwritten else {"inout"}


def _route_storage(checker: Checker, case: Case, route: str, position: int):
    """The route's final storage of input `position` (None when the run failed)."""
    from torchsim_diff.worker import protocol
    folder = os.path.join(checker.out_dir, "artifacts", route, case.case_id + "-storages")
    reply = checker.worker(route).run(case.to_dict(), case.program_source(), folder, 1)
    if not reply.ok:
        return None
    return protocol.payload_to_tensor(reply.storages[position])


def _load_cache(path: str | None) -> dict:
    import json
    if not path or not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle).get("reductions", {})
    except (OSError, ValueError, AttributeError):
        return {}                 # a damaged cache only costs the reductions, never the run


def _save_cache(path: str | None, entries: dict) -> None:
    if path:
        from torchsim_diff.triage.corpus import write_atomic
        write_atomic(path, {"schema": 1, "reductions": entries})


# -- reduce, then bucket at a pytest session's end -----------------------------------------------
REFINED_PREFIX = "refined-"


def refine_verdicts(checker: Checker, verdicts, out_path: str, *, budget_s: float = DEFAULT_BUDGET_S) -> int:
    """Reduce, then bucket, a pytest process's failing verdicts at session end (each xdist
    worker its own, in parallel, on its warm workers); one JSON line per verdict into
    `out_path` (REFINED_PREFIX + worker + .jsonl), read back by apply_refinements."""
    import json
    refiner = ReduceThenBucket(checker, budget_s=budget_s)
    lines = []
    for verdict in verdicts:
        fields = refiner.refine(verdict)
        if fields:
            lines.append(json.dumps(refinement_line(verdict.case.case_id, verdict.route, verdict.bucket, fields)))
    if lines:
        with open(out_path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return len(lines)


def apply_refinements(records: list, folder: str) -> list:
    """`records` (results.record.Record) with the refined bucket (and reduced case, first op,
    trigger) of every failure the session's processes reduced (files written by refine_verdicts)."""
    import json
    refined = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.startswith(REFINED_PREFIX) and name.endswith(".jsonl"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        item = json.loads(line)
                        refined[refinement_key(item)] = item
    out = []
    for one in records:
        found = refined.get(record_key(one))
        out.append(one.refined_by(found) if found and one.failed else one)
    return out
