"""Reproducer bundles a maintainer files as they are: one folder per bug.

    >>> write_bundle(record, "reports/run/bundles/1cfb0bfb18")
    >>> write_bundle(entry_record(read_entry("corpora/known/X.json")), "bundles/X")

A bundle holds only what a maintainer needs:
    repro.py    plain (report.plain_script): torch, and the upstream's own tool where it is not
                PyTorch; no torchsim-diff. The minimal program, its inputs written exactly as
                `as_strided` views, compiled against eager with torch.testing.assert_close at
                a stated tolerance; exit 1 while the bug reproduces, 0 once fixed, 2 where it
                cannot run.
    ISSUE.md    in the upstream project's issue template, in its own terms: where to file it,
                a title naming the construct, the repro and its output, the versions and
                options the repro uses.
    case.json   the case; beside them, per upstream: triton_shims.py (Inductor's Triton
                kernels on CPU tensors), mlir_host.py, torch.mlir and linalg.mlir (torch-mlir),
                kernel.ttir (the Triton-to-linalg adapter), inputs.pt (a large storage whose
                values matter); artifacts/ only where torchsim-diff drives the chain itself.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import sys

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.buckets.projects import PROJECTS, Project, project_named, route_facts
from torchsim_diff.case.program_check import load_program
from torchsim_diff.report import adapter_bundle, checklist, eager_script, kernel_bundle, plain_script, quoted_output
from torchsim_diff.report.script_text import check_script, docstring
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record

SHIMS_FILE = "triton_shims.py"


class BundleError(ValueError):
    """A record that cannot be turned into a bundle (message names the field)."""


# -- upstream projects (buckets.projects) ------------------------------------------------
# torch.compile bugs go to PyTorch's pt2 template, whose fuzzer block asks for the label below.
PT2_TEMPLATE = "https://github.com/pytorch/pytorch/issues/new?template=pt2-bug-report.yml"
PT2_ERROR_SECTION = "### Error logs"
FUZZER_NOTE = ("Found by a differential fuzzer: the compiled program against eager PyTorch, with the same program "
               "in float64 as the higher-precision baseline. Suggested label: `topic: fuzzer`.")
def project_of(record: Record) -> Project:
    """The upstream project: the record's `project`, else the one its `upstream` URL names,
    else the route's."""
    name = record.project
    upstream = record.upstream or ""
    if not name:
        name = next((p.name for p in PROJECTS.values() if re.search(rf"{re.escape(p.repo)}(?![\w-])", upstream)), None)
    name = name or route_facts(record.route).project
    project = project_named(name, record.route)
    if project is None:
        raise BundleError(f"project={name!r} is not one of {', '.join(PROJECTS)}")
    return project


# -- the title -------------------------------------------------------------------------------
LAYOUT_WORDS = {"transposed": "permuted", "sliced": "sliced", "broadcast": "expanded (stride-0)",
                "offset": "storage-offset", "channels_last": "channels-last", "overlapping": "self-overlapping",
                "strided": "non-contiguous", "inout": "mutated"}
SYMPTOMS = {"wrong_values": "returns wrong values", "nonfinite_mismatch": "returns a different NaN/Inf pattern",
            "guard_violation": "writes outside the tensor's view", "shape_mismatch": "returns a wrong shape",
            "dtype_mismatch": "returns a wrong dtype", "crash": "crashes the process", "timeout": "hangs",
            "nondeterministic": "differs from run to run", "runtime_error": "raises at run time",
            "compile_error": "fails to compile"}
INDEX_OPS = ("argmax", "argmin")
TITLE_EXPRESSION_CHARS = 80


def title(record: Record, case: Case) -> str:
    """"<compiler>: <expr> on a <layout> input <symptom>", from the minimal case and trigger."""
    project = project_of(record)
    compiler = route_facts(record.route).compiler_name(project.name, record.route)
    words = [LAYOUT_WORDS[t] for t in _trigger_of(record, case) if t in LAYOUT_WORDS]
    where = f" on {_article(words[0])} {' '.join(words)} input" if words else ""
    dtype = f" ({case.dtype})" if case.dtype != "float32" else ""
    return f"{compiler}: {expression(case, failing_outputs(record, case))}{where}{dtype} {_symptom(record, case)}"


def failing_outputs(record: Record, case: Case) -> list:
    """The outputs the failure is about: the one its message names ("output 1: ..."), every
    output when the whole program fails to compile or run, else the first."""
    named = (record.message or "").split(":", 1)[0].split()
    if len(named) == 2 and named[0] == "output" and named[1].isdigit() and int(named[1]) < len(case.outputs):
        return [case.outputs[int(named[1])]]
    return list(case.outputs) if record.kind in Kind.values_where("no_values") else case.outputs[:1]


def _trigger_of(record: Record, case: Case) -> list:
    """The ablation trigger when reduce-then-bucket found one, else the inputs' layout classes."""
    if record.trigger is not None and record.reduced_case:
        return list(record.trigger)
    classes = set()
    for spec in case.inputs:
        lay = spec["layout"]
        classes.update(layout.layout_classes(spec["shape"], lay["strides"], lay["offset"], lay["storage_size"],
                                             bool(spec.get("mutated"))))
    return sorted(classes - {"contiguous"}, key=list(LAYOUT_WORDS).index)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _symptom(record: Record, case: Case) -> str:
    kind = record.kind or "wrong_values"
    if kind == "wrong_values" and first_op(record, case) in INDEX_OPS:
        return "returns a wrong index"
    if kind in ("compile_error", "runtime_error"):
        first = record.first_message_line
        short = first if len(first) <= 90 else first[:90].rsplit(" ", 1)[0] + " ..."
        return f"{SYMPTOMS[kind]}: {short}" if first else SYMPTOMS[kind]
    return SYMPTOMS.get(kind, kind.replace("_", " "))


def expression(case: Case, outputs: list | None = None) -> str:
    """The case's `outputs` (default: its first) as nested op calls, inputs named x, y, z, w:
    'argmax(silu(x))'; several outputs are joined by commas."""
    names = {spec["name"]: n for spec, n in zip(case.inputs, _input_letters(len(case.inputs)))}
    nodes = {n["id"]: n for n in case.nodes}

    def expr(ref: str) -> str:
        if ref in names:
            return names[ref]
        node = nodes[ref]
        args = [expr(a) for a in node["args"]]
        if node["op"].endswith("_"):
            return f"{args[0]}.{node['op']}({', '.join(args[1:])})"
        return f"{node['op']}({', '.join(args)})"
    refs = outputs or case.outputs[:1] or [n["id"] for n in case.nodes][-1:]
    if not refs:
        return "program()"
    shown = [expr(refs[0])]
    for ref in refs[1:]:      # a title stays readable: the outputs that fit, then an ellipsis
        if len(", ".join(shown + [expr(ref)])) > TITLE_EXPRESSION_CHARS:
            return ", ".join(shown) + ", ..."
        shown.append(expr(ref))
    return ", ".join(shown)


def _input_letters(count: int) -> list:
    return list("xyzw")[:count] if count <= 4 else [f"x{k}" for k in range(count)]


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


def first_op(record: Record, case: Case) -> str | None:
    """The first divergent op: recorded by reduce-then-bucket, else the failing output's op."""
    found = record.first_op or record.op
    if found:
        return found
    producers = {n["id"]: n["op"] for n in case.nodes}
    return producers.get(case.outputs[0]) if case.outputs else None


def _divergence(record: Record, case: Case) -> str:
    if record.kind in Kind.values_where("no_values"):
        where = (f"`{record.first_op}`" if record.first_op else
                 ", ".join(f"`{op}`" for op in dict.fromkeys(n["op"] for n in case.nodes)))
        return f"It fails while compiling or running, in {where}."
    op = first_op(record, case)
    return f"The first op whose result differs is `{op}`." if op else ""


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


def run_script(bundle: str, python: str = sys.executable, timeout_s: float = 300) -> str:
    """repro.py's output and exit status, as ISSUE.md quotes them (quoted_run)."""
    status, out, err = run_repro(bundle, python, timeout_s)
    return quoted_run(bundle, status, out, timeout_s, err)


def quoted_run(bundle: str, status, out: str, timeout_s: float, err: str = "") -> str:
    """A run of the bundle's repro.py as ISSUE.md quotes it (report.quoted_output: long output
    summarised, stderr where it holds the evidence, no path of this machine)."""
    if status == TIMED_OUT:
        return f"(no result within {timeout_s:g} s)"
    return quoted_output.quoted(status, out, err, bundle)


def requote_run(bundle: str, quoted: str) -> None:
    """Put what a run of repro.py printed into the bundle's ISSUE.md, in place of what it
    quoted before (a campaign's bundle quotes the recorded message, which is the unreduced
    case's: the reduced case repro.py runs prints other figures)."""
    path = os.path.join(bundle, "ISSUE.md")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return
    heading = f"{OUTPUT_HEADING}\n\n"
    start = text.find(heading)
    fence = _BACKTICKS.match(text, start + len(heading)) if start >= 0 else None
    end = text.find(f"\n{fence.group(0)}\n", fence.end()) if fence else -1
    if end >= 0:
        block = "\n".join(fenced(quoted.strip()))
        write_text(path, text[:start + len(heading)] + block + text[end + len(fence.group(0)) + 1:])


TIMED_OUT = "timeout"


def run_repro(bundle: str, python: str = sys.executable, timeout_s: float = 300, started=None,
              script: str = "repro.py") -> tuple:
    """(exit status or TIMED_OUT, stdout, stderr) of one run of the bundle's `script` in a
    fresh process, as a maintainer runs it. started: called with the process once it runs
    (so that an interrupt can kill it); a run past `timeout_s` is killed."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}     # a bundle ships no __pycache__ of its own
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


# -- the bundle ----------------------------------------------------------------------------
def write_bundle(record: Record, to_dir: str, *, artifacts_dir: str | None = None, minimise: bool = False,
                 run: bool = False, analysis: str = "", heading: str = "", bisect: bool = False,
                 status: str = "new", eager_bug: bool = False) -> str:
    """Write the bundle of a results.jsonl or known-entry `record` (results.record.Record) into
    `to_dir`; returns it.

    The record's reduced case is used when it has one. minimise: find the triton shims the
    bug needs by running repro.py without each (slow: one run per shim). run: run repro.py
    once and quote its output in ISSUE.md (else the recorded message is quoted). analysis:
    what is known of the cause, for ISSUE.md; heading: the title (default: `title`). bisect:
    a torch.compile bug's ISSUE.md gets CompilerBisector's result (report.bisection: tens of
    compiles, about half a minute for a one-op case). status: the cause's upstream status, which
    decides the draft (THREAD_DRAFTS). eager_bug: the bug is eager's own (an ATen kernel's):
    repro.py shows it eager against eager where it can (report.eager_script)."""
    case = _case_of(record)
    if not record.route:
        raise BundleError("record has no 'route'; pass a results.jsonl record (Verdict.record())")
    from torchsim_diff.routes import route_names
    if not isinstance(record.route, str) or record.route not in route_names():
        raise BundleError(f"record's route {str(record.route)[:60]!r} is not a route of this torchsim-diff "
                          f"({', '.join(route_names())})")
    record = script_record(record)
    route = record.route
    claim_folder(to_dir)
    write_text(os.path.join(to_dir, "case.json"), case.to_json() + "\n")
    if not harness_only(route):
        stored = plain_script.stored_inputs(case, record.kind)
        if any(s is not None for s in stored):
            import torch
            torch.save(stored, os.path.join(to_dir, plain_script.INPUTS_FILE))
    if route == "triton":
        write_text(os.path.join(to_dir, SHIMS_FILE), shims_source(SHIM_CALLS))
    if runs_on_host(record, case):
        from torchsim_diff.report import mlir_host
        write_text(os.path.join(to_dir, mlir_host.FILE), mlir_host.source())
    if route_facts(route).import_only:
        from torchsim_diff.report import mlir_host
        mlir_host.write_ir(case, to_dir, lower=record.kind != Kind.TIMEOUT.value)
    runs = run or minimise
    record, options, first_run = _eager_script(record, case, to_dir, heading) \
        if eager_bug and runs and uses_tolerances(record, case) else (record, ScriptOptions(), None)
    if first_run is None and runs:
        options, first_run = _plainest_script(record, case, to_dir, heading)
        options = dataclasses.replace(options, eager_bug=eager_bug)
    elif first_run is None:
        write_text(os.path.join(to_dir, "repro.py"), render_script(record, case, heading))
    if runs and route == "triton" and project_of(record).name == "triton":
        plain_run, why_not = _plain_triton_kernel(record, case, to_dir, artifacts_dir, heading)
        options = dataclasses.replace(options, plain_kernel=plain_run is not None, not_plain=why_not)
        first_run = plain_run or first_run
    cuda_twin = _write_cuda_twin(record, case, to_dir, heading, options, runs) \
        if route == "triton" and project_of(record).name == "pytorch" else ""
    kernel_only = ((adapter_bundle.is_adapter_bug(record) and _adapter_bundle(record, case, to_dir, artifacts_dir, heading))
                   or (kernel_bundle.is_kernel_value_bug(record)
                       and _kernel_value_bundle(record, case, to_dir, artifacts_dir, heading)))
    shims = minimise_shims(to_dir) if route == "triton" and minimise and not options.plain_kernel else None
    if not run:
        repro_output = None
    elif first_run and shims is None:      # the run that chose the script is the one to quote
        repro_output = quoted_run(to_dir, first_run[0], first_run[1], 300, first_run[2])
    else:
        repro_output = run_script(to_dir)
    kernel_bundle.remove_built(to_dir)
    copied = []
    if harness_only(route) and not kernel_only:    # the route's files are the evidence repro.py lacks
        copied = _copy_artifacts(artifacts_dir or record.reduced_artifacts or record.artifacts,
                                 os.path.join(to_dir, "artifacts"))
        _keep_shipped(os.path.join(to_dir, HARNESS_RUN_DIR))
        copied += _files_under(os.path.join(to_dir, HARNESS_RUN_DIR, "artifacts"), to_dir)
    bisection = _bisection(record, case, to_dir, options.dropped) \
        if bisect and is_torch_compile_bug(record) and not eager_bug else ""
    tolerance = _tolerance_note(options) if uses_tolerances(record, case) and first_run else ""
    write_text(os.path.join(to_dir, "ISSUE.md"),
                render_issue(record, case, to_dir, copied, shims=shims, repro_output=repro_output,
                             analysis=analysis, heading=heading, bisection=bisection, tolerance=tolerance,
                             options=options, status=status, cuda_twin=cuda_twin))
    write_manifest(to_dir)
    return to_dir


def _plainest_script(record: Record, case: Case, to_dir: str, heading: str) -> tuple:
    """Write the plainest repro.py that shows the bug: at torch.testing's default tolerances
    when they show it (PyTorch asks fuzzer reports to keep them), else at eager's own error;
    then without each optional compile setting it shows without. (ScriptOptions, the last run
    that reproduced: (status, stdout, stderr), or None where nothing was run)."""
    def write(options: ScriptOptions) -> None:
        write_text(os.path.join(to_dir, "repro.py"), render_script(record, case, heading, options))
    if harness_only(record.route) or (route_facts(record.route).import_only and not runs_on_host(record, case)):
        write(ScriptOptions())
        return ScriptOptions(), None
    options = ScriptOptions(at_defaults=uses_tolerances(record, case))
    write(options)
    outcome = run_repro(to_dir)
    if outcome[0] == 0 and options.at_defaults:
        options = ScriptOptions()
        write(options)
        outcome = run_repro(to_dir)
    if outcome[0] != 1 or not route_facts(record.route).torch_compile:
        return options, outcome
    for name in OPTIONAL_SETTINGS:
        fewer = dataclasses.replace(options, dropped=options.dropped + (name,))
        if compile_setup(record, case, fewer.dropped) == compile_setup(record, case, options.dropped):
            continue
        write(fewer)
        tried = run_repro(to_dir)
        if tried[0] == 1:
            options, outcome = fewer, tried
    write(options)
    return options, outcome


def _eager_script(record: Record, case: Case, to_dir: str, heading: str) -> tuple:
    """(record, ScriptOptions, the run) of the first eager_script form under which eager
    disagrees with itself, its repro.py written; (record, ScriptOptions(), None) where none does."""
    eager = record.with_fields(route="eager", found_on=record.route)
    for form in eager_script.FORMS:
        options = ScriptOptions(at_defaults=True, eager_form=form, eager_bug=True)
        write_text(os.path.join(to_dir, "repro.py"), render_script(eager, case, heading, options))
        outcome = run_repro(to_dir)
        if outcome[0] == 1:
            return eager, options, outcome
    return record, ScriptOptions(), None


def _tolerance_note(options: ScriptOptions) -> str:
    if options.at_defaults:
        return "Tolerances: torch.testing's defaults."
    return ("Tolerances: torch.testing's default atol hides this bug (the values involved are smaller than it), so "
            "the script's atol is twice eager's own largest error against float64, and one subnormal step where "
            "eager is exact; rtol is torch.testing's default.")


# A bundle folder is ours alone: export writes into a new or empty folder, or one an earlier
# export wrote (its manifest names every top-level entry), and never through a symbolic link.
# While a bundle is written its manifest holds UNFINISHED (no file name holds a '/'), so the
# files of a write killed part-way (kill -9 of a campaign during its self-check) are known as
# ours, and the next write into that folder replaces them.
# What a bundle's repro.py makes when it runs (a self-check runs it after the manifest is
# written) is the bundle's too, in a folder that has a manifest.
MANIFEST = ".bundle-manifest"
UNFINISHED = "/unfinished"
RUN_OUTPUTS = (HARNESS_RUN_DIR, "__pycache__", *kernel_bundle.BUILT)


def write_manifest(to_dir: str) -> None:
    """Name every top-level entry of the bundle just written, so that a later export may replace them."""
    write_text(os.path.join(to_dir, MANIFEST), "".join(f"{name}\n" for name in sorted(os.listdir(to_dir))
                                                        if name != MANIFEST))


def claim_folder(to_dir: str) -> None:
    """Make `to_dir` ready for a bundle, or BundleError (one line) when it is not ours to write."""
    if os.path.islink(to_dir):
        raise BundleError(f"{to_dir} is a symbolic link: a bundle is written only into a real folder")
    if os.path.exists(to_dir) and not os.path.isdir(to_dir):
        raise BundleError(f"{to_dir} exists and is not a folder")
    os.makedirs(to_dir, exist_ok=True)
    present = set(os.listdir(to_dir)) - {MANIFEST}
    if present:
        _check_ours(to_dir, present)
    write_text(os.path.join(to_dir, MANIFEST), "".join(f"{name}\n" for name in [UNFINISHED, *sorted(present)]))


def _check_ours(to_dir: str, present: set) -> None:
    """BundleError unless every entry of `present` is a bundle's: named by the folder's
    manifest, or left by a write that did not finish (UNFINISHED)."""
    links = sorted(n for n in present | {MANIFEST} if os.path.islink(os.path.join(to_dir, n)))
    if links:
        raise BundleError(f"{to_dir} holds symbolic links ({', '.join(links)}): a bundle never writes through one")
    try:
        with open(os.path.join(to_dir, MANIFEST), encoding="utf-8") as handle:
            ours = set(handle.read().split("\n"))
    except OSError:
        ours = set()
    if ours:        # a bundle's folder: what its own repro.py makes when run is a bundle's too
        ours |= set(RUN_OUTPUTS)
    foreign = sorted(present - ours) if UNFINISHED not in ours else []
    if foreign:
        raise BundleError(f"{to_dir} holds files no export wrote ({', '.join(foreign[:3])}"
                          f"{', ...' if len(foreign) > 3 else ''}): export into a new or empty folder")


def _bisection(record: Record, case: Case, bundle: str, dropped: tuple) -> str:
    from torchsim_diff.report.bisection import bisect
    return bisect(record, case, compile_setup(record, case, dropped), cwd=bundle).text()


def _adapter_bundle(record: Record, case: Case, to_dir: str, artifacts_dir: str | None, heading: str) -> str | None:
    """Ship the kernel the adapter fails on and a repro.py that runs the adapter alone; the
    artifact folder it came from (a replay on triton-spike when the record has none)."""
    source = artifacts_dir or record.reduced_artifacts or record.artifacts
    ttir = adapter_bundle.failing_kernel(source)
    if ttir is None:
        import tempfile
        source = adapter_bundle.replay_artifacts(case, tempfile.mkdtemp(prefix="torchsim-diff-adapter-"))
        ttir = adapter_bundle.failing_kernel(source)
    if ttir is None:
        return None
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_ENV, adapter_path
    if adapter_path():       # the quoted run finds the adapter where the route does
        os.environ.setdefault(ADAPTER_ENV, adapter_path())
    adapter_bundle.write_kernel(ttir, to_dir)
    adapter_bundle.record_provenance(ttir, to_dir)
    adapter_bundle.reduce_kernel(to_dir)
    head = [heading or title(record, case)]
    head.append(f"The adapter fails on Inductor's Triton kernel for `{expression(case, case.outputs)}` ({adapter_bundle.KERNEL_FILE}).")
    write_text(os.path.join(to_dir, "repro.py"), adapter_bundle.render_script("\n".join(head)))
    return source


def _plain_triton_kernel(record: Record, case: Case, to_dir: str, artifacts_dir: str | None,
                         heading: str) -> tuple:
    """A bug of Triton met on the triton route, shown as one plain @triton.jit launch
    (report.triton_kernel_script) when that repro.py reproduces it: (the run that did, "")
    and the shims go; else (None, why not), the torch.compile repro.py left as it was."""
    from torchsim_diff.report import triton_kernel_script as plain
    crashes = record.kind in Kind.values_where("no_values")
    capture = plain.capture_of(artifacts_dir or record.reduced_artifacts or record.artifacts)
    if capture is None:
        import tempfile
        ran = adapter_bundle.replay_artifacts(case, tempfile.mkdtemp(prefix="torchsim-diff-triton-"), stage=None,
                                              route="triton")
        capture = plain.capture_of(ran)
    if capture is None:
        return None, "the run that should fail left no kernel capture"
    try:
        plan = plain.plan_launch(case, capture, crashes)
    except plain.PlainKernelError as exc:
        return None, str(exc)
    with open(os.path.join(to_dir, "repro.py"), encoding="utf-8") as handle:
        harness_script = handle.read()
    write_text(os.path.join(to_dir, "repro.py"), plain.render_script(plan, heading or title(record, case)))
    outcome = run_repro(to_dir)
    if outcome[0] == 1 and (not crashes or _same_error(record.message, outcome[1])):
        os.unlink(os.path.join(to_dir, SHIMS_FILE))
        return outcome, ""
    write_text(os.path.join(to_dir, "repro.py"), harness_script)
    shown = "gives eager's values" if outcome[0] == 0 else f"ends with exit status {outcome[0]}"
    return None, f"the captured kernel, launched alone under plain TRITON_INTERPRET=1, {shown}"


CUDA_TWIN = "repro_cuda.py"     # a PyTorch bug met under Triton's interpreter, compiled for a GPU instead


def _write_cuda_twin(record: Record, case: Case, to_dir: str, heading: str, options: ScriptOptions,
                     run: bool) -> str:
    """repro_cuda.py: the same program and settings compiled by Inductor for a CUDA GPU, with
    no shims (PyTorch supports that route); what it gave where this was written (when `run`),
    or why it was not run."""
    twin = record.with_fields(route="triton-cuda", found_on=None)
    write_text(os.path.join(to_dir, CUDA_TWIN), render_script(twin, case, heading, dataclasses.replace(
        options, plain_kernel=False, not_plain="")))
    import torch
    if not run or not torch.cuda.is_available():
        return "not run where this report was written" + ("" if torch.cuda.is_available() else " (no CUDA GPU)")
    status, _out, _err = run_repro(to_dir, script=CUDA_TWIN)
    shown = {1: "reproduces the bug", 0: "does not reproduce it"}.get(status, f"exits {status}")
    return f"on {torch.cuda.get_device_name()} it {shown}"


def _same_error(message: str | None, output: str) -> bool:
    """Whether a plain script's output names the exception class the recorded message names last."""
    names = re.findall(r"\b([A-Z]\w*(?:Error|Exception))\b", message or "")
    return bool(names) and names[-1] in output


def _kernel_value_bundle(record: Record, case: Case, to_dir: str, artifacts_dir: str | None,
                         heading: str) -> str | None:
    """Ship the first launch that differs from Triton's interpreter and a repro.py that runs it
    on this host (report.kernel_bundle), when that repro.py reproduces; else leave the harness
    repro.py. The artifact folder it came from."""
    source = artifacts_dir or record.reduced_artifacts or record.artifacts
    if not source or not os.path.isdir(os.path.join(source, "kernels")):
        import tempfile
        source = adapter_bundle.replay_artifacts(case, tempfile.mkdtemp(prefix="torchsim-diff-kernel-"), stage=None)
    if source is None:
        return None
    head = [heading or title(record, case),
            f"Inductor's Triton kernel for `{expression(case, case.outputs)}` (kernel.py; kernel.ttir as the adapter "
            "reads it), one launch, lowered by the adapter and LLVM 19 and run on this host.",
            "Expected: what Triton's interpreter computes for the same launch."]
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_ENV, adapter_path
    if adapter_path():
        os.environ.setdefault(ADAPTER_ENV, adapter_path())
    try:
        launch = kernel_bundle.write_kernel_bundle(source, to_dir, "\n".join(head))
    except kernel_bundle.NoKernelRepro:
        return None
    reproduces = run_repro(to_dir)[0] == 1
    kernel_bundle.remove_built(to_dir)
    if reproduces:
        adapter_bundle.reduce_value_kernel(to_dir, *launch, check=lambda: run_repro(to_dir)[0] == 1)
        kernel_bundle.remove_built(to_dir)
        return source
    for name in (*kernel_bundle.SHIPPED, adapter_bundle.REDUCTION_FILE):   # the launch alone does not show it
        if os.path.exists(os.path.join(to_dir, name)):
            os.unlink(os.path.join(to_dir, name))
    write_text(os.path.join(to_dir, "repro.py"), render_script(record, case, heading))
    return None


# A PyTorch compile error met on triton-spike is in Inductor's Triton codegen, before any kernel
# runs: the triton route compiles the same kernels (torch and triton only). A value bug may
# depend on the executor (masked lanes Spike leaves undefined), so it stays on its route.
SCRIPT_ROUTES = {("pytorch", "triton-spike", "compile_error"): "triton"}


def script_record(record: Record) -> Record:
    """`record` with the route its repro.py runs (SCRIPT_ROUTES), the route it was met on as `found_on`."""
    route = SCRIPT_ROUTES.get((project_of(record).name, record.route, record.kind))
    return record.with_fields(route=route, found_on=record.route) if route else record


def entry_record(entry) -> Record:
    """A known corpus entry as a record write_bundle takes (`export corpora/known/X.json`)."""
    if not entry.route:
        raise BundleError(f"{entry.path}: not a known-bug entry (no 'route'); only known bugs have bundles")
    return entry.fields.record(entry.case)


def _case_of(record: Record) -> Case:
    if not isinstance(record, Record):
        raise BundleError("record has no 'case'; pass a results.jsonl record (Verdict.record())")
    from torchsim_diff.case.validate import validate_case
    try:   # records come from files: both the case and the reduced case are checked whole
        return without_unused_inputs(validate_case(record.case_or_reduced))
    except CaseError as exc:
        raise BundleError(f"record's case is invalid: {exc}") from None


def without_unused_inputs(case: Case) -> Case:
    """`case` without the inputs its program never reads (an unreduced case keeps them all),
    the others' storages pinned as explicit data: drawn values depend on an input's position."""
    read = {a for node in case.nodes for a in node["args"]} | set(case.outputs)
    if all(spec["name"] in read for spec in case.inputs):
        return case
    data = case.to_dict()
    views = layout.materialize_all(data)
    data["inputs"] = [{**spec, "data": values.encode(layout.storage_of(view))}
                      for spec, view in zip(data["inputs"], views) if spec["name"] in read]
    return Case.from_dict(data)


def write_text(path: str, text: str) -> None:
    """Write `path` whole through a temporary file and a rename: a symbolic link at `path` is
    replaced, never followed (files.replace_text)."""
    from torchsim_diff.files import replace_text
    replace_text(path, text)


# What a maintainer reads of a run: sources and IR, launch specs and logs; not compiled
# objects, buffers, or the compiler's caches.
SHIPPED_SUFFIXES = (".py", ".ttir", ".mlir", ".json", ".log")


def _keep_shipped(run_dir: str) -> None:
    """Leave in `run_dir` (the folder the harness repro.py ran in) only its artifacts that ship."""
    shutil.rmtree(os.path.join(run_dir, "workers"), ignore_errors=True)
    for root, _dirs, names in os.walk(run_dir):
        for name in names:
            if not (name.endswith(SHIPPED_SUFFIXES) and os.path.relpath(root, run_dir).startswith("artifacts")):
                os.unlink(os.path.join(root, name))


def _copy_artifacts(source: str | None, target: str) -> list:
    """Copy the artifact folder `source` into `target` (the files that ship: SHIPPED_SUFFIXES);
    the files copied, relative to the bundle.

    Only regular files and folders travel: a symlink is followed only where it stays inside
    `source`, and FIFOs, devices and sockets are left out, so a bundle holds what the run wrote
    and nothing it merely points at (and copying never blocks on a FIFO)."""
    if not source or not os.path.isdir(source):
        return []
    root = os.path.realpath(source)
    for folder, _dirs, names in os.walk(root):        # symlinked folders are listed, not entered
        for name in names:
            path = os.path.realpath(os.path.join(folder, name))
            if not path.startswith(root + os.sep) or not _regular(path) or not name.endswith(SHIPPED_SUFFIXES):
                continue
            destination = os.path.join(target, os.path.relpath(os.path.join(folder, name), root))
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.copyfile(path, destination)
    return _files_under(target, os.path.dirname(target))


def _regular(path: str) -> bool:
    import stat
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _files_under(folder: str, start: str) -> list:
    found = []
    for root, _dirs, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, n), start) for n in names]
    return sorted(found)


# -- ISSUE.md ------------------------------------------------------------------------------
OUTPUT_HEADING = "Output of `python repro.py`:"
NOT_PLAIN_MARK = f"Shown through torch.compile, {checklist.NOT_PLAIN_MARK}"


# Text from outside (a compiler's message, a cause's summary or title) is data in ISSUE.md too:
# raw HTML in it would render on the tracker. It goes inside a code fence longer than any run
# of backticks it holds, so it cannot close the fence; where it must stand outside one (a
# title, a summary), each '<' outside its code spans is written as its entity.
_BACKTICKS = re.compile(r"`+")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1", re.S)


def fenced(text: str, language: str = "") -> list:
    """`text` as the lines of a code fence it cannot close."""
    fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return [fence + language, text, fence]


def markdown_text(text: str) -> str:
    """`text` for ISSUE.md outside a fence: '<' outside code spans as '&lt;' (no HTML tag can
    start); code spans, which show their text as it is, kept."""
    parts, last = [], 0
    for span in _CODE_SPAN.finditer(text):
        parts += [text[last:span.start()].replace("<", "&lt;"), span.group(0)]
        last = span.end()
    return "".join(parts) + text[last:].replace("<", "&lt;")


def is_torch_compile_bug(record: Record) -> bool:
    """A PyTorch bug whose repro.py runs torch.compile: filed with PyTorch's pt2 template."""
    return project_of(record).name == "pytorch" and route_facts(record.route).torch_compile


# The draft for a cause upstream already has: a comment for its thread (what this case adds),
# or the re-test of its fix; a new cause gets an issue in the project's template.
THREAD_DRAFTS = {
    "reported": "<!-- A comment for {url}: already reported there; this case adds the trigger, program and versions "
                "below -->",
    "fixed": "<!-- Re-test of the fix of {url}: run repro.py on a build with the fix (exit 0: fixed, 1: still "
             "reproduces); no new issue -->",
}


def render_issue(record: Record, case: Case, bundle: str, artifacts: list, *, shims: list | None = None,
                 repro_output: str | None = None, analysis: str = "", heading: str = "",
                 bisection: str = "", tolerance: str = "", options: ScriptOptions = ScriptOptions(),
                 status: str = "new", cuda_twin: str = "") -> str:
    """The issue text in the upstream project's template sections, in its own terms. shims:
    the triton shims the bug needs (minimise_shims); repro_output: what a run of repro.py
    printed (quoted instead of the recorded message); analysis: what is known of the cause.
    A torch.compile bug follows the pt2 template: the run's output under its error-log
    section, the fuzzer note its fuzzer block asks for, the ablation it asks for (bisection:
    CompilerBisector's result, report.bisection) and collect_env's whole output. status: a
    cause upstream has ("reported", "fixed") gets the draft of a comment for its thread instead
    (THREAD_DRAFTS), without the template's sections. cuda_twin: what repro_cuda.py gave, where
    the bundle has one."""
    project = project_of(record)
    pt2 = is_torch_compile_bug(record) and not options.eager_bug
    bug, versions = project.sections
    with open(os.path.join(bundle, "repro.py"), encoding="utf-8") as handle:
        script = handle.read()
    kernel_only = _kernel_only(record, bundle)
    launch = _kernel_launch(bundle)
    upstream = record.upstream if record.upstream and record.upstream.startswith("https://") else ""
    thread = status if upstream and status in THREAD_DRAFTS else "new"
    from torchsim_diff.report import triton_kernel_script
    if options.plain_kernel:
        described = triton_kernel_script.description(expression(case, case.outputs),
                                                      record.kind in Kind.values_where("no_values"))
    else:
        described = _launch_description(record, case) if launch else _description(record, case, kernel_only, options)
    heading = markdown_text(heading) if heading else title(record, case)
    if thread == "new":
        parts = [f"<!-- File at {PT2_TEMPLATE if pt2 else project.file_at} -->", f"# {heading}", "", bug, "",
                 described]
    else:
        parts = [THREAD_DRAFTS[thread].format(url=upstream), f"# {heading}", "", described]
    parts += ["", *adapter_bundle.lead(bundle)] if record.route == "triton-spike" else []
    parts += ["", markdown_text(analysis)] if analysis else []
    parts += ["", FUZZER_NOTE] if pt2 and thread == "new" else []
    parts += ["", tolerance] if tolerance else []
    parts += ["", f"{NOT_PLAIN_MARK}: {markdown_text(options.not_plain)}."] if options.not_plain else []
    parts += ["", f"Ablation: {bisection}."] if bisection else []
    if upstream and thread == "new":
        parts += ["", f"Related: {markdown_text(upstream)}"]
    output = (repro_output or record.message or "").strip()
    parts += ["", *fenced(script.rstrip("\n"), "python"), ""]
    parts += [PT2_ERROR_SECTION, ""] if pt2 and thread == "new" else []
    parts += [OUTPUT_HEADING, "", *fenced(output), ""]
    parts += _beside_the_script(record, case, bundle, shims)
    if cuda_twin:
        parts += [f"`{CUDA_TWIN}` runs the same program with the same settings compiled by Inductor for a CUDA "
                  f"GPU, with no shims: {cuda_twin}.", ""]
    if options.plain_kernel:
        text = triton_kernel_script.versions_text()
    else:
        text = launch_versions_text() if launch else versions_text(record, case, kernel_only, whole_env=pt2,
                                                                   dropped=options.dropped)
    parts += [versions if thread == "new" else "Versions:", "", *fenced(text.rstrip("\n")), ""]
    if artifacts:
        parts += ["Files from the run (in the bundle): " + ", ".join(f"`{a}`" for a in artifacts[:20]), ""]
    return quoted_output.without_machine_paths("\n".join(parts), bundle)


def _beside_the_script(record: Record, case: Case, bundle: str, shims) -> list:
    """What the files shipped next to repro.py are, one paragraph each."""
    from torchsim_diff.report import mlir_host
    parts = []
    if record.route == "triton" and os.path.exists(os.path.join(bundle, SHIMS_FILE)):
        from torchsim_diff.routes.triton.shims import EFFECTS
        needed = (" This bug needs: " + "; ".join(f"{s.strip('_')} ({EFFECTS[s]})" for s in shims) + ".") \
            if shims else ""
        parts += [f"`{SHIMS_FILE}` (beside the script) lets Inductor's Triton kernels run on CPU tensors "
                  f"under `TRITON_INTERPRET=1`.{needed}", ""]
    if runs_on_host(record, case):
        parts += ["`mlir_host.py` (beside the script) lowers torch-mlir's linalg output to LLVM (the pass "
                  "pipeline of torch-mlir's RefBackend, results as out-parameters) and runs it on this host "
                  "with MLIR's ExecutionEngine.", ""]
    if os.path.exists(os.path.join(bundle, mlir_host.TORCH_IR)):
        lowered = (f" and `{mlir_host.LINALG_IR}` after torch-mlir's lowering to linalg-on-tensors"
                   if os.path.exists(os.path.join(bundle, mlir_host.LINALG_IR)) else "")
        parts += [f"`{mlir_host.TORCH_IR}` is the program as torch-mlir's FX importer emits it (torch.export "
                  f"with torch-mlir's decomposition table, none in the import){lowered}. With torch-mlir "
                  "alone:", "", "```", mlir_host.opt_command(), "```", ""]
        for name in (mlir_host.TORCH_IR, mlir_host.LINALG_IR):
            parts += _inline_ir(bundle, name)
    if _kernel_only(record, bundle):
        original = os.path.join(bundle, adapter_bundle.ORIGINAL_FILE)
        reduced = (f" reduced from its {_line_count(original)} lines as told above (the whole kernel is "
                   f"`{adapter_bundle.ORIGINAL_FILE}`)") if os.path.exists(original) else ""
        beside = (f" `{adapter_bundle.REDUCED_FILE}` is it reduced (above)." if
                  os.path.exists(os.path.join(bundle, adapter_bundle.REDUCED_FILE)) else "")
        led = bool(adapter_bundle.lead(bundle))
        parts += [f"`{adapter_bundle.KERNEL_FILE}` is the kernel as it reached the adapter{',' if reduced else ''}{reduced}."
                  f"{beside}" + ("" if led else " " + adapter_bundle.provenance_text(None)), ""]
        parts += [] if led else _inline_ir(bundle, adapter_bundle.KERNEL_FILE)
    if _kernel_launch(bundle):
        parts += [f"`{kernel_bundle.LAUNCH_FILE}` holds every buffer of the launch before it runs and as "
                  f"Triton's interpreter leaves it (`{kernel_bundle.SOURCE_FILE}` under `TRITON_INTERPRET=1`, "
                  f"same grid and arguments). `{kernel_bundle.LINALG_FILE}` is the adapter's output.", ""]
        parts += _inline_ir(bundle, kernel_bundle.LINALG_FILE)
    elif harness_only(record.route) and not _kernel_only(record, bundle):
        parts += [f"`repro.py` runs `case.json` through torchsim-diff, the only driver of this compiler "
                  "chain.", ""]
    return parts


def _kernel_only(record: Record, bundle: str) -> bool:
    """Whether the bundle reproduces a triton-spike bug on one kernel alone (kernel.ttir)."""
    return record.route == "triton-spike" and os.path.exists(os.path.join(bundle, adapter_bundle.KERNEL_FILE))


def _kernel_launch(bundle: str) -> bool:
    """Whether the bundle runs one launch of its kernel on the host (report.kernel_bundle)."""
    return os.path.exists(os.path.join(bundle, kernel_bundle.LAUNCH_FILE))


def _line_count(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        return len(handle.read().splitlines())


INLINE_IR_LINES = 40        # IR files up to this long are shown in ISSUE.md too


def _inline_ir(bundle: str, name: str) -> list:
    """`name` (an IR file of the bundle) as a code block, when it is short."""
    path = os.path.join(bundle, name)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        text = handle.read().strip("\n")
    return [f"`{name}`:", "", *fenced(text, "mlir"), ""] if len(text.splitlines()) <= INLINE_IR_LINES else []


def _description(record: Record, case: Case, kernel_only: bool = False, options: ScriptOptions = ScriptOptions()) -> str:
    if kernel_only:
        return (f"triton-adapter-opt, run with triton-ascend's ttir_to_linalg pass list (its CPU path), fails on "
                f"`{adapter_bundle.KERNEL_FILE}`: the Triton kernel Inductor generates for "
                f"`{expression(case, case.outputs)}`.")
    layouts = "; ".join(f"`{name}`: shape {s['shape']}, strides {tuple(s['layout']['strides'])}"
                        + (f", storage offset {s['layout']['offset']}" if s["layout"]["offset"] else "")
                        + (", written in place" if s.get("mutated") else "")
                        for s, name in zip(case.inputs, _input_letters(len(case.inputs))))
    shown = expression(case, failing_outputs(record, case))
    if options.eager_form:
        return f"{eager_script.description(shown, options.eager_form)} Inputs: {layouts or 'none'}."
    if options.eager_bug:       # the script could only show it against a compiler
        return (f"`{shown}` gives different values in eager PyTorch and when compiled with {_compiler_name(record)}, "
                f"and eager is the side that is wrong: the defect is in its own kernel (below). Inputs: "
                f"{layouts or 'none'}.")
    what = "fails" if record.kind in Kind.values_where("no_values") else "disagrees with eager PyTorch"
    truth = "" if record.kind in Kind.values_where("no_values") else \
        " Eager agrees with the same program run in float64."
    return (f"`{shown}` {what} when compiled with "
            f"{_compiler_name(record)}{_found_on(record)}. Inputs: {layouts or 'none'}.{truth} "
            f"{_divergence(record, case)}").rstrip()


def _launch_description(record: Record, case: Case) -> str:
    outcome = ("crashes on a launch that Triton's interpreter runs" if record.kind == Kind.CRASH.value else
               "gives values that differ from Triton's interpreter on the same launch")
    return (f"Inductor's Triton kernel for `{expression(case, case.outputs)}` ({kernel_bundle.SOURCE_FILE}), "
            f"lowered by triton-adapter-opt with triton-ascend's ttir_to_linalg pass list (its CPU path) and "
            f"compiled for this host by LLVM 19, {outcome}. `repro.py` runs that one launch and compares "
            f"every buffer.")


def _compiler_name(record: Record) -> str:
    return route_facts(record.route).compiler.get(project_of(record).name, record.route)


def _found_on(record: Record) -> str:
    if not record.found_on:
        return ""
    through = route_facts(record.found_on).compiler.get(project_of(record).name, record.found_on)
    return f" (found through {through}, which compiles the same kernels)"


# collect_env lines a compiler bug report needs (the rest is GPU and driver detail).
ENV_LINES = ("PyTorch version", "Is debug build", "OS:", "GCC version", "Clang version", "Python version",
             "Python platform", "Is CUDA available", "Model name", "[pip3] torch==", "[pip3] triton==", "[pip3] numpy==")


def versions_text(record: Record, case: Case, kernel_only: bool = False, whole_env: bool = False,
                  dropped: tuple = ()) -> str:
    """The versions and options repro.py runs with: for PyTorch, the relevant lines of torch's
    collect_env (all of it with `whole_env`, as the pt2 template asks) and the CPU capability
    ATen dispatches to; the compile settings the script writes; the upstream tool's version; the
    route's own report where torchsim-diff drives it. kernel_only: the adapter alone on
    kernel.ttir (and the Triton that wrote the TTIR)."""
    import platform

    import torch
    if kernel_only:
        report = _route_report(record.route)
        adapter = next((f"{k}: {v}" for k, v in report.items() if "adapter" in k), "triton-adapter-opt: unknown")
        return f"{adapter}\ntriton (wrote kernel.ttir): {dist_version('triton')}\n"
    lines = [f"torch: {torch.__version__}", f"python: {platform.python_version()}",
             f"CPU capability: {torch.backends.cpu.get_cpu_capability()}"]
    route, facts = record.route, route_facts(record.route)
    if facts.torch_compile:
        lines += [line.split("  #")[0] for line in compile_setup(record, case, dropped).splitlines()]
    lines += [f"{dist}: {dist_version(dist)}" for dist in facts.dists] + list(facts.settings)
    if harness_only(route):
        lines += [f"{k}: {v}" for k, v in _route_report(route).items()]
    text = "\n".join(lines) + "\n"
    if whole_env:      # the fuzzer's own package is no part of the repro
        text += "\n" + "\n".join(line for line in _collect_env().splitlines() if "torchsim" not in line) + "\n"
    elif project_of(record).name == "pytorch":
        text += "\n" + "\n".join(line for line in _collect_env().splitlines() if line.startswith(ENV_LINES)) + "\n"
    return text


def launch_versions_text() -> str:
    """The versions a kernel-launch repro.py (report.kernel_bundle) runs with."""
    import torch
    adapter = next((f"{k}: {v}" for k, v in _route_report("triton-spike").items() if "adapter" in k),
                   "triton-adapter-opt: unknown")
    lines = [adapter, f"triton (wrote kernel.ttir; interpreter for the expected values): {dist_version('triton')}",
             f"torch: {torch.__version__}"]
    from torchsim_diff.report.mlir_opt_bundle import tool_version
    lines += [f"{tool}: {tool_version(tool)}" for tool in ("mlir-opt-19", "clang-19")]
    return "\n".join(lines) + "\n"


def dist_version(name: str) -> str:
    import importlib.metadata
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _route_report(route: str) -> dict:
    from torchsim_diff.routes import UnknownRoute, route_class
    try:
        return route_class(route)().versions()
    except (UnknownRoute, ImportError, AttributeError) as exc:
        return {"error": f"{route}: {exc}"}
    except Exception as exc:  # noqa: BLE001 - a broken toolchain still gets its report
        return {"error": f"{type(exc).__name__}: {exc}"}


@functools.lru_cache(maxsize=1)
def _collect_env() -> str:
    try:
        done = subprocess.run([sys.executable, "-m", "torch.utils.collect_env"], capture_output=True, text=True,
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(torch.utils.collect_env failed: {exc})\n"
    return done.stdout or f"(torch.utils.collect_env printed nothing: {done.stderr.strip()[:200]})\n"
