"""The bundle of an MLIR (llvm-project) bug: a `.mlir` file and the `mlir-opt` command that shows it.

LLVM's maintainers ask for an input in their own IR and the command, with the expected result,
and nothing else to install. A cause of project llvm may carry its reproducer as data
(cause.json `mlir_opt`, the .mlir beside it):

    "mlir_opt": {"file": "repro.mlir", "pipeline": "builtin.module(canonicalize)",
                 "run": false, "shows": "0x7FC00000", "expected": "what it gives once fixed"}

The command is `mlir-opt-19 --pass-pipeline=<pipeline> <file>`; with `run`, its output is then
lowered to LLVM and run by mlir-cpu-runner (RUN_PIPELINE). The bug reproduces while the output
holds `shows`. repro.py runs the commands with the Python standard library alone.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess

from torchsim_diff.buckets.causes import BadMlirRepro, MlirRepro

TOOLS = ("mlir-opt-19", "mlir-cpu-runner-19")
RUN_PIPELINE = ("--one-shot-bufferize=bufferize-function-boundaries --convert-linalg-to-loops --convert-scf-to-cf "
                "--expand-strided-metadata --finalize-memref-to-llvm --convert-func-to-llvm --convert-arith-to-llvm "
                "--convert-cf-to-llvm --reconcile-unrealized-casts")
RUNNER_LIBS = "/usr/lib/llvm-19/lib/libmlir_runner_utils.so.19.1,/usr/lib/llvm-19/lib/libmlir_c_runner_utils.so.19.1"
def commands(repro: MlirRepro) -> str:
    """The shell commands ISSUE.md shows."""
    opt = f"mlir-opt-19 --pass-pipeline='{repro.pipeline}' {repro.file}"
    if not repro.run:
        return opt
    return f"{opt} \\\n  | mlir-opt-19 {RUN_PIPELINE} \\\n  | mlir-cpu-runner-19 -e main -entry-point-result=void " \
           f"-shared-libs={RUNNER_LIBS}"


def render_script(repro: MlirRepro, head: str) -> str:
    """repro.py: the commands through subprocess; exit 1 while the output shows the bug."""
    from torchsim_diff.report.script_text import check_script, docstring
    doc = f"{head}\nExit 1: reproduces, 0: fixed, 2: mlir-opt-19 (or mlir-cpu-runner-19) missing or failing."
    steps = [["mlir-opt-19", f"--pass-pipeline={repro.pipeline}", repro.file]]
    if repro.run:
        steps += [["mlir-opt-19", *RUN_PIPELINE.split()],
                  ["mlir-cpu-runner-19", "-e", "main", "-entry-point-result=void", f"-shared-libs={RUNNER_LIBS}"]]
    return check_script(f'''{docstring(doc)}
import os
import shutil
import subprocess
import sys

STEPS = {steps!r}
SHOWS = {repro.shows!r}  # in the output while the bug reproduces
os.chdir(os.path.dirname(os.path.abspath(__file__)))
text = None
for step in STEPS:
    if not shutil.which(step[0]):
        sys.exit(print(f"cannot run here: {{step[0]}} not found") or 2)
    done = subprocess.run(step, input=text, capture_output=True, text=True)
    if done.returncode:
        sys.exit(print(f"cannot run here: {{step[0]}} exited {{done.returncode}}: {{done.stderr[-500:]}}") or 2)
    text = done.stdout
print(text)
if SHOWS in text:
    sys.exit(print(f"REPRODUCES: the output holds {{SHOWS!r}}") or 1)
print("FIXED")
''', doc)


def write_mlir_bundle(folder: str, repro: MlirRepro, to_dir: str, head: str) -> None:
    """Copy the cause's .mlir into `to_dir` and write repro.py (ISSUE.md is the caller's)."""
    source = os.path.join(folder, repro.file)
    if not os.path.isfile(source) or os.path.islink(source):
        raise BadMlirRepro(f"{source}: no such file (cause.json mlir_opt.file)")
    shutil.copyfile(source, os.path.join(to_dir, repro.file))
    with open(os.path.join(to_dir, "repro.py"), "w", encoding="utf-8") as handle:
        handle.write(render_script(repro, head))


def tool_versions() -> str:
    """The version lines of the tools the commands run."""
    return "\n".join(f"{tool}: {tool_version(tool)}" for tool in TOOLS)


def tool_version(tool: str) -> str:
    """An LLVM tool's version from its --version banner, or 'not found'."""
    found = shutil.which(tool)
    banner = subprocess.run([found, "--version"], capture_output=True, text=True).stdout if found else ""
    version = re.search(r"version (\S+)", banner)
    return version.group(1) if version else "not found"


FUZZER_NOTE = ("Found by a differential fuzzer (a program compiled through MLIR against PyTorch), then reduced by hand to "
               "the input below.")


def render_issue(title: str, file_at: str, analysis: str, repro: MlirRepro, bundle: str, quoted: str) -> str:
    """ISSUE.md in LLVM's terms: what is wrong, the .mlir, the command, its output, the expected result."""
    with open(os.path.join(bundle, repro.file), encoding="utf-8") as handle:
        source = handle.read().strip("\n")
    parts = [file_at, f"# {title}", "", "## Description", "", analysis, "", FUZZER_NOTE, "",
             f"`{repro.file}`:", "", "```mlir", source, "```", "", "Command:", "", "```", commands(repro), "```", "",
             "Output:", "", "```", quoted, "```", ""]
    parts += [f"Expected: {repro.expected}", ""] if repro.expected else []
    parts += ["## Version", "", "```", tool_versions(), "```", ""]
    return "\n".join(parts)
