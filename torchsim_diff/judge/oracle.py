"""The oracle: float64 truth, eager baseline, and the judge applied to a whole case.

Truth is the program run in float64 (integer cases: exact). Baseline is eager in the
case's dtype. The rule itself (tolerances, the rounding allowance carried through the
graph, stable decisions, the mismatch message) lives in the judge's standalone modules
(comparison, rounding_rules, carried_rounding), which bundles copy verbatim; this module runs
the references, maps allowances onto whole input storages and judges every output and storage
of a route's result.

Inputs are compared as whole storages: elements outside a view (guards), elements of
read-only inputs, and elements an in-place op left alone must be bit-for-bit unchanged.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from torchsim_diff.case import layout
from torchsim_diff.judge import carried_rounding, comparison
from torchsim_diff.judge.comparison import Mismatch, Stats, Where, same_bits
from torchsim_diff.results.kinds import Kind


@dataclasses.dataclass
class Reference:
    """Eager (case dtype) and truth (float64) results of one case, plus initial storages
    and the judge's allowances (per output, and per input storage element)."""

    outputs: list
    truth_outputs: list
    storages: list
    truth_storages: list
    initial_storages: list
    covered: list
    output_sensitivity: list
    storage_sensitivity: list
    output_carried: list = dataclasses.field(default_factory=list)
    storage_carried: list = dataclasses.field(default_factory=list)
    output_unstable: list = dataclasses.field(default_factory=list)
    carried_by_op: dict = dataclasses.field(default_factory=dict)
    output_overflow: list = dataclasses.field(default_factory=list)    # any non-finite passes here
    storage_overflow: list = dataclasses.field(default_factory=list)


def run_program(program, inputs):
    outputs = program(*inputs)
    return tuple(outputs), [layout.storage_of(t).clone() for t in inputs]


def reference(case, program) -> Reference:
    """Run `program` eagerly in the case dtype and in float64, and ask the judge for the
    allowances. Exceptions propagate: eager rejecting a case means the case is invalid
    (a generator bug)."""
    data = case.to_dict()
    inputs = layout.materialize_all(data)
    initial = [layout.storage_of(t).clone() for t in inputs]
    outputs, storages = run_program(program, inputs)
    covered = [layout.covered_mask(i["shape"], i["layout"]["strides"], i["layout"]["offset"],
                                   i["layout"]["storage_size"]) for i in case.inputs]
    dtype = layout.dtype_of(case.dtype)
    if dtype.is_floating_point:
        truth_outputs, truth_storages = run_program(program, layout.materialize_all(data, torch.float64))
    else:
        truth_outputs, truth_storages = outputs, storages
    views = layout.materialize_all(data, torch.float64 if dtype.is_floating_point else None)
    allowance = carried_rounding.carried(program, views, dtype, seed=int(case.values.get("seed", 0)) + 7)
    return Reference([o.detach().clone() for o in outputs], [o.detach() for o in truth_outputs],
                     storages, truth_storages, initial, covered, allowance.sensitivity,
                     _on_storages(views, allowance.input_sensitivity, truth_storages), allowance.outputs,
                     _on_storages(views, allowance.inputs, truth_storages), allowance.unstable, allowance.by_op,
                     allowance.overflow, [m > 0 for m in _on_storages(views, allowance.input_overflow, truth_storages)])


def _on_storages(views, per_view, storages):
    """Per-view allowances placed at their storage positions (zero elsewhere)."""
    placed = []
    for view, allowance, storage in zip(views, per_view, storages):
        moved = torch.zeros(storage.shape, dtype=torch.float64)
        if not layout.is_overlapping(list(view.shape), list(view.stride())):
            moved.as_strided(view.shape, view.stride(), view.storage_offset()).copy_(allowance)
        placed.append(moved)
    return placed


def without_carried(ref: Reference) -> Reference:
    """The same references judged by the rule before the judge carried rounding through the
    graph (no carried allowance, every discrete element judged): for before/after figures."""
    return dataclasses.replace(ref, output_carried=[], storage_carried=[], output_unstable=[],
                               output_overflow=[], storage_overflow=[])


def judge_case(case, ref: Reference, outputs, storages) -> tuple:
    """(Mismatch or None, Stats) for a route's outputs and final input storages: the first
    failing output or storage, its kind a `Kind`, with the op that wrote it."""
    stats = Stats(carried_by_op=dict(ref.carried_by_op))
    if len(outputs) != len(ref.outputs):
        return Mismatch(Kind.SHAPE_MISMATCH, "outputs",
                        f"route returned {len(outputs)} outputs, eager {len(ref.outputs)}"), stats
    producers = {n["id"]: n["op"] for n in case.nodes}
    for i, (got, want, truth) in enumerate(zip(outputs, ref.outputs, ref.truth_outputs)):
        found, figures = comparison.compare(got, want, truth, where=Where.output(i),
                                            carried=_at(ref.output_carried, i), sensitivity=ref.output_sensitivity[i],
                                            unstable=_at(ref.output_unstable, i), overflow=_at(ref.output_overflow, i))
        stats.merge(figures)
        if found:
            return Mismatch(Kind(found.kind), found.where, found.message, producers.get(case.outputs[i])), stats
    for i, spec in enumerate(case.inputs):
        found = _check_storage(case, i, spec, ref, storages[i], stats)
        if found:
            return found, stats
    return None, stats


def _at(items, i):
    return items[i] if i < len(items) else None


def compare_values(got, want, truth, where: Where = Where("tensor"), sensitivity=None, carried=None, overflow=None):
    """Stats when `got` passes against eager `want` and float64 `truth`, else
    (Kind, message): the judge's comparison of one tensor."""
    found, stats = comparison.compare(got, want, truth, where=where, carried=carried, sensitivity=sensitivity,
                                      overflow=overflow)
    return stats if found is None else (Kind(found.kind), found.message)


def _check_storage(case, i, spec, ref: Reference, got, stats):
    where = Where.input(spec["name"])
    init, want, truth = ref.initial_storages[i], ref.storages[i], ref.truth_storages[i]
    if got.shape != init.shape or got.dtype != init.dtype:
        return Mismatch(Kind.SHAPE_MISMATCH, where, f"{where}: storage came back as {got.dtype}{list(got.shape)}")
    covered = ref.covered[i]
    guard_changed = ~covered & ~same_bits(got, init)
    if guard_changed.any():
        positions = guard_changed.nonzero().reshape(-1)[:8].tolist()
        return Mismatch(Kind.GUARD_VIOLATION, where,
                        f"{where}: route wrote {int(guard_changed.sum())} storage elements outside the view "
                        f"(storage positions {positions}, view offset {spec['layout']['offset']}, "
                        f"strides {spec['layout']['strides']})", _writer(case, spec["name"]))
    if not spec.get("mutated"):
        changed = covered & ~same_bits(got, init)
        if changed.any():
            return Mismatch(Kind.GUARD_VIOLATION, where,
                            f"{where}: route changed {int(changed.sum())} elements of a read-only input")
        return None
    carried, overflow = _at(ref.storage_carried, i), _at(ref.storage_overflow, i)
    return _check_mutated(case, spec, where, got[covered], want[covered], truth[covered],
                          same_bits(want, init)[covered], stats, ref.storage_sensitivity[i][covered],
                          None if carried is None else carried[covered], None if overflow is None else overflow[covered])


def _check_mutated(case, spec, where, got, want, truth, untouched, stats, sensitivity, carried, overflow):
    op = _writer(case, spec["name"])
    failure = compare_values(got, want, truth, where, sensitivity, carried, overflow)
    if isinstance(failure, Stats):
        stats.merge(failure)
        return None
    kind, message = failure
    strict = compare_values(got[~untouched], want[~untouched], truth[~untouched], where, sensitivity[~untouched],
                            None if carried is None else carried[~untouched],
                            None if overflow is None else overflow[~untouched])
    if isinstance(strict, Stats):
        count = int((~same_bits(got, want) & untouched).sum())
        return Mismatch(Kind.GUARD_VIOLATION, where,
                        f"{where}: route changed {count} elements the in-place op must leave alone\n{message}", op)
    return Mismatch(kind, where, message, op)


def _writer(case, name: str):
    """The last op that writes into input `name` (the diverging op of a storage mismatch)."""
    ops = [n["op"] for n in case.nodes if n["args"] and n["args"][0] == name and n["op"].endswith("_")]
    return ops[-1] if ops else None


def finite_or_none(x: float | None):
    return None if x is None or not math.isfinite(x) else x
