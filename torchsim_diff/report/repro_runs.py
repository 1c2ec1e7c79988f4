"""Running a bundle's repro.py as a maintainer runs it, quoting its output, and keeping only the
triton shims a bug needs."""
from __future__ import annotations

import os
import subprocess
import sys

from torchsim_diff.report.repro_script import REQUIRED_SHIMS, SHIM_CALLS, SHIMS_FILE, shims_source


def minimise_shims(bundle: str, python: str = sys.executable, timeout_s: float = 300) -> list:
    """The shim calls repro.py needs for its outcome (exit status and verdict line): first
    without every optional shim at once, else dropping one at a time, each in a fresh process."""
    baseline = _outcome(bundle, python, timeout_s)
    if _keeps(bundle, list(REQUIRED_SHIMS), baseline, python, timeout_s):
        return list(REQUIRED_SHIMS)
    calls = list(SHIM_CALLS)
    for call in SHIM_CALLS:
        trial = [c for c in calls if c != call]
        if call not in REQUIRED_SHIMS and _keeps(bundle, trial, baseline, python, timeout_s):
            calls = trial
    write_text(os.path.join(bundle, SHIMS_FILE), shims_source(calls))
    return calls


def _keeps(bundle: str, calls: list, baseline: tuple, python: str, timeout_s: float) -> bool:
    write_text(os.path.join(bundle, SHIMS_FILE), shims_source(calls))
    return _outcome(bundle, python, timeout_s) == baseline


def _outcome(bundle: str, python: str, timeout_s: float) -> tuple:
    """(exit status, normalised verdict line) of one run of repro.py."""
    from torchsim_diff.buckets.signatures import normalise
    status, out, _err = run_repro(bundle, python, timeout_s)
    if status == TIMED_OUT:
        return (TIMED_OUT, "")
    verdict = [ln for ln in out.splitlines() if ln.startswith(("REPRODUCES", "FIXED", "cannot run"))]
    return status, normalise(verdict[-1] if verdict else "")


TIMED_OUT = "timeout"


def run_repro(bundle: str, python: str = sys.executable, timeout_s: float = 300, started=None,
              script: str = "repro.py") -> tuple:
    """(exit status or TIMED_OUT, stdout, stderr) of one run of the bundle's `script` in a
    fresh process, as a maintainer runs it. started: called with the process once it runs
    (so that an interrupt can kill it); a run past `timeout_s` is killed. A `python` other than
    this process's (the torch-only venv, plain_script.torch_only_python) runs without PYTHONPATH
    and PYTHONHOME: a checkout of torchsim-diff named there would let a repro.py that imports it
    by mistake pass as one that needs torch alone."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}     # a bundle ships no __pycache__ of its own
    if python != sys.executable:
        env = {name: value for name, value in env.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    with subprocess.Popen([python, script], cwd=bundle, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, env=env) as proc:
        if started is not None:
            started(proc)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return TIMED_OUT, "", ""
    return proc.returncode, out, err


def write_text(path: str, text: str) -> None:
    """Write `path` whole through a temporary file and a rename: a symbolic link at `path` is
    replaced, never followed (files.replace_text)."""
    from torchsim_diff.files import replace_text
    replace_text(path, text)
