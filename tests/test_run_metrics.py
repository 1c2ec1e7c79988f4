"""A run's metrics are typed (results.run_metrics.RunMetrics): read by attribute everywhere,
plain values on the worker pipe."""
import os
import pickle
import re

import torchsim_diff
from torchsim_diff.results.run_metrics import RunMetrics
from torchsim_diff.worker.protocol import Outcome

KEYED = re.compile(r"metrics(?:\[|\.get\(|\.setdefault\(|\.update\(|\.pop\()")


def test_metrics_cross_the_worker_pipe_as_plain_values_and_come_back_typed():
    sent = Outcome.failed("crash", "run", "m", metrics=RunMetrics(
        t_compile=1.5, stage_s={"clang": 0.25}, host_parts=["mm ran on the host"], killed_by="SIGKILL"))
    wire = sent.to_wire()
    assert type(wire["metrics"]) is dict                        # the pipe carries no class of ours
    back = Outcome.from_wire(pickle.loads(pickle.dumps(wire)))
    assert back.metrics == sent.metrics and isinstance(back.metrics, RunMetrics)


def test_a_metric_this_version_does_not_know_is_left_out():
    metrics = RunMetrics.from_wire({"t_run": 2.0, "from_a_newer_worker": 1})
    assert metrics.t_run == 2.0 and not hasattr(metrics, "from_a_newer_worker")


def test_stage_times_add_up_and_the_harness_time_leaves_out_the_route_start_up_and_localising():
    metrics = RunMetrics(t_compile=1.0, t_run=0.5, t_start=0.25, t_diagnose=0.25)
    metrics.add_stage("clang", 0.5)
    metrics.add_stage("clang", 0.25)
    assert metrics.stage_s == {"clang": 0.75} and metrics.outside_harness_s() == 2.0


def test_no_module_reads_metrics_by_string_key():
    root = os.path.dirname(torchsim_diff.__file__)
    found = []
    for folder, _dirs, names in os.walk(root):
        for name in sorted(n for n in names if n.endswith(".py") and n != "run_metrics.py"):
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                found += [f"{name}:{i}: {line.strip()}" for i, line in enumerate(handle, 1) if KEYED.search(line)]
    assert not found


def test_the_scan_finds_a_metric_read_by_key():
    assert KEYED.search('if reply.metrics.get("killed_by"):') and KEYED.search('ctx.metrics["cost"] = 1')
    assert not KEYED.search("ctx.metrics.cost = 1")
