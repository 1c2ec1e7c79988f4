"""Reduce, then bucket, at a pytest session's end: each process (every xdist worker, in
parallel, on its warm route workers) reduces its own new failures into a refined-<worker>.jsonl
(refine_verdicts); the controller reads them back onto the records (apply_refinements)."""
from __future__ import annotations

import json
import os
import time

from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import DEFERRED, NOT_REACHED, record_key, refinement_key, refinement_line
from torchsim_diff.run.checker import Checker
from torchsim_diff.triage.reduce import DEFAULT_BUDGET_S
from torchsim_diff.triage.refine import MIN_REDUCE_S, ReduceThenBucket, raw_key

REFINED_PREFIX = "refined-"


def refine_verdicts(checker: Checker, verdicts, out_path: str, *, budget_s: float = DEFAULT_BUDGET_S,
                    deadline: float | None = None, shared_path: str | None = None) -> int:
    """Reduce, then bucket, a pytest process's failing verdicts at session end (each xdist
    worker its own, in parallel, on its warm workers); one JSON line per verdict into
    `out_path` (REFINED_PREFIX + worker + .jsonl), read back by apply_refinements. With a
    `deadline` (time.time(); a campaign's), a failure unlike those before it goes first (one
    like them takes their reduction for free) and a hang last (_in_reduction_order), each
    reduction's base is its part of the time left (_part_of_time_left) and none goes past the
    deadline: one the time does not reach or cuts stays as found, never half reduced
    (reduce_error says why). shared_path: the run's SharedReductions, so that what another
    process reduced first is not reduced here again."""
    verdicts = _in_reduction_order(list(verdicts)) if deadline is not None else list(verdicts)
    lines = []
    for k, verdict in enumerate(verdicts):
        share = budget_s if deadline is None else min(budget_s, _part_of_time_left(deadline, len(verdicts) - k))
        if share < MIN_REDUCE_S:
            fields = dict(reduce_error=NOT_REACHED) if verdict.failed and verdict.kind.reducible else {}
        else:
            fields = ReduceThenBucket.of_checker(checker, budget_s=share, cap_s=None if deadline is None else share,
                                                 shared_path=shared_path).refine(verdict, stop_at=deadline)
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


def _in_reduction_order(verdicts: list) -> list:
    """The verdicts in the order the closing time reduces them: the first failure of each raw
    signature (the failing op, kind and place), then the first of each raw_key left (a failure
    like one before it takes that one's reduction for free), then the others, each group in
    order, and hangs last: every candidate of a hang that keeps hanging costs a time limit, and
    one hang reduced first took a 10-minute campaign's whole closing share from a worker's other
    failures. Where the time reaches only some, it reaches as many kinds of failure as it can."""
    signatures, keys, rank = set(), set(), {}
    for k, verdict in enumerate(verdicts):
        reducible = verdict.failed and verdict.kind.reducible
        key = raw_key(verdict) if reducible else None
        signature = verdict.signature if reducible else None
        rank[k] = 0 if signature not in signatures else 1 if key not in keys else 2
        signatures.add(signature)
        keys.add(key)
    order = sorted(range(len(verdicts)), key=lambda k: (verdicts[k].kind == Kind.TIMEOUT, rank[k]))   # stable
    return [verdicts[k] for k in order]


def apply_refinements(records: list, folder: str) -> list:
    """`records` (results.record.Record) with the refined bucket (and reduced case, first op,
    trigger) of every failure the session's processes reduced (files written by refine_verdicts)."""
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
