"""Several independent cases compiled as one program: one compile instead of many.

Inductor's C++ build costs about a second per program whatever the program holds, so
compiling B small cases together as disjoint subgraphs of one program costs little more
than one of them. The batch's outputs and final input storages are split back per case and
each case is judged against its own eager and float64 references.

Verdicts stay per case and identical to one-at-a-time runs: a batch that does not complete
(compile error, crash, timeout) is rerun case by case, and so is every case whose slice
of the batch fails the judge, so a failure's verdict, message and bucket always come from
its own solo run. Only passes are taken from the batch.

    >>> verdicts = check_batch(checker, cases, "inductor")      # one Verdict per case, in order

Inputs travel with their values stored explicitly (the case's own seeds and positions would
not survive the renaming), so every case sees bit for bit its solo inputs.
"""
from __future__ import annotations

import shutil
import time

from torchsim_diff.case import layout, values
from torchsim_diff.judge import oracle
from torchsim_diff.case.graph import Case
from torchsim_diff.results.kinds import Status
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.worker import protocol


def combine(cases: list) -> Case:
    """One Case holding every case as a disjoint subgraph, outputs and inputs in case order.
    Case k's names get the prefix `b{k}_`; its inputs carry their values as data."""
    inputs, nodes, outputs = [], [], []
    for k, case in enumerate(cases):
        prefix = f"b{k}_"
        names = {i["name"] for i in case.inputs} | {n["id"] for n in case.nodes}
        rename = lambda ref: _renamed(ref, names, prefix)   # noqa: E731 - local helper
        data = case.to_dict()
        for spec, tensor in zip(data["inputs"], layout.materialize_all(data)):
            inputs.append({**spec, "name": prefix + spec["name"], "data": values.encode(layout.storage_of(tensor))})
        nodes += [{**n, "id": prefix + n["id"], "args": rename(n["args"])} for n in data["nodes"]]
        outputs += [prefix + o for o in case.outputs]
    return Case.from_dict({"schema": cases[0].schema, "dtype": cases[0].dtype, "inputs": inputs,
                           "nodes": nodes, "outputs": outputs, "values": {"seed": 0}})


def _renamed(ref, names: set, prefix: str):
    if isinstance(ref, str):
        return prefix + ref if ref in names else ref
    if isinstance(ref, list):
        return [_renamed(r, names, prefix) for r in ref]
    return ref


def check_batch(checker, cases: list, route: str, timeout_s: float | None = None) -> list:
    """One Verdict per case, as `checker.check` would give them one at a time (module docstring)."""
    if len(cases) < 2 or checker.repeat > 1:
        return [checker.check(c, route, timeout_s) for c in cases]
    t0 = time.perf_counter()
    reply = _run_combined(checker, cases, route, timeout_s)
    if reply is None or not reply.ok:
        return [checker.check(c, route, timeout_s) for c in cases]
    outputs = [protocol.payload_to_tensor(p) for p in reply.outputs]
    storages = [protocol.payload_to_tensor(p) for p in reply.storages]
    verdicts, o, i = [], 0, 0
    share = RunMetrics(t_compile=_each(reply.metrics.t_compile, len(cases)), t_run=_each(reply.metrics.t_run, len(cases)),
                       batch=len(cases))
    for case in cases:
        n_out, n_in = len(case.outputs), len(case.inputs)
        verdicts.append(_judged(checker, case, route, outputs[o:o + n_out], storages[i:i + n_in], share, timeout_s))
        o, i = o + n_out, i + n_in
    each = (time.perf_counter() - t0) / len(cases)
    for verdict in verdicts:
        if verdict.metrics.batch:
            verdict.t_case = each
    return verdicts


def _run_combined(checker, cases: list, route: str, timeout_s: float | None):
    """The worker's reply for the combined program, or None when the cases cannot be combined."""
    try:
        combined = combine(cases)
    except (ValueError, KeyError):
        return None
    artifact_dir = checker.artifact_dir(route, "batch-" + combined.case_id)
    limit = (timeout_s or checker.timeout_s) * len(cases)
    try:
        return checker.worker(route).run(combined.to_dict(), combined.program_source(), artifact_dir, 1, limit)
    finally:
        shutil.rmtree(artifact_dir, ignore_errors=True)


def _judged(checker, case, route: str, outputs, storages, share: dict, timeout_s):
    """The case's pass from its slice of the batch, or its solo run's verdict."""
    from torchsim_diff.run.checker import Verdict
    try:
        ref = checker.reference(case, case.program_source())
        mismatch, stats = oracle.judge_case(case, ref, outputs, storages)
    except Exception:  # noqa: BLE001 - whatever the slice cannot say, the solo run says
        mismatch, stats = True, None
    if mismatch is not None:
        return checker.check(case, route, timeout_s)
    return Verdict(case, route, Status.PASS, stats=stats, metrics=share.copy())


def _each(seconds: float | None, cases: int) -> float | None:
    return None if seconds is None else seconds / cases
