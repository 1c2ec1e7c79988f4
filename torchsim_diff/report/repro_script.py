"""The text of a bundle's repro.py: the minimal program, its inputs, the compiler as the route
runs it (the settings the campaign compiled with), at a stated tolerance; the shims a triton
bundle ships; the harness script for a route only torchsim-diff drives."""
from __future__ import annotations

import dataclasses

from torchsim_diff.case.graph import Case
from torchsim_diff.buckets.projects import route_facts
from torchsim_diff.case.program_check import load_program
from torchsim_diff.report import eager_script, plain_script
from torchsim_diff.report.script_text import check_script, docstring
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record
from torchsim_diff.report.issue_title import project_of, title


SHIMS_FILE = "triton_shims.py"


# -- repro.py --------------------------------------------------------------------------------
# A route whose compiled program runs on another device (its class's `device`) gets inputs
# copied there (eager and float64 stay on the CPU), after the line that says why a machine
# without that device cannot run it.
DEVICE_CHECK = {"cuda": 'if not torch.cuda.is_available():\n    sys.exit(print("cannot run here: no CUDA GPU") or 2)'}


LOW_PRECISION = ("float16", "bfloat16")


# The settings compile_setup writes that a bundle drops when the bug shows without them.
OPTIONAL_SETTINGS = ("gemm_backends", "simdlen", "emulate_precision_casts")


def compile_setup(record: Record, case: Case | None = None, dropped: tuple = ()) -> str:
    """The torch.compile lines of repro.py, with the settings the campaign compiled the case
    with (the record's versions and its dynamic decision), and Inductor's caches off: a
    kernel cached by an earlier compile would hide the bug, or show a fixed one. Only the
    settings that differ from torch's defaults, or matter for the case, are written, less the
    OPTIONAL_SETTINGS named in `dropped`."""
    from torchsim_diff.routes import compile_options
    chosen = compile_settings(record)
    dynamic = bool(record.dynamic) if isinstance(record.dynamic, bool) else chosen["dynamic"] is True
    mode = "" if chosen["mode"] == "default" else f", mode={chosen['mode']!r}"
    lines = ["torch._inductor.config.force_disable_caches = True  # compile afresh"]
    if record.route == "triton-cuda" and (case is None or _has_template_op(case)) and "gemm_backends" not in dropped:
        from torchsim_diff.routes.triton.shims import TRITON_GEMM_SETTINGS   # the route's matmul and conv
        lines += [f"torch._inductor.config.{name} = {value!r}" for name, value in TRITON_GEMM_SETTINGS.items()]
    width = compile_options.inductor_simdlen(chosen["simdlen"]) if record.route == "inductor" else None
    if width is not None and "simdlen" not in dropped:   # torch's default is the host's widest ISA, and a bug may live in one width only
        lines.append(f"torch._inductor.config.cpp.simdlen = {width}  # the vector width the bug was found with")
    if (case is None or _touches_low_precision(case) or not chosen["emulate_precision_casts"]) \
            and "emulate_precision_casts" not in dropped:
        lines.append(f"torch._inductor.config.emulate_precision_casts = {bool(chosen['emulate_precision_casts'])}")
    lines.append(f"compiled = torch.compile(program, fullgraph=True, dynamic={dynamic}{mode})")
    return "\n".join(lines)


def _touches_low_precision(case: Case) -> bool:
    """Whether a value of `case` is float16 or bfloat16: its dtype, an input's, or a cast's
    (a float32 case's round trip through bfloat16 is dropped without emulate_precision_casts)."""
    named = [case.dtype] + [spec["dtype"] for spec in case.inputs]
    named += [value for node in case.nodes for value in node["attrs"].values() if isinstance(value, str)]
    return any(name in LOW_PRECISION for name in named)


def _has_template_op(case: Case) -> bool:
    from torchsim_diff.ops import get_op
    return any(get_op(n["op"]).family == "matmul" for n in case.nodes)     # convolutions too


def compile_settings(record: Record) -> dict:
    """The torch.compile settings of the record's campaign (defaults where it names none)."""
    from torchsim_diff.routes import compile_options
    return compile_options.settings({k: v for k, v in (record.versions or {}).items()
                                     if k in compile_options.DEFAULTS and _setting_ok(k, v)})


def _setting_ok(key: str, value) -> bool:
    """Whether a recorded setting parses (versions come from files people share)."""
    from torchsim_diff.routes import compile_options
    try:
        compile_options.PARSERS[key](value)
    except (ValueError, TypeError, KeyError):
        return False
    return True


# torch-mlir: where the lowered module cannot run on the host (a mutated input, a dtype numpy
# does not carry), the script stops after torch-mlir's import, which is where most of its bugs show.
_MLIR_IMPORT = """from torch_mlir import fx
from torch_mlir.extras.fx_decomp_util import get_decomposition_table


def compiled(*xs):  # torch.export, then torch-mlir's import to linalg-on-tensors
    module = type("Program", (torch.nn.Module,), {"forward": lambda self, *a: program(*a)})()
    exported = torch.export.export(module, tuple(x.contiguous() for x in xs), strict=False)
    exported = exported.run_decompositions(get_decomposition_table())
    fx.export_and_import(exported, output_type="linalg-on-tensors", decomposition_table={})
    sys.exit(print("imported without error; this bug shows only when the module runs") or 2)"""


# A torch-mlir bug shows on the host too: repro.py runs the lowered module there with the
# mlir_host.py the bundle ships.
HOST_SETUP = ("import mlir_host  # beside this script: torch-mlir's linalg lowered to LLVM and run here",
              "compiled = lambda *xs: mlir_host.run(program, xs)")


# Projects whose bug on an import-only route (ReportFacts.import_only) lives in the lowering the host run repeats:
# torch-mlir's own, and MLIR's passes inside it.
HOST_PROJECTS = ("torch-mlir", "llvm")


def runs_on_host(record: Record, case: Case) -> bool:
    """Whether the bundle runs a torch-mlir (or MLIR) bug on the host (see HOST_SETUP)."""
    from torchsim_diff.report import mlir_host
    return (route_facts(record.route).import_only and project_of(record).name in HOST_PROJECTS
            and mlir_host.runs_on_host(case))


def harness_only(route: str) -> bool:
    """Whether repro.py runs the route through torchsim-diff's checker (_HARNESS_SCRIPT)."""
    return route_facts(route).script is None


def standalone_routes() -> list:
    """Routes whose repro.py runs the route itself (others print why and exit 2)."""
    from torchsim_diff.routes import route_names
    return sorted(route for route in route_names() if not harness_only(route))


@dataclasses.dataclass(frozen=True)
class ScriptOptions:
    """How plain repro.py is written: at torch.testing's default tolerances (plain_script.tolerances)
    or at eager's own error, and the OPTIONAL_SETTINGS it leaves out."""
    at_defaults: bool = False
    dropped: tuple = ()
    eager_form: str = ""      # a bug of eager itself, shown eager against eager (report.eager_script.FORMS)
    eager_bug: bool = False   # eager is the side that is wrong, whatever the script compares
    plain_kernel: bool = False    # a Triton bug shown as one plain @triton.jit launch (report.triton_kernel_script)
    not_plain: str = ""           # why a Triton bug could not be shown so


def render_script(record: Record, case: Case, heading: str = "", options: ScriptOptions = ScriptOptions()) -> str:
    """The text of repro.py (see module docstring and report.plain_script); heading: its
    title (default: `title`)."""
    route = record.route
    host = runs_on_host(record, case)
    doc = f"{heading or title(record, case)}\nExit 1: the bug reproduces, 0: fixed, 2: cannot run here " \
          f"(no torch{_or_toolchain(route)})."
    if harness_only(route):
        script = _HARNESS_SCRIPT.format(route=route, timeout_s=HARNESS_TIMEOUT_S, run_dir=HARNESS_RUN_DIR)
        return check_script(docstring(doc) + "\n" + script, doc)
    facts = route_facts(route)
    env, compiler = facts.script
    if options.eager_form:
        setup = ""
    elif host:
        env, setup = HOST_SETUP
    elif facts.import_only:
        setup = _MLIR_IMPORT
    elif facts.torch_compile:
        setup = compile_setup(record, case, options.dropped)
    else:
        setup = "compiled = program"
    device = _device_of(route)
    device_check = DEVICE_CHECK.get(device)
    inputs, reads_file = plain_script.inputs_source(case, record.kind, device)
    imports = (["import os"] if reads_file else []) + ["import sys", "try:"]
    imports += ([f"    {env}"] if env else []) + ["    import torch"]
    imports += ["except ImportError as exc:", '    sys.exit(print(f"cannot run here: {exc}") or 2)']
    imports += [device_check] if device_check else []
    kind = record.kind if not (facts.import_only and not host) else Kind.COMPILE_ERROR.value
    # tolerances come from eager and float64 runs: only a value failure has values to hold to them
    # (eager may reject the program of an invalid_case)
    values = kind in Kind.values_where("value_failure") and not options.eager_form
    tols = plain_script.tolerances(case, load_program(case.program_source()), options.at_defaults) if values else []
    body = [_program_source(case)] + (plain_script.pickers_source(case) if values else []) + [inputs]
    guard = {Kind.TIMEOUT.value: _WATCHDOG, Kind.CRASH.value: _CRASH_GUARD}.get(record.kind)
    if guard:   # the process that shows the bug may not come back to say so
        body.insert(0, guard)
    body.append(eager_script.run_source(case, options.eager_form) if options.eager_form else
                setup + "\n" + plain_script.run_source(case, kind, tols, compiler, device))
    text = docstring(doc) + "\n" + "\n".join(imports) + "\n\n\n" + "\n\n".join(body)
    return check_script(text.rstrip("\n") + "\n", doc)


def uses_tolerances(record: Record, case: Case) -> bool:
    """Whether repro.py compares float values at a tolerance (render_script's `at_defaults` matters)."""
    if harness_only(record.route) or (route_facts(record.route).import_only and not runs_on_host(record, case)):
        return False
    return record.kind in Kind.values_where("value_failure")


def _device_of(route: str) -> str | None:
    """The device the route runs compiled programs on, None for the CPU."""
    from torchsim_diff.routes import route_class
    device = getattr(route_class(route), "device", "cpu")
    return None if device == "cpu" else device


def _or_toolchain(route: str) -> str:
    tool = route_facts(route).toolchain
    tool = _HARNESS_TOOLCHAIN.format(route=route) if tool is None else tool
    return f", or no {tool}" if tool else ""


def _program_source(case: Case) -> str:
    return case.program_source().split("\n", 1)[1].strip("\n") + "\n"


# A hang may sit in native code that never returns to Python (no signal handler runs there):
# the script runs itself in a child and calls a child past HANG_S a reproduction.
HANG_S = 60


_WATCHDOG = f'''if "--child" not in sys.argv:  # a hang is the bug: run in a child with a time limit
    import subprocess
    try:
        sys.exit(subprocess.run([sys.executable, __file__, "--child"], timeout={HANG_S}).returncode)
    except subprocess.TimeoutExpired:
        sys.exit(print("REPRODUCES: no result within {HANG_S} s") or 1)
'''


# A crash (SIGSEGV, SIGABRT) ends the process with no Python left to print or exit 1: the
# script runs itself in a child and calls a child killed by a signal a reproduction.
_CRASH_GUARD = '''if "--child" not in sys.argv:  # a crash is the bug: run in a child and read how it ended
    import subprocess
    status = subprocess.run([sys.executable, __file__, "--child"]).returncode
    if status < 0:
        sys.exit(print(f"REPRODUCES: killed by signal {-status}") or 1)
    sys.exit(status)
'''


# A route only torchsim-diff drives (triton-spike: Inductor's kernels through the adapter to
# Spike) is the toolchain itself: the script runs case.json on it with torchsim-diff's checker.
HARNESS_TIMEOUT_S = 600


HARNESS_RUN_DIR = "run"       # the checker's folder next to repro.py: the route's files of the last run


_HARNESS_TOOLCHAIN = "torchsim-diff with route {route} (its toolchain)"


_HARNESS_SCRIPT = '''import os
import sys
try:
    import torch  # noqa: F401
    from torchsim_diff.run.checker import Checker  # the route's toolchain: torchsim-diff drives {route}
    from torchsim_diff.case.graph import Case
    from torchsim_diff.routes import route_names
except ImportError as exc:
    sys.exit(print(f"cannot run here: {{exc}}") or 2)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "case.json"), encoding="utf-8") as handle:
    case = Case.from_json(handle.read())
print(case.program_source())
with Checker(out_dir=os.path.join(here, "{run_dir}"), timeout_s={timeout_s}) as checker:  # keeps the route's files
    registered = "{route}" in route_names()
    available, why, _versions = checker.availability("{route}") if registered else (False, "not registered here", 0)
    if not available:
        sys.exit(print(f"cannot run here: route {route}: {{why}}") or 2)
    verdict = checker.check(case, "{route}")
print(verdict.message)
if verdict.failed and verdict.kind.is_bug:
    sys.exit(print(f"REPRODUCES: {route} {{verdict.kind.value}} at stage {{verdict.stage}}") or 1)
if verdict.failed:
    sys.exit(print(f"cannot run here: {{verdict.kind.value}}") or 2)
print("FIXED: {route} agrees with eager and float64")
'''


# -- triton shims: only those this bug needs ------------------------------------------------
SHIM_CALLS = ("_patch_backend_hash", "_silence_no_backend_warning", "_patch_libdevice", "_patch_mask_dtype",
              "_patch_interpreter_options", "_patch_lang_once_per_kernel", "_patch_tree_reduce",
              "_patch_bf16_dot", "enable_triton_gemm")


REQUIRED_SHIMS = ("_patch_backend_hash",)      # CPU tensors get Triton kernels: the route itself


def shims_source(calls) -> str:
    """A module with triton_shims' functions `calls` (and what they use) and an install()
    calling them in order: the bundle's triton_shims.py."""
    import ast
    import inspect

    from torchsim_diff.routes.triton import shims
    source = inspect.getsource(shims)
    tree = ast.parse(source)
    defined = {}
    for node in tree.body:
        for name in _names_defined(node):
            defined[name] = node
    keep, todo = set(), list(calls) + ["_STATE"]
    while todo:
        node = defined.get(todo.pop())
        if node is None or id(node) in keep:
            continue
        keep.add(id(node))
        todo += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]
    imports = [ast.get_source_segment(source, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    parts = ['"""Triton-interpreter shims from torchsim-diff (routes/triton/shims.py), only those '
             'this bug needs."""\n' + "\n".join(imports)]
    parts += [ast.get_source_segment(source, n) for n in tree.body if id(n) in keep]
    parts.append("def install():\n" + "".join(f"    {c}()\n" for c in calls))
    parts.append('os.environ["TRITON_INTERPRET"] = "1"   # before torch and triton are imported\ninstall()')
    return "\n\n\n".join(parts) + "\n"


def _names_defined(node) -> list:
    import ast
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


CUDA_TWIN = "repro_cuda.py"     # a PyTorch bug met under Triton's interpreter, compiled for a GPU instead
