"""Per-op error figures: each op judged by its own output, not by the case's worst one.

A case's error figures are its worst output's. Charged to every op in the case, one
ill-conditioned op (a prod over 64 broadcast values, 1e9 off in float32 like eager) makes
a harmless tanh beside it look 1e9 off. So a case with several ops runs once more on the
same route with every intermediate as an output (classify.intermediates_as_outputs), and
each node's value is compared with its own float64 value by the judge. A single-op case's
figures are already its op's own.

The extra runs cost route time, so `OpFigures` spends at most EXTRA_SHARE of the time the
route's cases took on them; a case it leaves out gets `op_errors: null` and counts in the
tolerance table only when it has a single op.

Records carry `op_errors`: {op: {max_abs_err, max_rel_err, max_ulp, err_ratio,
atol_needed, rtol_needed}}, the worst over the nodes of that op; an op whose own value
already broke the rule also has "diverges": true. In-place ops are judged through the input
storages, not as intermediates, so they have no entry of their own.
"""
from __future__ import annotations

import shutil
import time

from torchsim_diff.results.kinds import Status

EXTRA_SHARE = 0.25
FIELDS = ("max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed")


class OpFigures:
    """Per-op figures for verdicts, within a share of the route time (see the module docstring)."""

    def __init__(self, share: float = EXTRA_SHARE):
        self.share = share
        self.case_s = 0.0
        self.extra_s = 0.0

    def for_verdict(self, checker, verdict, timeout_s: float | None = None) -> dict | None:
        """op -> figures for a passing or wrong_values verdict, else None."""
        self.case_s += verdict.t_case
        if verdict.status not in (Status.PASS, Status.FAIL) or (verdict.kind is not None
                                                               and not verdict.kind.tolerance_figures):
            return None
        ops = set(verdict.case.ops)
        if len(ops) == 1:
            return {op: _as_dict(verdict.stats) for op in ops}
        if self.extra_s > self.share * self.case_s:
            return None
        t0 = time.perf_counter()
        try:
            return measure(checker, verdict.case, verdict.route, timeout_s)
        finally:
            self.extra_s += time.perf_counter() - t0


def measure(checker, case, route: str, timeout_s: float | None = None) -> dict | None:
    """Run `case` with every intermediate as an output on `route`; op -> its own figures.
    None when that run does not complete (the route rejects the changed graph, a crash)."""
    from torchsim_diff.judge import comparison
    from torchsim_diff.triage.signatures import intermediates_as_outputs
    from torchsim_diff.case.graph import CaseError
    from torchsim_diff.worker import protocol
    try:
        widened, refs = intermediates_as_outputs(case)
        source = widened.program_source()
        ref = checker.reference(widened, source)
    except (CaseError, RuntimeError):      # eager refuses to return an aliasing intermediate
        return None
    artifact_dir = checker.artifact_dir(route, f"{case.case_id}-ops")
    reply = checker.worker(route).run(widened.to_dict(), source, artifact_dir, 1, timeout_s)
    shutil.rmtree(artifact_dir, ignore_errors=True)
    if not reply.ok:
        return None
    op_of = {n["id"]: n["op"] for n in case.nodes}
    figures: dict = {}
    for k, payload in enumerate(reply.outputs):
        got = protocol.payload_to_tensor(payload)
        want, truth = ref.outputs[k], ref.truth_outputs[k]
        if got.shape != want.shape or got.dtype != want.dtype:
            continue
        mismatch, stats = comparison.compare(got, want, truth, where=f"output {k}", carried=_at(ref.output_carried, k),
                                        sensitivity=ref.output_sensitivity[k], unstable=_at(ref.output_unstable, k),
                                        overflow=_at(ref.output_overflow, k))
        _merge(figures, op_of[refs[k]], {**_as_dict(stats), **({"diverges": True} if mismatch else {})})
    return figures


def _at(items: list, k: int):
    return items[k] if k < len(items) else None


def _as_dict(stats) -> dict:
    from torchsim_diff.judge.oracle import finite_or_none
    return {name: finite_or_none(getattr(stats, name)) for name in FIELDS}


def _merge(figures: dict, op: str, new: dict) -> None:
    old = figures.setdefault(op, {})
    for name, value in new.items():
        if value is None:
            continue
        if name == "diverges":
            old[name] = True
        else:
            old[name] = max(value, old.get(name) or 0.0)
