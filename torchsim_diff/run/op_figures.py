"""Per-op error figures: each op judged by its own output, not by the case's worst one.

A case's error figures are its worst output's. Charged to every op in the case, one
ill-conditioned op (a prod over 64 broadcast values, 1e9 off in float32 like eager) makes
a harmless tanh beside it look 1e9 off. So a case with several nodes runs once more on the
same route with every intermediate as an output (case.transforms.intermediates_as_outputs), and
each node gets two sets of figures:

- carried (`op_errors`): its value against the program's float64 value through the whole
  graph up to it, by the judge's rule; an error upstream is charged to it too;
- local (`op_local_errors`, judge.local_error): its value against the float64 op applied to
  the route's own values of its inputs: what the op itself did. The tolerance tables show
  these; their `err_ratio` is Stats.err_over_eager (eager's error floored at one ulp).

A single-node case's figures are both at once: its inputs are the case's.

The extra runs cost route time, so `OpFigures` spends at most EXTRA_SHARE of the time the
route's cases took on them; a case it leaves out gets `op_local_errors: null`, and
`op_errors: null` unless it has a single op (its case figures are then that op's carried ones).

Each is {op: {max_abs_err, max_rel_err, max_ulp, err_ratio, atol_needed, rtol_needed}} (local
figures add eager_atol_needed: the atol eager's own result needs), the worst over the nodes of
that op; an op whose carried value already broke the rule also has
"diverges": true. In-place ops are judged through the input storages, not as intermediates,
so they have no entry of their own.
"""
from __future__ import annotations

import dataclasses
import shutil
import time

from torchsim_diff.results.kinds import Status

EXTRA_SHARE = 0.25
FIELDS = ("max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed")


@dataclasses.dataclass(frozen=True)
class OpErrors:
    """A case's per-op figures (op -> figures dict, None: not measured), as record fields."""

    carried: dict | None = None
    local: dict | None = None

    def fields(self) -> dict:
        return {"op_errors": self.carried, "op_local_errors": self.local}


class OpFigures:
    """Per-op figures for verdicts, within a share of the route time (see the module docstring)."""

    def __init__(self, share: float = EXTRA_SHARE):
        self.share = share
        self.case_s = 0.0
        self.extra_s = 0.0

    def for_verdict(self, checker, verdict, timeout_s: float | None = None) -> OpErrors:
        """OpErrors of a passing or wrong_values verdict (nothing measured for others)."""
        self.case_s += verdict.t_case
        if verdict.status not in (Status.PASS, Status.FAIL) or (verdict.kind is not None
                                                               and not verdict.kind.tolerance_figures):
            return OpErrors()
        case, stats = verdict.case, verdict.stats
        if len(case.nodes) == 1:
            (node,) = case.nodes
            return OpErrors({node["op"]: _as_dict(stats)}, {node["op"]: _local_dict(stats)})
        if self.extra_s > self.share * self.case_s:
            return OpErrors({op: _as_dict(stats) for op in case.ops} if len(case.ops) == 1 else None)
        t0 = time.perf_counter()
        try:
            return measure(checker, verdict.case, verdict.route, timeout_s)
        finally:
            self.extra_s += time.perf_counter() - t0


def measure(checker, case, route: str, timeout_s: float | None = None) -> OpErrors:
    """Run `case` with every intermediate as an output on `route`: each op's carried and local
    figures. Nothing measured when that run does not complete (the route rejects the changed
    graph, a crash)."""
    from torchsim_diff.case.transforms import intermediates_as_outputs
    from torchsim_diff.case.graph import CaseError
    from torchsim_diff.worker import protocol
    try:
        widened, refs = intermediates_as_outputs(case)
        source = widened.program_source()
        ref = checker.reference(widened, source)
    except (CaseError, RuntimeError):      # eager refuses to return an aliasing intermediate
        return OpErrors()
    artifact_dir = checker.artifact_dir(route, f"{case.case_id}-ops")
    reply = checker.worker(route).run(widened.to_dict(), source, artifact_dir, 1, timeout_s)
    shutil.rmtree(artifact_dir, ignore_errors=True)
    if not reply.ok:
        return OpErrors()
    values = dict(zip(refs, (protocol.payload_to_tensor(p) for p in reply.outputs)))
    return OpErrors(carried_figures(case, ref, values, refs), local_figures(case, values))


def local_figures(case, values: dict) -> dict:
    """op -> the worst local figures over its nodes (judge.local_error), from the route's
    values of the nodes (node id -> tensor)."""
    from torchsim_diff.judge.local_error import local_stats
    op_of = {n["id"]: n["op"] for n in case.nodes}
    figures: dict = {}
    for node, stats in local_stats(case, values).items():
        _merge(figures, op_of[node], _local_dict(stats))
    return figures


def carried_figures(case, ref, values: dict, refs: list) -> dict:
    """op -> the worst carried figures over its nodes: each node's route value (`values`)
    against the widened case's references `ref` (output k is node refs[k])."""
    from torchsim_diff.judge import comparison
    op_of = {n["id"]: n["op"] for n in case.nodes}
    figures: dict = {}
    for k, node in enumerate(refs):
        got = values[node]
        want, truth = ref.outputs[k], ref.truth_outputs[k]
        if got.shape != want.shape or got.dtype != want.dtype:
            continue
        mismatch, stats = comparison.compare(got, want, truth, where=comparison.Where.output(k),
                                             carried=_at(ref.output_carried, k), sensitivity=ref.output_sensitivity[k],
                                             unstable=_at(ref.output_unstable, k), overflow=_at(ref.output_overflow, k))
        _merge(figures, op_of[node], {**_as_dict(stats), **({"diverges": True} if mismatch else {})})
    return figures


def _at(items: list, k: int):
    return items[k] if k < len(items) else None


def _as_dict(stats) -> dict:
    from torchsim_diff.judge.oracle import finite_or_none
    return {name: finite_or_none(getattr(stats, name)) for name in FIELDS}


def _local_dict(stats) -> dict:
    """Local figures: err_ratio is err_over_eager (eager's error floored at one ulp), and the
    atol eager itself needs on the same inputs beside the route's."""
    from torchsim_diff.judge.oracle import finite_or_none
    return {**_as_dict(stats), "err_ratio": finite_or_none(stats.err_over_eager),
            "eager_atol_needed": finite_or_none(stats.eager_atol_needed)}


def _merge(figures: dict, op: str, new: dict) -> None:
    old = figures.setdefault(op, {})
    for name, value in new.items():
        if value is None:
            continue
        if name == "diverges":
            old[name] = True
        else:
            old[name] = max(value, old.get(name) or 0.0)
