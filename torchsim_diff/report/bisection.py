"""Which part of torch.compile a bug needs, in the words PyTorch's maintainers use.

    >>> found = bisect(record, case, settings)    # settings: the compile settings repro.py writes
    >>> found.text()
    'CompilerBisector: backend `inductor`, subsystem `lowerings`, application 3 (aten.floor_divide)'

`torch._inductor.compiler_bisector.CompilerBisector` narrows a failure to the first backend that
shows it (eager, aot_eager, aot_eager_decomp_partition, inductor), then to a subsystem of it,
then to the Nth application; maintainers quote its result on fuzzer issues and route them by it.
The bisection runs in a fresh Python process: a script made of the bundle's program, inputs and
compile settings, whose test compiles the program afresh and holds it to the bundle's
tolerances. Only for bugs that repro.py shows with torch alone on the CPU (Inductor's C++
route): the other torch.compile routes need the Triton interpreter's shims or a GPU.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from torchsim_diff.results.kinds import Kind

TIMEOUT_S = 600
RESULT_PREFIX = "BISECTION "

_FOOTER = '''
from torch._inductor.compiler_bisector import CompilerBisector


def passes():
    torch._dynamo.reset()
    try:
        got = torch.compile(program, fullgraph=True, dynamic=False)(*inputs())
    except Exception:  # a compile error is the failure
        return False
    for e, g, tol in zip(program(*inputs()), got, TOLERANCES):
        try:
            torch.testing.assert_close(g, e, **tol, equal_nan=True)
        except AssertionError:
            return False
    return True


found = CompilerBisector.do_bisect(passes)
print("BISECTION " + json.dumps(None if found is None else dict(
    backend=found.backend, subsystem=found.subsystem, bisect_number=found.bisect_number,
    debug_info=found.debug_info)))
'''


@dataclasses.dataclass(frozen=True)
class Bisection:
    backend: str | None = None
    subsystem: str | None = None
    bisect_number: int | None = None
    debug_info: str | None = None
    not_run: str = ""             # why there is no result

    def text(self) -> str:
        if self.not_run:
            return f"CompilerBisector: not run ({self.not_run})"
        if self.backend is None:
            return "CompilerBisector: every backend and subsystem passes (the failure did not show while bisecting)"
        parts = [f"backend `{self.backend}`"]
        if self.subsystem:
            parts.append(f"subsystem `{self.subsystem}`")
        if self.bisect_number:
            parts.append(f"application {self.bisect_number}")
        debug = f" ({self.debug_info})" if self.debug_info and self.debug_info != self.subsystem else ""
        return "CompilerBisector: " + ", ".join(parts) + debug


def applies(record) -> str:
    """Why the bisection does not apply to `record` ('' when it does)."""
    from torchsim_diff.buckets.projects import route_facts
    if not route_facts(record.route).bisect:
        return f"the {record.route} repro needs more than torch on the CPU"
    if record.kind not in Kind.values_where("value_failure") and record.kind != Kind.COMPILE_ERROR.value:
        return f"a {record.kind} is not bisected (each try could hang or crash)"
    return ""


def bisect(record, case, settings: str = "", *, cwd: str | None = None, python: str = sys.executable,
           timeout_s: float = TIMEOUT_S) -> Bisection:
    """The bisection of a torch.compile bug (record, its minimal case); settings: the compile
    settings repro.py writes (report.bundles.compile_setup); cwd: the bundle, whose inputs.pt
    the script reads when the inputs are too large to write out."""
    why = applies(record)
    if why:
        return Bisection(not_run=why)
    try:
        done = subprocess.run([python, "-c", bisect_script(record, case, settings)], capture_output=True, text=True,
                              timeout=timeout_s, cwd=cwd)
    except subprocess.TimeoutExpired:
        return Bisection(not_run=f"it took over {timeout_s:.0f} s")
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_PREFIX)), None)
    if line is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Bisection(not_run=f"the bisection script failed: {last[:200]}")
    found = json.loads(line[len(RESULT_PREFIX):])
    return Bisection(**found) if found else Bisection()


def bisect_script(record, case, settings: str = "") -> str:
    """The bisection script: repro.py's program, inputs, settings and tolerances, then _FOOTER."""
    from torchsim_diff.case.program_check import load_program
    from torchsim_diff.report import plain_script
    inputs, _reads_file = plain_script.inputs_source(case, record.kind, None)
    tols = plain_script.tolerances(case, load_program(case.program_source())) \
        if record.kind in Kind.values_where("value_failure") else [plain_script.Tolerance(0.0, 0.0, "")] * len(case.outputs)
    head = ["import json", "import os", "import sys", "import torch", "", "",
            case.program_source().replace("import torch\n", ""), "", inputs, "", settings,
            f"TOLERANCES = [{', '.join(t.literal() for t in tols)}]"]
    return "\n".join(head) + "\n" + _FOOTER
