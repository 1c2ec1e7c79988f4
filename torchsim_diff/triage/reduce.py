"""Reduce a failing case to a small one that still fails in the same bucket on a route.

    >>> result = reduce_case(case, "inductor", out_dir="reports/reduce")
    >>> print(result.summary())
    >>> print(result.reduced.program_source())

Greedy reduction over passes, each proposing smaller variants of the current case in
order: drop outputs, keep only a window of the graph (one node and its producers up to two
deep, smallest windows first), drop and bypass nodes, cut a subgraph by making a node's
result a new input, simpler ops, shrink dimensions, simplify layouts towards contiguous,
simplify values and, last, raise a float16/bfloat16 case to float32 (a hang takes windows,
then layouts, first: HANG_PASSES). A pass runs until none of its candidates keeps the
bucket; after each step it goes on from the candidate it accepted, and the passes repeat
until a whole round changes nothing. Every candidate is made readable (dead nodes and unused inputs dropped,
names renumbered) and must be valid before a route sees it: its program runs on meta
tensors and in eager. Valid candidates are checked in parallel, one Checker (one warm
worker per route) per job; the earliest candidate in pass order that keeps the bucket is
accepted, so the result does not depend on timing.

Values are pinned: the reduction starts from the case with every input's values written
out bit for bit, so dropping an input leaves the others' values as they were; a node cut
out becomes an input holding the values eager computed for it (when they lie in the
domain its consumers need), and a shrunk dimension keeps the leading (or the trailing) values.

Time budget (`budget_s` is its base B; None: no time limit, only `max_runs`):
    start:    B * max(1, (nodes + inputs) / SIZE_PER_BASE) of the case as given;
    progress: each accepted step moves the deadline to at least PROGRESS_GRANT * B from now;
    ceiling:  never past CEILING_FACTOR * B after the start.
With B = 60 s a 10-node, 5-input case starts with 180 s and stops by 300 s at the latest.
A hang's B is at least HANG_BUDGET_TIMEOUTS timeouts (triage.refine.ReduceThenBucket).

Values, while the bucket holds: each float or integer input (index inputs too, toward 0)
is tried, whole, at a simplest constant (the first of 0, 1, -1, 0.5 its domain allows),
then at the sign of each value (0 near zero), at each value rounded to an integer within
+-SMALL_INTEGER, and rounded to an integer, each with its special values (NaN, +-Inf,
subnormals, magnitudes past the square root of the dtype's largest value) made ordinary
too, then kept; then with only the special values made ordinary. Inputs of at most
ELEMENT_LIMIT elements then go the same way one element at a time; larger ones a chunk at
a time (halves, quarters, ...: the simplest constant, then integers). A value that leaves
the input's domain or the domain its consumers need (OPERAND_DOMAINS) falls back to the
next simpler one that does not (log keeps positives, div nonzero divisors, an index stays
below its bound); unique indices and booleans are left as they are. Every value is stored
bit for bit (case/values.encode).

The minimal case holds every input's values explicitly, so its `values.special` changes no
bit; it is recomputed from them: true iff some float input holds NaN or an infinity.
"""
from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import os
import queue
import time

import torch

from torchsim_diff.case import layout, validate, values
from torchsim_diff.run.checker import Checker
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.results.kinds import Kind
from torchsim_diff.ops import get_op
from torchsim_diff.case.program_check import load_program
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S

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
    # key (what the reduction keeps, as the evaluator's key reads it) -> the smallest case of each
    # failure met that was not the one reduced: a finding of its own, never switched to
    other_failures: dict = dataclasses.field(default_factory=dict)

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
                budget_s: float | None = None, within_s: float | None = None) -> ReduceResult:
    """Shrink `case` while it keeps failing on `route` in its original bucket.

    jobs: parallel Checkers (default: the number of cores). max_runs: route runs allowed
    before stopping with the smallest case so far. progress: called with one line per
    accepted step. budget_s: the base of the time budget (module docstring); within_s: a hard
    limit on top of it (a campaign item's time left). checkers, key:
    see _Evaluator (reduce, then bucket passes the campaign's warm Checker and
    signatures.reduction_key).
    """
    jobs = _check_options(jobs, max_runs)
    started = time.perf_counter()
    budget = TimeBudget.for_case(case, budget_s, within_s=within_s)
    with _Evaluator(route, out_dir=out_dir, jobs=jobs, timeout_s=timeout_s, max_runs=max_runs,
                    checkers=checkers, key=key, budget=budget) as evaluator:
        bucket = evaluator.bucket_of_original(case)
        reducer = _Reducer(evaluator, bucket, progress or (lambda line: None))
        reduced = _settled(reducer.run(reducer.pinned(case)))
        runs = evaluator.runs
    return ReduceResult(case, reduced, bucket, route, runs, time.perf_counter() - started, evaluator.others)


def _check_options(jobs, max_runs) -> int:
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be a positive integer (or None for one per core)")
    if not isinstance(max_runs, int) or max_runs < 1:
        raise ValueError(f"max_runs={max_runs!r} must be a positive integer")
    return jobs


# -- the time budget (module docstring) -------------------------------------------------------
SIZE_PER_BASE = 5        # nodes + inputs the base budget covers
PROGRESS_GRANT = 0.5     # share of the base an accepted step guarantees from then on
CEILING_FACTOR = 5       # the hard ceiling, in bases
MIN_RUN_S = 1.0          # a candidate's run limit near the ceiling: below it no run could finish


@dataclasses.dataclass
class TimeBudget:
    """When the search stops: a deadline that grows with the case and with progress, under a ceiling."""

    deadline: float | None
    ceiling: float | None
    grant: float
    clock: object = time.perf_counter

    @classmethod
    def for_case(cls, case: Case, base_s: float | None, clock=time.perf_counter,
                 within_s: float | None = None) -> "TimeBudget":
        """The budget of base `base_s` (None: no limit) for `case`, never past `within_s` from now."""
        now = clock()
        if not base_s:
            hard = None if within_s is None else now + within_s
            return cls(hard, hard, 0.0, clock)
        nodes, inputs, _ = case.size()
        ceiling = now + base_s * CEILING_FACTOR
        if within_s is not None:
            ceiling = min(ceiling, now + within_s)
        start = base_s * max(1.0, (nodes + inputs) / SIZE_PER_BASE)
        return cls(min(now + start, ceiling), ceiling, base_s * PROGRESS_GRANT, clock)

    @property
    def late(self) -> bool:
        return self.deadline is not None and self.clock() > self.deadline

    def run_limit(self, usual_s: float) -> float:
        """A candidate's run limit: `usual_s` (its checker's), but not past the ceiling, so that
        one hanging candidate cannot hold the search past it."""
        if self.ceiling is None:
            return usual_s
        return min(usual_s, max(MIN_RUN_S, self.ceiling - self.clock()))

    def progress(self) -> None:
        """A step was accepted: at least `grant` seconds more, within the ceiling."""
        if self.deadline is not None:
            self.deadline = min(max(self.deadline, self.clock() + self.grant), self.ceiling)


# -- checking candidates on the route ------------------------------------------------------
class _Evaluator:
    """Buckets of cases on one route, with one Checker per parallel job and a cache."""

    def __init__(self, route: str, *, out_dir: str, jobs: int, timeout_s: float, max_runs: int,
                 checkers: list | None = None, key=None, budget: TimeBudget | None = None):
        """checkers: warm Checkers to borrow (not closed here) instead of starting `jobs` new
        ones. key: verdict -> what must stay the same (default: its bucket). budget: when
        the search stops with the smallest case so far (default: no time limit)."""
        self.route, self.max_runs = route, max_runs
        self.key = key or (lambda verdict: verdict.bucket)
        self.budget = budget or TimeBudget(None, None, 0.0)
        self.runs = 0
        self.original_kind: Kind | None = None
        self.cache: dict = {}
        self.others: dict = {}     # another failure's key -> the smallest case that failed so
        self.checkers: queue.Queue = queue.Queue()
        self.owned = not checkers
        for job, checker in enumerate(checkers or []):
            self.checkers.put(checker)
        for job in range(jobs if self.owned else 0):
            self.checkers.put(Checker(out_dir=os.path.join(out_dir, f"job{job}"), timeout_s=timeout_s,
                                      tag=f"reduce{job}"))
        self.jobs = self.checkers.qsize()
        self.every_checker = list(self.checkers.queue)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt)
        if interrupted:
            # Ctrl-C: the candidates in flight are not waited for (a hang would hold the
            # interrupt for its whole time limit), and the run's checkers, borrowed ones too,
            # run nothing more
            for checker in self.every_checker:
                checker.stop()
        self.pool.shutdown(wait=not interrupted, cancel_futures=interrupted)
        while self.owned and not self.checkers.empty():
            self.checkers.get().close()

    @property
    def exhausted(self) -> bool:
        return self.budget.late or self.runs >= self.max_runs

    def bucket_of_original(self, case: Case) -> str:
        self.runs += 1
        verdict = self._check(case)
        if not verdict.failed:
            raise ReduceError(f"the case does not fail on route {self.route!r} (status {verdict.status.value}); "
                              "only failing cases can be reduced")
        self.original_kind = Kind(verdict.kind)
        return self.key(verdict)

    def first_keeping(self, candidates: list, bucket: str):
        """The earliest candidate whose bucket is `bucket`, or None."""
        todo = [c for c in candidates if c.case_id not in self.cache][: self.max_runs - self.runs]
        self.runs += len(todo)
        for case, verdict in zip(todo, self.pool.map(self._check, todo)):
            self.cache[case.case_id] = key = self.key(verdict)
            if key is not None and key != bucket and (key not in self.others or case.size() < self.others[key].size()):
                self.others[key] = case
        for case in candidates:
            if self.cache.get(case.case_id) == bucket:
                return case
        return None

    def _check(self, case: Case):
        checker = self.checkers.get()
        try:
            return checker.check(case, self.route, timeout_s=self.budget.run_limit(checker.timeout_s))
        finally:
            self.checkers.put(checker)


class _Reducer:
    """The passes in order, each applied until none of its candidates keeps the bucket."""

    def __init__(self, evaluator: _Evaluator, bucket: str, progress):
        self.evaluator, self.bucket, self.progress = evaluator, bucket, progress

    def pinned(self, case: Case) -> Case:
        """`case` with its values written out (module docstring), when that keeps the bucket.
        A hang's is taken unchecked: pinning changes no bit, and the check would cost a whole
        timeout of a budget of two."""
        pinned = _pinned(case)
        if pinned.case_id == case.case_id:
            return case
        if self.evaluator.original_kind == Kind.TIMEOUT:
            return pinned
        return case if self.evaluator.first_keeping([pinned], self.bucket) is None else pinned

    def run(self, case: Case) -> Case:
        current = case
        passes = HANG_PASSES if self.evaluator.original_kind == Kind.TIMEOUT else PASSES
        changed = True
        while changed and not self.evaluator.exhausted:
            changed = False
            for make in passes:
                current, accepted = self._run_pass(make, current)
                changed |= accepted
        current, _ = self._run_pass(_raise_precision, current)
        return current

    def _run_pass(self, make, current: Case):
        """Apply one pass until none of its candidates keeps the bucket. After a step the pass
        goes on from the candidate it accepted: those before it were just refused (the next
        round of passes tries them again)."""
        accepted, start = False, 0
        while not self.evaluator.exhausted:
            found = self._first_keeping(_valid_candidates(make(current), current, start))
            if found is None:
                break
            start, new = found
            start = 0 if make is _keep_windows else start      # windows come smallest first: look again
            current, accepted = self._accept(make, current, new), True
        return current, accepted

    def _first_keeping(self, numbered):
        """The earliest (position, candidate) that keeps the bucket, checked `jobs` at a time."""
        batch = []
        for pair in numbered:
            batch.append(pair)
            if len(batch) == self.evaluator.jobs:
                found = self._keeping_in(batch)
                if found is not None or self.evaluator.exhausted:
                    return found
                batch = []
        return self._keeping_in(batch) if batch else None

    def _keeping_in(self, batch: list):
        found = self.evaluator.first_keeping([case for _, case in batch], self.bucket)
        return next((pair for pair in batch if pair[1] is found), None)

    def _accept(self, make, old: Case, new: Case) -> Case:
        self.evaluator.budget.progress()
        self.progress(f"{make.__name__.strip('_').replace('_', ' ')}: {old.size()} -> {new.size()} "
                      f"after {self.evaluator.runs} runs")
        return new


def _valid_candidates(raw, current: Case, start: int = 0):
    """(position in `raw`, candidate) for each distinct valid candidate from position `start` on."""
    seen = {current.case_id}
    for position, candidate in enumerate(raw):
        if position < start:
            continue
        candidate = _tidy(candidate) if candidate is not None else None
        if candidate is None or candidate.case_id in seen or not _is_valid(candidate):
            continue
        seen.add(candidate.case_id)
        yield position, candidate


# -- validity --------------------------------------------------------------------------------
def meta_results(case: Case) -> dict:
    """Meta tensors of every input and node of `case` (raises when the program is invalid)."""
    return validate.meta_results(case.to_dict())


def _is_valid(case: Case) -> bool:
    """The case passes the one validator (case.validate: fields, value domains, meta tensors)
    and runs in eager. The validator, not the schema alone: a shrunk shape can leave an index
    input more unique indices than its range holds, and duplicate indices make a write's
    winner the route's choice, a nondeterminism no compiler owes anyone."""
    try:
        validate.validate_case(case.to_dict())
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
    """A contiguous input standing for `ref`, in a domain every reader of `ref` accepts, holding
    the values eager computed for `ref` where they lie in that domain (else drawn ones); None
    when no domain fits (an index computed from floats)."""
    result = metas[ref]
    domain = _domain_for(case, ref, result.dtype)
    if domain is None:
        return None
    spec = _contiguous_input(name, list(result.shape), layout.dtype_name(result.dtype), domain)
    value = computed.get(ref)
    usable = (value is not None and value.shape == result.shape and value.dtype == result.dtype
              and value.numel() > 0)
    if usable and (value.dtype == torch.bool or _Domain({domain["kind"]}).holds(value)):
        spec["data"] = values.encode(value.contiguous().reshape(-1))
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


def _materialize(case: Case, k: int) -> torch.Tensor:
    vals = case.values
    return layout.materialize(case.inputs[k], int(vals.get("seed", 0)), k, bool(vals.get("special", False)))


# -- values (module docstring, "Values") -------------------------------------------------------
SIMPLEST_VALUES = (0.0, 1.0, -1.0, 0.5)
SMALL_INTEGER = 4
ELEMENT_LIMIT = 32
CHUNK_PARTS = (2, 4, 8, 16)
SIMPLIFIED_KINDS = ("real", "positive", "nonzero", "small", "index")
SIZE_FREE_KINDS = ("real", "positive", "nonzero", "small", "bool")    # values that fit any shape


@dataclasses.dataclass(frozen=True)
class _Domain:
    """The values an input may hold: every kind in `kinds` at once (`high`: an index's bound)."""

    kinds: frozenset
    high: int | None = None

    def allows(self, x: torch.Tensor) -> torch.Tensor:
        """Per element of `x`: finite and inside every kind."""
        x = x.double()
        ok = torch.isfinite(x)
        if "positive" in self.kinds:
            ok &= x > 0
        if "nonzero" in self.kinds:
            ok &= x != 0
        if "small" in self.kinds:
            ok &= x.abs() <= 1
        if "index" in self.kinds:
            ok &= (x >= 0) & (x < (self.high or 0)) & (x == torch.round(x))
        return ok

    def holds(self, x: torch.Tensor) -> bool:
        """Every finite element of `x` is allowed (special values belong to every domain)."""
        return bool((self.allows(x) | ~torch.isfinite(x.double())).all())

    def simplest(self) -> float | None:
        return next((c for c in SIMPLEST_VALUES if self.allows(torch.tensor(c))), None)


def _value_domain(case: Case, k: int) -> _Domain | None:
    """Input `k`'s own domain and the ones its readers need; None when its values stay as they are."""
    spec = case.inputs[k]
    domain = spec.get("domain", {})
    kind = domain.get("kind", "real")
    if kind not in SIMPLIFIED_KINDS or spec["dtype"] == "bool":
        return None
    needed = {OPERAND_DOMAINS.get(n["op"], {}).get(pos, "real") for n, pos in _uses(case.to_dict(), spec["name"])}
    return _Domain(frozenset({kind} | needed), domain.get("high"))


def _simplify_values(case: Case):
    """Seed 0 without drawn special values, then simpler values per input: whole inputs, then
    one element at a time for inputs of at most ELEMENT_LIMIT elements."""
    drawn = any("data" not in spec for spec in case.inputs)
    if drawn and (case.values.get("seed", 0) != 0 or case.values.get("special")):
        data = case.to_dict()
        data["values"] = {**data["values"], "seed": 0, "special": False}
        yield _candidate(data)
    for k in range(len(case.inputs)):
        domain = _value_domain(case, k)
        if domain is None or domain.simplest() is None:
            continue
        storage, covered = _storage_and_cover(case, k)
        old = storage[covered]
        for new in _whole_input_values(old, domain):
            yield _with_covered(case, k, storage, covered, new)
        pieces = _element_values(old, domain) if old.numel() <= ELEMENT_LIMIT else _chunk_values(old, domain)
        for new in pieces:
            yield _with_covered(case, k, storage, covered, new)


def _ladder(x: torch.Tensor, domain: _Domain) -> list:
    """Simpler values for every element of `x`, simplest first, each allowed by `domain` (a
    value it refuses falls back to the rung before): the simplest constant, the sign (0 near
    zero), the integer within +-SMALL_INTEGER, the integer."""
    x = x.double()
    simplest = torch.full_like(x, domain.simplest())
    rungs = [simplest]
    integer = torch.round(x) + 0.0          # + 0.0: round(-0.3) is -0.0
    for value in (torch.where(x.abs() < 0.5, 0.0, torch.sign(x)), integer.clamp(-SMALL_INTEGER, SMALL_INTEGER), integer):
        rungs.append(torch.where(domain.allows(value), value, rungs[-1]))
    return rungs


def _special(x: torch.Tensor) -> torch.Tensor:
    """Per element: NaN, infinite, subnormal, or past the square root of the dtype's largest value."""
    if not x.dtype.is_floating_point:
        return torch.zeros_like(x, dtype=torch.bool)
    info, wide = torch.finfo(x.dtype), x.double()
    tiny = (wide != 0) & (wide.abs() < info.smallest_normal)
    return ~torch.isfinite(wide) | tiny | (wide.abs() >= info.max ** 0.5)


def _whole_input_values(old: torch.Tensor, domain: _Domain) -> list:
    """The whole input at each rung, special values made ordinary (their sign rung), then kept;
    last, only the special values made ordinary."""
    simplest, unit, *rest = _ladder(old, domain)
    special = _special(old)
    found = [_cast(simplest, old)]
    for rung in (unit, *rest):
        found += [_cast(torch.where(special, unit, rung), old), _mixed(special, old, rung)]
    found.append(_mixed(~special, old, unit))
    return found


def _element_values(old: torch.Tensor, domain: _Domain):
    """One element at a time, each at each rung of its ladder that changes its bits."""
    rungs = [_cast(rung, old) for rung in _ladder(old, domain)]
    for e in range(old.numel()):
        tried = [old[e]]
        for rung in rungs:
            if not any(_same_bits(rung[e], t) for t in tried):
                tried.append(rung[e])
                new = old.clone()
                new[e] = rung[e]
                yield new


def _chunk_values(old: torch.Tensor, domain: _Domain):
    """Inputs too large to go one element at a time: halves, quarters, ... (CHUNK_PARTS), each
    chunk at the simplest constant, then rounded to integers with its special values kept."""
    simplest, *_, integer = _ladder(old, domain)
    special = _special(old)
    for parts in CHUNK_PARTS:
        for chunk in torch.arange(old.numel()).tensor_split(parts):
            inside = torch.zeros_like(special)
            inside[chunk] = True
            yield _mixed(~inside, old, simplest)
            yield _mixed(~inside | special, old, integer)


def _cast(values_: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return values_.to(like.dtype)


def _mixed(keep: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`old`'s own bits where `keep`, `new` elsewhere."""
    return torch.where(keep, old, _cast(new, old))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.dtype.is_floating_point:
        return bool(a == b)
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(a.reshape(1).view(bits) == b.reshape(1).view(bits))


def _storage_and_cover(case: Case, k: int):
    """Input `k`'s storage and which of its elements the view covers."""
    spec = case.inputs[k]
    lay = spec["layout"]
    storage = layout.storage_of(_materialize(case, k))[: lay["storage_size"]].clone()
    return storage, layout.covered_mask(spec["shape"], lay["strides"], lay["offset"], lay["storage_size"])


def _with_covered(case: Case, k: int, storage: torch.Tensor, covered: torch.Tensor, new: torch.Tensor) -> Case:
    """`case` with input `k`'s covered storage elements set to `new` (explicit values, bit for bit)."""
    data = case.to_dict()
    storage = storage.clone()
    storage[covered] = new
    data["inputs"][k]["data"] = values.encode(storage)
    return _candidate(data)


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


def _pinned(case: Case) -> Case:
    """`case` with every input's values written out, bit for bit as drawn."""
    data = case.to_dict()
    for k, spec in enumerate(data["inputs"]):
        if "data" not in spec:
            spec["data"] = values.encode(_storage_and_cover(case, k)[0])
    return _candidate(data) or case


def _settled(case: Case) -> Case:
    """The minimal case as stored: every input's values explicit, and `special` true iff a
    float input holds NaN or an infinity (the flag only steers drawn values: no bit changes)."""
    pinned = _pinned(case)
    data = pinned.to_dict()
    data["values"] = {**data["values"], "special": _holds_nonfinite(pinned)}
    return _candidate(data) or pinned


def _holds_nonfinite(case: Case) -> bool:
    views = (_materialize(case, k) for k in range(len(case.inputs)))
    return any(v.dtype.is_floating_point and not bool(torch.isfinite(v).all()) for v in views)


# -- pass order -------------------------------------------------------------------------------
PASSES = (_drop_outputs, _keep_windows, _drop_nodes, _bypass_nodes, _cut_nodes, _canonical_ops,
          _shrink_dims, _simplify_layouts, _simplify_values)
# A hang turns the costs around: a candidate that keeps it costs a whole timeout, one that
# does not a normal run. So the pass that cuts most per accepted step, one node's window
# alone, comes first; dropping outputs one at a time would pay a timeout per output. Layouts
# come next: a hang is not ablated, so a layout its minimal case keeps names its bucket
# (signatures.hang_signature), and a budget spent on nodes first would split one hang in two.
HANG_PASSES = (_keep_windows, _simplify_layouts) + tuple(
    p for p in PASSES if p not in (_keep_windows, _simplify_layouts))


DEFAULT_BUDGET_S = 60.0     # the base of a campaign reduction's time budget (ReduceThenBucket)
