"""Simulator time limits, crash records and the fd-level log capture, on real processes."""
import os
import stat
import subprocess
import sys

import pytest

from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.torchsim import log_capture, subprocess_limits
from torchsim_diff.routes.torchsim.failure_text import classify


def _tool(tmp_path, name, body):
    """An executable called `name` (the route watches simulators by their command name)."""
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_hung_simulator_is_stopped_and_classified_as_timeout(tmp_path, capfd):
    spike = _tool(tmp_path, "spike", "sleep 30")
    with subprocess_limits.limited_subprocesses({"spike": 0.5}) as ends:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([spike, "--isa", "rv64gcv", "pk", "kernel.elf"], timeout=None)
    assert [(e.tool, e.returncode) for e in ends] == [("spike", None)]
    verdict = classify(capfd.readouterr().err)
    assert (verdict.kind, verdict.stage) == (Kind.TIMEOUT, "spike")


def test_simulator_killed_by_a_signal_is_a_crash_with_its_signal(tmp_path, capfd):
    togsim = _tool(tmp_path, "togsim", "kill -SEGV $$")
    with subprocess_limits.limited_subprocesses() as ends:
        done = subprocess.run([togsim, "--config", "m.yml"])
    assert done.returncode == -11 and ends[0].tool == "togsim"
    err = capfd.readouterr().err
    assert "SIGSEGV" in err
    verdict = classify(err)
    assert (verdict.kind, verdict.stage, verdict.detail) == (Kind.CRASH, "togsim", "exit code -11")


def test_check_call_failures_are_recorded(tmp_path):
    gem5 = _tool(tmp_path, "gem5.opt", "exit 3")
    with subprocess_limits.limited_subprocesses() as ends:
        with pytest.raises(subprocess.CalledProcessError):
            subprocess.check_call([gem5])
    assert [(e.tool, e.returncode) for e in ends] == [("gem5", 3)]


def test_other_commands_are_left_alone_and_patch_is_undone(tmp_path):
    original = subprocess.run
    seen = []
    with subprocess_limits.limited_subprocesses({"spike": 0.01}, around=lambda *a: seen.append(a)) as ends:
        subprocess.run(["sleep", "0.2"])            # not a simulator: no limit applied
    assert ends == [] and seen == [] and subprocess.run is original


def test_around_hook_sees_spike_before_and_after(tmp_path):
    spike = _tool(tmp_path, "spike", "exit 0")
    seen = []
    with subprocess_limits.limited_subprocesses(around=lambda tool, args, phase: seen.append((tool, phase))):
        subprocess.run([spike])
    assert seen == [("spike", "before"), ("spike", "after")]


CAPTURE_SCRIPT = """
import logging, os, subprocess, sys
from torchsim_diff.routes.torchsim import log_capture
logger = logging.getLogger("pytorchsim-like")
logger.addHandler(logging.StreamHandler())   # bound to sys.stderr, like PyTorchSim's
with log_capture.captured_output(sys.argv[1]):
    print("[Spike] Running Spike simulator")
    logger.warning("[TOGSim] TOGSim simulation started")
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child says hi\\n')"])
    os.system("echo shell says hi")
print("after capture")
"""


def test_capture_holds_logging_print_and_child_output(tmp_path):
    """Run where the worker runs: a process whose stdout/stderr are its real descriptors."""
    path = str(tmp_path / "case.log")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", CAPTURE_SCRIPT, path], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    text = log_capture.read_text(path)
    for line in ("[Spike] Running", "[TOGSim] TOGSim simulation", "child says hi", "shell says hi"):
        assert line in text
    assert "after capture" in done.stdout and "after capture" not in text
    assert f"goes to {path}" in done.stderr      # a crash inside the block still points here
