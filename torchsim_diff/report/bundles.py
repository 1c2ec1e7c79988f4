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
import os
import re
import shutil

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.buckets.projects import route_facts
from torchsim_diff.report import adapter_bundle, eager_script, kernel_bundle, plain_script
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record
# The parts of a bundle, each its own module: callers import a part's names from the part.
from torchsim_diff.report.issue_text import is_torch_compile_bug, quoted_run, render_issue, run_script
from torchsim_diff.report.issue_title import BundleError, expression, project_of, title
from torchsim_diff.report.repro_runs import minimise_shims, run_repro, write_text
from torchsim_diff.report.repro_script import (CUDA_TWIN, HARNESS_RUN_DIR, OPTIONAL_SETTINGS,
                                               SHIM_CALLS, SHIMS_FILE, ScriptOptions, compile_setup, harness_only,
                                               render_script, runs_on_host, shims_source, uses_tolerances)


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
        adapter_bundle.reduce_value_kernel(to_dir, *launch, check=lambda: run_repro(to_dir)[0] == 1, title=head[0])
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
