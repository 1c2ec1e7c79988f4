"""repro.py for a Triton-to-linalg adapter bug: the failing kernel's TTIR through triton-adapter-opt.

A `triton-spike` compile error at the adapter stage needs neither torch nor our harness to
reproduce: the bundle ships the kernel as the route fed it to the adapter (kernel.ttir, after
the route's TTIR fix-ups) and a script that runs the adapter's pass list on it, as the
adapter project's maintainers would. It exits 1 while the adapter fails (non-zero exit,
abort, or a Triton op left unconverted in its output), 0 once it converts the kernel, and 2
when triton-adapter-opt is missing.
"""
from __future__ import annotations

import os
import re

from torchsim_diff.report.script_text import check_script, docstring

KERNEL_FILE = "kernel.ttir"
REPLAY_TIMEOUT_S = 600      # one replay, not a campaign: Inductor, TTIR and the adapter on a loaded machine


def is_adapter_bug(record) -> bool:
    """Whether `record` (results.record.Record) is a triton-spike compile error in the adapter."""
    return (record.route == "triton-spike" and record.kind == "compile_error"
            and (record.message or "").startswith("adapter:"))


def failing_kernel(artifact_dir: str | None) -> str | None:
    """The TTIR the adapter stopped on: the kernel folder with a fixed TTIR but no linalg output."""
    if not artifact_dir:
        return None
    stopped = []
    for root, _dirs, files in os.walk(artifact_dir):
        if "kernel.fixed.ttir" in files and "kernel.linalg.mlir" not in files:
            stopped.append(os.path.join(root, "kernel.fixed.ttir"))
    return sorted(stopped)[0] if stopped else None


def replay_artifacts(case, out_dir: str, *, stage: str | None = "adapter", route: str = "triton-spike") -> str | None:
    """Run `case` on `route` once and return its artifact folder: None if it did not fail
    there (at `stage`, when one is named)."""
    from torchsim_diff.run.checker import Checker
    with Checker(out_dir=out_dir, timeout_s=REPLAY_TIMEOUT_S) as checker:
        verdict = checker.check(case, route)
    failed = verdict.stage == stage if stage else verdict.kind.is_bug
    return verdict.artifact_dir if failed else None


def write_kernel(source_ttir: str, bundle: str) -> None:
    """The kernel as kernel.ttir, its source locations reduced to file names (the folders were
    the run's temporary ones)."""
    with open(source_ttir, encoding="utf-8") as handle:
        text = handle.read()
    with open(os.path.join(bundle, KERNEL_FILE), "w", encoding="utf-8") as handle:
        handle.write(without_folders(text))


ORIGINAL_FILE = "kernel.original.ttir"


def reduce_kernel(bundle: str) -> tuple:
    """Reduce the bundle's kernel.ttir at IR level (report.ttir_reduce) where the adapter is at
    hand, keeping the kernel as it was beside it; (lines before, lines after), equal when
    nothing was removed or no adapter runs here."""
    from torchsim_diff.report.ttir_reduce import reduce_ttir
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, adapter_path
    path = os.path.join(bundle, KERNEL_FILE)
    with open(path, encoding="utf-8") as handle:
        original = handle.read()
    tool = adapter_path()
    reduced = reduce_ttir(original, tool, ADAPTER_PASSES) if tool else original
    if reduced != original:
        os.replace(path, os.path.join(bundle, ORIGINAL_FILE))
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(reduced)
    return len(original.splitlines()), len(reduced.splitlines())


def without_folders(ttir: str) -> str:
    """`loc("/tmp/x/k.py":3:1)` -> `loc("k.py":3:1)`: locations name the file, not where it was."""
    return _LOCATION_PATH.sub(r'loc("\1":', ttir)


_LOCATION_PATH = re.compile(r'loc\("[^"]*[/\\]([^"/\\]+)":')


def render_script(head: str) -> str:
    """repro.py: `head` is the docstring's lines (title, note, divergence) without quotes."""
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES
    passes = ",\n          ".join(repr(p) for p in ADAPTER_PASSES)
    doc = f"{head}\nExit 1: reproduces, 0: fixed, 2: triton-adapter-opt missing."
    return check_script(f'''{docstring(doc)}
import os
import re
import shutil
import subprocess
import sys

# triton-ascend 3.2.0's ttir_to_linalg pass list, its CPU path
PASSES = [{passes}]
tool = os.environ.get("TRITON_ADAPTER_OPT") or shutil.which("triton-adapter-opt")
if not tool:
    sys.exit(print("cannot run here: triton-adapter-opt not found (PATH or TRITON_ADAPTER_OPT)") or 2)
kernel = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{KERNEL_FILE}")  # Inductor's kernel as TTIR
done = subprocess.run([tool, kernel, *PASSES], capture_output=True, text=True)
why = [line for line in done.stderr.splitlines() if "error:" in line or "Assertion" in line]
if done.returncode:
    why = why or done.stderr.splitlines()[-5:]
    sys.exit(print(f"REPRODUCES: triton-adapter-opt exited {{done.returncode}}:", *why[:4], sep="\\n") or 1)
left = set(re.findall(r'^\\s*(?:%[\\w#:]+(?:, %[\\w#:]+)* = )?"?(tt\\.\\w+)', done.stdout, re.M)) - {{"tt.reduce.return"}}
if left:
    sys.exit(print(f"REPRODUCES: Triton op(s) {{', '.join(sorted(left))}} left unconverted in the output") or 1)
print("FIXED: triton-adapter-opt converted the kernel")
''', doc)
