"""A bundle's ISSUE.md: the draft in its upstream's template and words, the repro and its output,
the versions and options it runs with."""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys

from torchsim_diff.case.graph import Case
from torchsim_diff.buckets.projects import route_facts
from torchsim_diff.report import adapter_bundle, checklist, eager_script, kernel_bundle, quoted_output
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record
from torchsim_diff.report.issue_title import _input_letters, expression, failing_outputs, first_op, project_of, title
from torchsim_diff.report.repro_runs import TIMED_OUT, run_repro, write_text
from torchsim_diff.report.repro_script import (CUDA_TWIN, SHIMS_FILE, ScriptOptions, compile_setup, harness_only,
                                              runs_on_host)


# torch.compile bugs go to PyTorch's pt2 template, whose fuzzer block asks for the label below.
PT2_TEMPLATE = "https://github.com/pytorch/pytorch/issues/new?template=pt2-bug-report.yml"


PT2_ERROR_SECTION = "### Error logs"


FUZZER_NOTE = ("Found by a differential fuzzer: the compiled program against eager PyTorch, with the same program "
               "in float64 as the higher-precision baseline. Suggested label: `topic: fuzzer`.")


def _divergence(record: Record, case: Case) -> str:
    if record.kind in Kind.values_where("no_values"):
        where = (f"`{record.first_op}`" if record.first_op else
                 ", ".join(f"`{op}`" for op in dict.fromkeys(n["op"] for n in case.nodes)))
        return f"It fails while compiling or running, in {where}."
    op = first_op(record, case)
    return f"The first op whose result differs is `{op}`." if op else ""


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
        described = _launch_description(record, case, bundle) if launch else _description(record, case, kernel_only, options)
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


def _launch_description(record: Record, case: Case, bundle: str) -> str:
    outcome = ("crashes on a launch that Triton's interpreter runs" if record.kind == Kind.CRASH.value else
               "gives values that differ from Triton's interpreter on the same launch")
    reduced = adapter_bundle.reduction(bundle) or {}
    runs = ("`repro.py` runs the reduced kernel's launch once per malloc fill and compares what it got wrong "
            "between the two runs (below)." if reduced.get("mode") == "fill" and
            reduced.get("file") == adapter_bundle.KERNEL_FILE else "`repro.py` runs that one launch and compares every buffer.")
    return (f"Inductor's Triton kernel for `{expression(case, case.outputs)}` ({kernel_bundle.SOURCE_FILE}), "
            f"lowered by triton-adapter-opt with triton-ascend's ttir_to_linalg pass list (its CPU path) and "
            f"compiled for this host by LLVM 19, {outcome}. {runs}")


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
