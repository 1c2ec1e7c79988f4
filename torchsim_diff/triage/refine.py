"""Reduce, then bucket: a new failure reduced, and its cause read from its minimal case.

    >>> refiner = ReduceThenBucket(checker, budget_s=60)
    >>> refiner.refine(verdict)      # sets verdict.refined; returns the record's extra fields

The reduction (triage.reduce) keeps the failure's cause: route, kind, place and, for a value
failure, its first divergent op (cause_key). Its minimal case then gives the cause signature
(buckets.signatures, "cause signatures"): the special elements the failure does not need are
made ordinary (needed_specials, delta debugging), the first divergent op is read (every
intermediate as an output), replaced by neutral ops to see whether it is part of the cause,
and the trigger is what the failure needs among the layout, dtype and value features of its
inputs (ablations). Reductions are cached by case and, within a run, by raw failure
(raw_key); at a pytest session's end each process refines its own failures
(refine_verdicts), read back by apply_refinements.
"""
from __future__ import annotations

import dataclasses
import os
import time
import weakref

import torch

from torchsim_diff.case import layout, transforms
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.ops import get_op
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import (DEFERRED, NOT_REACHED, record_key, reduction_entry, reduction_of,
                                          refinement_key, refinement_line)
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets import signatures
from torchsim_diff.triage.reduce import (DEFAULT_BUDGET_S, ReduceError, _candidate, _is_valid, _is_written,
                                         _materialize, _raise_precision, _tidy, _with_geometry, _with_values,
                                         meta_results, reduce_case)

HANG_BUDGET_TIMEOUTS = 2
MIN_REDUCE_S = 3.0                # below this a reduction would end with the case it began with


class _Deferred(Exception):
    """A reduction stopped at its `stop_at`: left whole for later, never kept half done."""


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
    # what the reduction keeps (cause_key) of each other failure it met: route|kind|place|first
    # divergent op, or an error's signature
    other_failures: list = dataclasses.field(default_factory=list)

    def fields(self) -> dict:
        """Extra results.jsonl fields of a refined record (results.record.Record field -> value)."""
        return dict(signature=self.signature, reduced_case=self.reduced, first_op=self.first_op,
                    trigger=self.trigger, reduce_s=round(self.seconds, 3), reduce_runs=self.runs,
                    reduced_artifacts=self.reduced_artifacts, minimal_bucket=self.minimal_bucket,
                    other_failures=self.other_failures)


class ReduceThenBucket:
    """Reduces each new failure, then buckets it from its minimal case.

        >>> refiner = ReduceThenBucket(checker, budget_s=60)
        >>> refiner.refine(verdict)      # sets verdict.refined; returns the record's extra fields
        >>> record.with_fields(**refiner.refine(verdict))

    The reduction keeps the failure's first divergent op (cause_key) until the minimal case
    shows the op is no part of the cause (_op_free); the special values the failure does not
    need are then made ordinary (needed_specials). The minimal case gives the first divergent
    op (every intermediate as an output, compared against float64) and the trigger (the
    layout, dtype and value features whose ablation makes the failure vanish). Results are
    cached by case hash and route, and within a run by the failure's raw signature with the
    layout and value classes of its case (raw_key): a failure already reduced costs nothing
    the second time.
    """

    def __init__(self, checker: Checker, *, budget_s: float = DEFAULT_BUDGET_S, cache_path: str | None = None):
        self.checker, self.budget_s, self.cache_path = checker, budget_s, cache_path
        self.cap_s: float | None = None       # a campaign's deadline: not even a hang's reduction goes past it
        self.by_case: dict = _load_cache(cache_path)
        self.by_raw: dict = {}

    @classmethod
    def of_checker(cls, checker: Checker, *, budget_s: float = DEFAULT_BUDGET_S,
                   cap_s: float | None = None) -> "ReduceThenBucket":
        """The one refiner of `checker` in this process, so that a failure reduced to be matched
        against the known bugs (run.runner) is not reduced again at session end (refine_verdicts)."""
        refiner = _REFINERS.get(checker)
        if refiner is None:
            refiner = _REFINERS[checker] = cls(checker, budget_s=budget_s)
        refiner.budget_s, refiner.cap_s = budget_s, cap_s
        return refiner

    def refine(self, verdict, *, stop_at: float | None = None) -> dict:
        """The record fields (results.record.Record field -> value) of a new failure's reduction.
        stop_at (time.time()): a reduction not done by then is dropped, not kept half done (a
        half-reduced case could name another bug), and its record says DEFERRED."""
        if not verdict.failed or not verdict.kind.reducible:
            return {}
        raw = verdict.signature
        key = f"{verdict.route}|{verdict.case.case_id}"
        found = self.by_case.get(key) or self.by_raw.get(raw_key(verdict))
        if found is None:
            try:
                found = self._reduce_and_classify(verdict, stop_at)
            except _Deferred:
                return dict(reduce_error=DEFERRED)
            except ReduceError as exc:
                # Run again, the case no longer fails (a flaky failure, or one whose worker was
                # killed from outside): kept as found, in its raw bucket, and the run goes on.
                # Not cached: a later failure in the bucket may reproduce and be reduced.
                return dict(reduce_error=str(exc))
            self.by_case[key] = self.by_raw[raw_key(verdict)] = found
            _save_cache(self.cache_path, self.by_case)
        verdict.refined, fields = reduction_of(found)
        return dict(fields, raw_bucket=classify_bucket(raw), reduce_error=None)

    def _reduce_and_classify(self, verdict, stop_at: float | None = None) -> dict:
        started = time.perf_counter()
        within_s = None if stop_at is None else stop_at - time.time()
        if within_s is not None and within_s < MIN_REDUCE_S:
            raise _Deferred
        result = reduce_case(verdict.case, verdict.route, out_dir=self.checker.out_dir, jobs=1,
                             checkers=[self.checker], key=self.cause_key, budget_s=self._budget_for(verdict),
                             within_s=within_s)
        if stop_at is not None and time.time() >= stop_at:
            raise _Deferred                     # the search was cut by stop_at, not ended by itself
        minimal, runs, others = self.checker.check(result.reduced, verdict.route), result.runs + 1, result.other_failures
        if self._op_free(minimal):
            # The op that diverges first is no part of the cause (a neutral op in its place fails
            # the same way): the trigger is, and the reduction goes on with any op reading it.
            # The failures met through other ops were this one, not findings of their own.
            minimal, runs = self._reduced_with_any_op(minimal, runs)
            others = {k: v for k, v in others.items() if not k.startswith(f"{signatures.reduction_key(minimal)}|")}
        minimal = self._without_idle_specials(minimal)
        signature, first_op, trigger = self._cause(minimal, verdict)
        refinement = Refinement(signature or verdict.signature, minimal.case.to_dict(), first_op, trigger,
                                time.perf_counter() - started, runs,
                                minimal.artifact_dir if minimal.artifacts else None,
                                minimal.bucket if minimal.failed else None,
                                sorted(others))
        return reduction_entry(refinement.signature, refinement.fields())

    def cause_key(self, verdict) -> str | None:
        """What the reduction keeps: route, kind and place (signatures.reduction_key) and, for a
        value failure on an output of a case without in-place writes, the first divergent op, so
        that the minimal case shows the bug found and not another one the candidates met on the
        way (those are kept as other_failures). A write's divergence is not among the
        intermediates compared (an in-place node is no output), so its consumers would stand in
        for it: such a failure keeps route, kind and place alone."""
        key = signatures.reduction_key(verdict)
        if key is None or not verdict.kind.value_failure or not key.endswith("|output") \
                or any(get_op(n["op"]).mutates for n in verdict.case.nodes):
            return key
        node = self._first_divergent_node(verdict)
        return f"{key}|{signatures.op_key(node['op'] if node else verdict.op)}"

    def _reduced_with_any_op(self, minimal, runs: int) -> tuple:
        """(verdict, runs): the minimal case reduced on, keeping route, kind and place alone; the
        minimal case as it was when it no longer fails (a flaky failure)."""
        try:
            again = reduce_case(minimal.case, minimal.route, out_dir=self.checker.out_dir, jobs=1,
                                checkers=[self.checker], key=signatures.reduction_key, budget_s=self.budget_s)
        except ReduceError:
            return minimal, runs
        return self.checker.check(again.reduced, minimal.route), runs + again.runs + 1

    def _op_free(self, minimal) -> bool:
        """Whether the minimal value failure's first divergent op is no part of its cause."""
        if not minimal.failed or not minimal.kind.value_failure:
            return False
        node = self._first_divergent_node(minimal)
        return node is None or not self._op_is_cause(minimal, node)

    def _without_idle_specials(self, minimal):
        """The minimal verdict again with the special values its failure does not need made
        ordinary (needed_specials), so the trigger reads the elements that matter."""
        if not minimal.failed or not minimal.kind.value_failure:
            return minimal
        key = self.cause_key(minimal)
        case = needed_specials(minimal.case, lambda c: self.cause_key(self.checker.check(c, minimal.route)) == key)
        if case is minimal.case:
            return minimal
        again = self.checker.check(case, minimal.route)
        return again if self.cause_key(again) == key else minimal

    def _budget_for(self, verdict) -> float:
        """The reduction's base budget: a hang's covers HANG_BUDGET_TIMEOUTS timeouts, since
        every step that keeps it costs one. Its signature names the features its minimal case
        still holds (signatures.hang_signature): a layout left unsimplified splits its bucket."""
        if verdict.kind == Kind.TIMEOUT and self.budget_s:
            hang_budget = max(self.budget_s, HANG_BUDGET_TIMEOUTS * self.checker.timeout_s)
            return hang_budget if self.cap_s is None else min(hang_budget, self.cap_s)
        return self.budget_s

    def _cause(self, minimal, verdict) -> tuple:
        """(cause signature, first divergent op, trigger) of the minimal case's failure
        (signatures: cause signatures); (None, None, []) when it no longer fails."""
        if not minimal.failed:
            return None, None, []
        if minimal.kind == Kind.TIMEOUT:
            # A hang is not ablated: each try would cost a timeout.
            return (signatures.hang_signature(minimal.route, minimal.case), None,
                    sorted(signatures.hang_features(minimal.case)))
        if not minimal.kind.value_failure:
            if signatures.reduction_key(minimal) != signatures.reduction_key(verdict):
                # The minimal case fails with another error than the one triaged (a worker
                # whose earlier failed compile left a stale program raises NameError
                # __compiled_fn_... for the same graph): the error seen first names it.
                return signatures.with_trigger_or_any(verdict.signature, []), None, []
            # An error that vanishes with a layout feature (an index read through the wrong
            # strides, say) is that layout's bug: the trigger keeps two such bugs apart even
            # where the error they end in reads the same.
            trigger = self._trigger(minimal)
            return signatures.with_trigger_or_any(minimal.signature, trigger), None, trigger
        trigger = self._trigger(minimal)
        node = self._first_divergent_node(minimal)
        first_op = node["op"] if node else minimal.op
        op_is_cause = node is not None and self._op_is_cause(minimal, node)
        # No op that diverges, or one a neutral op can stand in for: the input is read wrong,
        # and a NaN is only what the op made of it (one bug, whichever op showed it).
        kind = minimal.kind if op_is_cause else minimal.kind.reduces_as
        op = first_op if op_is_cause else signatures.ANY_OP
        return signatures.refined_signature(minimal.route, kind, op, trigger), first_op, trigger

    def _first_divergent_node(self, minimal) -> dict | None:
        """The node whose value diverges first; for a wrong input storage (or when the run with
        every intermediate as an output does not fail on an output), the first node of the
        failing op. A case whose outputs are already all its intermediates needs no second run."""
        try:
            wide, refs = transforms.intermediates_as_outputs(minimal.case)
            if refs == list(minimal.case.outputs):
                node = transforms.first_divergent_node(minimal.case, minimal, refs)
            else:
                node = transforms.first_divergent_node(wide, self.checker.check(wide, minimal.route), refs)
        except CaseError:
            node = None
        return node or next((n for n in minimal.case.nodes if n["op"] == minimal.op), None)

    def _op_is_cause(self, minimal, node) -> bool:
        """False when a neutral op in the first divergent node's place fails the same way: the
        layout, dtype or value trigger is the cause, and the op only what read it."""
        key = signatures.reduction_key(minimal)
        return not any(signatures.reduction_key(self.checker.check(candidate, minimal.route)) == key
                       for candidate in neutral_substitutes(minimal.case, node))

    def _trigger(self, minimal) -> list:
        """Features of the minimal case without which the failure vanishes."""
        key = signatures.reduction_key(minimal)
        features = set()
        for feature, variants in ablations(minimal.case):
            if feature not in features and all(signatures.reduction_key(self.checker.check(v, minimal.route)) != key
                                               for v in variants):
                features.add(feature)
        features.update(symptoms(self.checker, minimal))
        return sorted(features)


_REFINERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def raw_key(verdict) -> str:
    """What a failure's reduction is reused for within a run: its raw signature, dtype, the
    layout classes and the value classes its inputs hold. The raw signature alone names only the
    failing op, so an argmax over a NaN and an Inf would take the reduction of an argmax over a
    permuted input, and be that bug. A hang's names nothing at all: its graph's ops join the key,
    or every hang of a run would be the first one's bug."""
    case = verdict.case
    classes = set()
    for k, spec in enumerate(case.inputs):
        if spec["dtype"].startswith(("float", "bfloat")):
            classes.update(_value_classes(_materialize(case, k)))
    ops = ",".join(case.ops) if verdict.kind == Kind.TIMEOUT else ""
    return "|".join([verdict.signature, case.dtype, "+".join(case.layouts), "+".join(sorted(classes)), ops])


def classify_bucket(signature: str | None) -> str | None:
    return signatures.bucket_of(signature) if signature else None


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
# that moved it, and be named the trigger. Negative values are shifted up to PLAIN_VALUE.
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
        return [torch.where(where, torch.tensor(_plain_value(view, where), dtype=view.dtype), view)]
    finite = torch.isfinite(view)
    shift = PLAIN_VALUE - view[finite].double().min().item()
    return [torch.where(where, view.abs(), view), torch.where(finite, (view.double() + shift).to(view.dtype), view)]


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
        flat[[e for j, e, _c in elements if j == k]] = _plain_values(flat, special)[choice]
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


def symptoms(checker: Checker, verdict) -> set:
    """Features read from the failure itself: 'inout' when a mutated input's storage is
    wrong (seen on the input, or on an output that is an in-place op's result), 'unwritten'
    when the route left it as it was (a write lost, not a wrong value)."""
    name = _written_input(verdict.case, verdict.where or "")
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


def _written_input(case: Case, where: str) -> str | None:
    """The input a failure at `where` ("input x0", "output 1") is seen on: the input itself, or
    the input an output's in-place op wrote (None otherwise)."""
    if where.startswith("input "):
        return where.split()[1]
    if not where.startswith("output "):
        return None
    ref = case.outputs[int(where.split()[1])]
    node = next((n for n in case.nodes if n["id"] == ref), None)
    return node["args"][0] if node is not None and get_op(node["op"]).mutates else None


def _route_storage(checker: Checker, case: Case, route: str, position: int):
    """The route's final storage of input `position` (None when the run failed)."""
    from torchsim_diff.worker import protocol
    folder = checker.artifact_dir(route, case.case_id + "-storages")
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
        from torchsim_diff.buckets.corpus import write_atomic
        write_atomic(path, {"schema": 1, "reductions": entries})


# -- reduce, then bucket at a pytest session's end -----------------------------------------------
REFINED_PREFIX = "refined-"


def refine_verdicts(checker: Checker, verdicts, out_path: str, *, budget_s: float = DEFAULT_BUDGET_S,
                    deadline: float | None = None) -> int:
    """Reduce, then bucket, a pytest process's failing verdicts at session end (each xdist
    worker its own, in parallel, on its warm workers); one JSON line per verdict into
    `out_path` (REFINED_PREFIX + worker + .jsonl), read back by apply_refinements. With a
    `deadline` (time.time(); a campaign's), a failure unlike those before it goes first (one
    like them takes their reduction for free), each reduction's base is its part of the time
    left (_part_of_time_left) and none goes past the deadline: one the time does not reach or
    cuts stays as found, never half reduced (reduce_error says why)."""
    import json
    verdicts = _distinct_first(list(verdicts)) if deadline is not None else list(verdicts)
    lines = []
    for k, verdict in enumerate(verdicts):
        share = budget_s if deadline is None else min(budget_s, _part_of_time_left(deadline, len(verdicts) - k))
        if share < MIN_REDUCE_S:
            fields = dict(reduce_error=NOT_REACHED) if verdict.failed and verdict.kind.reducible else {}
        else:
            fields = ReduceThenBucket.of_checker(checker, budget_s=share,
                                                 cap_s=None if deadline is None else share).refine(verdict, stop_at=deadline)
            if fields == dict(reduce_error=DEFERRED):      # cut by the deadline: the time ran out
                fields = dict(reduce_error=NOT_REACHED)
        if fields:
            lines.append(json.dumps(refinement_line(verdict.case.case_id, verdict.route, verdict.bucket, fields)))
    if lines:
        with open(out_path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return len(lines)


GOOD_REDUCE_S = 15.0              # a base most reductions finish in (known bugs' take 2-30 s on 2 cores)


def _part_of_time_left(deadline: float, reductions_left: int) -> float:
    """A reduction's base: its even part of the time left, or more where the time allows (half
    of it, up to GOOD_REDUCE_S), so that a few reductions finish rather than all being cut;
    classifying the minimal case (first divergent op, trigger) comes after it."""
    left = max(0.0, deadline - time.time())
    return max(left / max(1, reductions_left), min(left / 2, GOOD_REDUCE_S))


def _distinct_first(verdicts: list) -> list:
    """The verdicts with the first of each raw_key before the others, each group in order."""
    seen, first, again = set(), [], []
    for verdict in verdicts:
        key = raw_key(verdict) if verdict.failed and verdict.kind.reducible else None
        (again if key in seen else first).append(verdict)
        seen.add(key)
    return first + again


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
