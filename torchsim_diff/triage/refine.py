"""Reduce, then bucket: a new failure reduced, and its cause read from its minimal case.

    >>> refiner = ReduceThenBucket(checker, budget_s=60)
    >>> refiner.refine(verdict)      # sets verdict.refined; returns the record's extra fields

The reduction (triage.reduce) keeps the failure's cause: route, kind, place and, for a value
failure, its first divergent op (cause_key). Its minimal case then gives the cause signature
(buckets.signatures, "cause signatures"): the special elements the failure does not need are
made ordinary (needed_specials, delta debugging), a NaN or Inf mismatch that still fails as
wrong values with its special and zero elements made ordinary takes that verdict (one bug, one
kind, whichever values the reduction ended on), the first divergent op is read (every
intermediate as an output), replaced by neutral ops to see whether it is part of the cause,
and the trigger is what the failure needs among the layout, dtype and value features of its
inputs (ablations). Reductions are cached by case and, within a run, by raw failure
(raw_key); at a pytest session's end each process refines its own failures
(refine_verdicts), read back by apply_refinements.

The modules: this one (ReduceThenBucket, raw_key, the reduction cache, the symptoms read from
the failure itself), triage.trigger_ablations (the trigger's ablations, the special elements a
failure needs, neutral substitutes for the first divergent op) and triage.session_refinements
(the refined-*.jsonl files of a pytest session's end).
"""
from __future__ import annotations

import dataclasses
import os
import time
import weakref

import torch

from torchsim_diff.case import transforms
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.ops import get_op
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import DEFERRED, reduction_entry, reduction_of
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets import signatures
from torchsim_diff.triage.case_edits import _materialize
from torchsim_diff.triage.reduce import DEFAULT_BUDGET_S, ReduceError, reduce_case
from torchsim_diff.triage.shared_reductions import SharedReductions, code_scope
from torchsim_diff.triage.trigger_ablations import (_value_classes, ablations, needed_specials, neutral_substitutes,
                                                    ordinary_variants)

HANG_BUDGET_TIMEOUTS = 2
# A hang's candidates get at least this long: under it, a start-up alone could pass for a hang.
MIN_HANG_LIMIT_S = 10.0
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
        self.shared: SharedReductions | None = None     # the run's other processes' reductions, by raw_key

    @classmethod
    def of_checker(cls, checker: Checker, *, budget_s: float = DEFAULT_BUDGET_S,
                   cap_s: float | None = None, shared_path: str | None = None) -> "ReduceThenBucket":
        """The one refiner of `checker` in this process, so that a failure reduced to be matched
        against the known bugs (run.runner) is not reduced again at session end
        (session_refinements.refine_verdicts). shared_path: the run's SharedReductions file, so
        that a failure another process reduced is not reduced again here."""
        refiner = _REFINERS.get(checker)
        if refiner is None:
            refiner = _REFINERS[checker] = cls(checker, budget_s=budget_s)
        refiner.budget_s, refiner.cap_s = budget_s, cap_s
        if shared_path is not None:
            refiner.shared = SharedReductions(shared_path, code_scope())
        return refiner

    def refine(self, verdict, *, stop_at: float | None = None) -> dict:
        """The record fields (results.record.Record field -> value) of a new failure's reduction.
        stop_at (time.time()): a reduction not done by then is dropped, not kept half done (a
        half-reduced case could name another bug), and its record says DEFERRED."""
        if not verdict.failed or not verdict.kind.reducible:
            return {}
        raw, by_raw = verdict.signature, raw_key(verdict)
        key = f"{verdict.route}|{verdict.case.case_id}"
        found = self.by_case.get(key) or self.by_raw.get(by_raw) or self._reduced_elsewhere(by_raw)
        if found is None:
            try:
                with self.checker.triage_runs():    # a crash's reduction re-runs it: no fresh cases
                    found = self._reduce_and_classify(verdict, stop_at)
            except _Deferred:
                return dict(reduce_error=DEFERRED)
            except ReduceError as exc:
                # Run again, the case no longer fails (a flaky failure, or one whose worker was
                # killed from outside): kept as found, in its raw bucket, and the run goes on.
                # Not cached: a later failure in the bucket may reproduce and be reduced.
                return dict(reduce_error=str(exc))
            self.by_case[key] = self.by_raw[by_raw] = found
            _save_cache(self.cache_path, self.by_case)
            if self.shared is not None:
                self.shared.put(by_raw, found)
        verdict.refined, fields = reduction_of(found)
        return dict(fields, raw_bucket=classify_bucket(raw), reduce_error=None)

    def _reduced_elsewhere(self, by_raw: str) -> dict | None:
        """The reduction another process of the run made of this raw failure, kept here too."""
        found = self.shared.get(by_raw) if self.shared is not None else None
        if found is not None:
            self.by_raw[by_raw] = found
        return found

    def _reduce_and_classify(self, verdict, stop_at: float | None = None) -> dict:
        started = time.perf_counter()
        within_s = None if stop_at is None else stop_at - time.time()
        if within_s is not None and within_s < MIN_REDUCE_S:
            raise _Deferred
        result = reduce_case(verdict.case, verdict.route, out_dir=self.checker.out_dir, jobs=1,
                             checkers=[self.checker], key=self.cause_key, budget_s=self._budget_for(verdict),
                             within_s=within_s, run_limit_s=self._hang_limit(verdict))
        if stop_at is not None and time.time() >= stop_at:
            raise _Deferred                     # the search was cut by stop_at, not ended by itself
        minimal = self.checker.check(result.reduced, verdict.route, timeout_s=self._confirming_limit(verdict, stop_at))
        runs, others = result.runs + 1, result.other_failures
        if self._op_free(minimal):
            # The op that diverges first is no part of the cause (a neutral op in its place fails
            # the same way): the trigger is, and the reduction goes on with any op reading it.
            # The failures met through other ops were this one, not findings of their own.
            minimal, runs = self._reduced_with_any_op(minimal, runs)
            others = {k: v for k, v in others.items() if not k.startswith(f"{signatures.reduction_key(minimal)}|")}
        minimal = self._as_wrong_values_where_it_can(self._without_idle_specials(minimal))
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

    def _as_wrong_values_where_it_can(self, minimal):
        """A NaN or Inf mismatch whose minimal case fails as wrong values, with the same cause
        key, once its special and zero elements are made ordinary (ordinary_variants): that
        wrong value's verdict. One bug then gets one kind whichever values the reduction ended
        on; a mismatch that needs its NaN (a NaN made 0) keeps its kind."""
        if minimal.kind != Kind.NONFINITE_MISMATCH:
            return minimal
        key = self.cause_key(minimal)
        for candidate in ordinary_variants(minimal.case):
            again = self.checker.check(candidate, minimal.route)
            if again.kind == Kind.WRONG_VALUES and self.cause_key(again) == key:
                return again
        return minimal

    def _budget_for(self, verdict) -> float:
        """The reduction's base budget: a hang's covers HANG_BUDGET_TIMEOUTS of its timeouts
        (_hang_limit), since every step that keeps it costs one. Its signature names the features
        its minimal case still holds (signatures.hang_signature): a layout left unsimplified
        splits its bucket."""
        if verdict.kind == Kind.TIMEOUT and self.budget_s:
            hang_budget = max(self.budget_s, HANG_BUDGET_TIMEOUTS * self._hang_limit(verdict))
            return hang_budget if self.cap_s is None else min(hang_budget, self.cap_s)
        return self.budget_s

    def _hang_limit(self, verdict) -> float | None:
        """A hang's candidates run under the limit the hang was found under (the campaign's
        adaptive limit, often well under the checker's timeout): a candidate that keeps hanging
        then costs that, not a whole timeout. None for any other failure."""
        if verdict.kind != Kind.TIMEOUT:
            return None
        return min(self.checker.timeout_s, max(MIN_HANG_LIMIT_S, verdict.t_case or self.checker.timeout_s))

    def _confirming_limit(self, verdict, stop_at: float | None) -> float | None:
        """The limit the minimal case is confirmed under: the checker's (None), but a hang's ends
        by stop_at, and is never shorter than the limit the hang was found under (_Deferred
        where that much time is not left). A 10-minute campaign's hang was confirmed for 69 s
        past its closing share's deadline."""
        if stop_at is None or verdict.kind != Kind.TIMEOUT:
            return None
        left = stop_at - time.time()
        if left < self._hang_limit(verdict):
            raise _Deferred
        return min(self.checker.timeout_s, left)

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


def symptoms(checker: Checker, verdict) -> set:
    """Features read from the failure itself: 'inout' when a mutated input's storage is
    wrong (seen on the input, or on an output that is an in-place op's result), 'unwritten'
    when the route left it as it was (a write lost, not a wrong value)."""
    name = _written_input(verdict.case, verdict.where)
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


def _written_input(case: Case, where) -> str | None:
    """The input a failure at `where` (the judge's Where: input x0, output 1) is seen on: the
    input itself, or the input an output's in-place op wrote (None otherwise)."""
    if where is None or where.place not in ("input", "output"):
        return None
    if where.place == "input":
        return where.key
    ref = case.outputs[where.key]
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
