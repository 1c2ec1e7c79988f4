"""A time limit for each simulator subprocess, and a record of how each one ended.

PyTorchSim starts Spike, gem5, TOGSim, its compilers and the RISC-V binutils with
`subprocess.run` (without a timeout, or with one longer than a case), so a hung simulator hangs the case until the worker is killed and
the case loses its log. Inside `limited_subprocesses(...)` every `subprocess.run` /
`subprocess.call` (check_call and check_output go through them) gets the limit of the
tool its command names (or PyTorchSim's own, when that is shorter), and each abnormal end is written to the log as one marker line
that `classify` reads:

    torchsim-diff: __timeout__ spike after 120 s: spike --isa=... kernel.elf
    torchsim-diff: __exit__ togsim code -11 (SIGSEGV): .../togsim ...

Processes started with Popen and waited on by hand are not covered (TOGSim's
interactive mode in C2); the worker's own per-case timeout still bounds them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import subprocess
import sys

# Tool names by the command that starts them, first match wins. The binutils and the
# link step come first: generation A links, objdumps and nm's `validation_binary` and a
# Spike rule that matched the binary's name filed their failures as Spike crashes
# (PyTorchSim fe04c9a, PyTorchSimFrontend/mlir/mlir_caller_codegen.py compile_wih_kernel,
# Simulator/simulator.py run_spike). C2's pk lives under `riscv64-unknown-elf/bin/`, so
# the toolchain rule names the tools, not the triple.
TOOLS = (
    ("toolchain", re.compile(r"riscv64-unknown-elf-(gcc|g\+\+|ld|objdump|nm|readelf|as)\b|"
                             r"^\s*(\S*/)?(nm|objdump|readelf)\s", re.I)),
    ("spike", re.compile(r"(^|[/\s])spike(\s|$)|tnpu\.spike|spike_run", re.I)),
    ("gem5", re.compile(r"gem5", re.I)),
    ("togsim", re.compile(r"togsim|bin/Simulator(\s|$)", re.I)),
    ("compiler", re.compile(r"run\.py|pytorchsim-triton-compiler|triton-shared-opt|mlir-opt|"
                            r"mlir-translate|(^|/)llc|clang", re.I)),
)
DEFAULT_LIMITS_S = {"spike": 300.0, "gem5": 300.0, "togsim": 600.0, "compiler": 300.0, "toolchain": 120.0}


@dataclasses.dataclass
class ProcessEnd:
    """How one watched subprocess ended abnormally."""

    tool: str
    command: str
    returncode: int | None      # None: killed by our timeout
    limit_s: float | None = None

    def marker(self) -> str:
        if self.returncode is None:
            return f"torchsim-diff: __timeout__ {self.tool} after {self.limit_s:g} s: {self.command}"
        return f"torchsim-diff: __exit__ {self.tool} code {self.returncode}{_signal_name(self.returncode)}: {self.command}"


def _signal_name(code: int) -> str:
    if code < 0:
        try:
            return f" ({signal.Signals(-code).name})"
        except ValueError:
            return ""
    return ""


def tool_of(args) -> str | None:
    """Which simulator or compiler a command line starts (None: not one we watch)."""
    command = args if isinstance(args, str) else " ".join(str(a) for a in args)
    for tool, pattern in TOOLS:
        if pattern.search(command):
            return tool
    return None


def effective_limit(theirs, ours):
    """The shorter of PyTorchSim's own timeout and ours. Their compiler bridges pass
    timeout=1800 explicitly (C1 tnpu_bridge.run_pipeline, C2
    PyTorchSimCodegen/compiler_bridge.run_pipeline), which used to win over ours: a hung
    compile then outlived the case and ended in an unclassified worker kill."""
    limits = [t for t in (theirs, ours) if t is not None]
    return min(limits) if limits else None


@contextlib.contextmanager
def limited_subprocesses(limits_s: dict | None = None, *, around=None):
    """Within the block, watched subprocesses get a timeout; yields the list of ends.

    around: optional callable(tool, args, phase) called with phase "before" and "after"
    each watched command (the route snapshots Spike's runtime files with it).
    """
    limits = dict(DEFAULT_LIMITS_S, **(limits_s or {}))
    ends: list = []
    original_run, original_call = subprocess.run, subprocess.call

    def watched(original):
        def call(*popenargs, **kwargs):
            args = popenargs[0] if popenargs else kwargs.get("args", "")
            tool = tool_of(args)
            if tool is None:
                return original(*popenargs, **kwargs)
            kwargs["timeout"] = effective_limit(kwargs.get("timeout"), limits.get(tool))
            command = args if isinstance(args, str) else " ".join(str(a) for a in args)
            if around is not None:
                around(tool, args, "before")
            try:
                result = original(*popenargs, **kwargs)
            except subprocess.TimeoutExpired:
                _record(ends, ProcessEnd(tool, command[:300], None, kwargs["timeout"]))
                raise
            except subprocess.CalledProcessError as exc:
                _record(ends, ProcessEnd(tool, command[:300], exc.returncode))
                raise
            finally:
                if around is not None:
                    around(tool, args, "after")
            code = result if isinstance(result, int) else getattr(result, "returncode", 0)
            if code:
                _record(ends, ProcessEnd(tool, command[:300], code))
            return result
        return call

    subprocess.run, subprocess.call = watched(original_run), watched(original_call)
    try:
        yield ends
    finally:
        subprocess.run, subprocess.call = original_run, original_call


def _record(ends: list, end: ProcessEnd) -> None:
    ends.append(end)
    print(end.marker(), file=sys.stderr, flush=True)
