"""repro.py for a Triton-to-linalg adapter bug: the failing kernel's TTIR through triton-adapter-opt.

A `triton-spike` compile error at the adapter stage needs neither torch nor our harness to
reproduce: the bundle ships the kernel as the route fed it to the adapter (kernel.ttir, after
the route's TTIR fix-ups) and a script that runs the adapter's pass list on it, as the
adapter project's maintainers would. It exits 1 while the adapter fails (non-zero exit,
abort, or a Triton op left unconverted in its output), 0 once it converts the kernel, and 2
when triton-adapter-opt is missing.
"""
from __future__ import annotations

import json
import os
import re
import time

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
REDUCED_FILE = "kernel.reduced.ttir"      # a value bug's reduced kernel, when repro.py runs the whole one
REDUCTION_FILE = "reduction.json"         # what the reduction found: lines, seconds, the pass, the construct


def reduce_kernel(bundle: str, budget_s: float | None = None) -> tuple:
    """Reduce the bundle's kernel.ttir at IR level (report.ttir_reduce) where the adapter is at
    hand, keeping the kernel as it was beside it, and record in reduction.json the pass that
    fails and the construct it fails on; (lines before, lines after), equal when nothing was
    removed or no adapter runs here."""
    from torchsim_diff.report import ttir_reduce
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, adapter_path
    path = os.path.join(bundle, KERNEL_FILE)
    original = _read(path)
    tool = adapter_path()
    if not tool:
        return len(original.splitlines()), len(original.splitlines())
    started = time.monotonic()
    failures = ttir_reduce.adapter_failures(original, tool, ADAPTER_PASSES)
    reduced = ttir_reduce.reduce_ttir(original, tool, ADAPTER_PASSES, budget_s or ttir_reduce.BUDGET_S)
    seconds = time.monotonic() - started
    if reduced != original:
        os.replace(path, os.path.join(bundle, ORIGINAL_FILE))
        _write(path, reduced)
    at = min((k for k in (ttir_reduce.failing_pass(reduced, tool, ADAPTER_PASSES, f) for f in failures)
              if k is not None), default=None)
    before = ttir_reduce.run_adapter(reduced, tool, ADAPTER_PASSES[:at]) if at else None
    seen = ttir_reduce.triton_ops(before.stdout if before is not None and not before.returncode else reduced)
    _record(bundle, kind="compile_error", file=KERNEL_FILE, lines=[len(original.splitlines()),
            len(reduced.splitlines())], seconds=round(seconds, 1), passes={} if at is None else {str(at): "fails"},
            construct=_construct(reduced, seen))
    return len(original.splitlines()), len(reduced.splitlines())


def reduce_value_kernel(bundle: str, kernel: str, grid: tuple, args: list, exact: bool,
                        budget_s: float | None = None, check=None, title: str = "") -> tuple:
    """Reduce the kernel of a value bundle (report.kernel_bundle) at IR level with the adapter
    and a host run as the oracle (report.ttir_value_reduce). The reduced kernel replaces the
    whole one (kept as kernel.original.ttir), unless `check()` (repro.py still reproduces) then
    says no: it then goes beside it (kernel.reduced.ttir). In `expected` mode launch.pt's expected
    values follow the stores it keeps; in `fill` mode repro.py (titled `title`) judges it by the
    two fills. (lines before, lines after)."""
    from torchsim_diff.report import ttir_reduce, ttir_value_reduce as value
    from torchsim_diff.report.kernel_bundle import LAUNCH_FILE
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES, adapter_path
    path = os.path.join(bundle, KERNEL_FILE)
    original = _read(path)
    tool = adapter_path()
    launch = value.Launch.from_bundle(bundle, kernel, grid, args, exact) if tool else None
    found = value.reduce_launch(original, launch, tool, budget_s or value.BUDGET_S) if tool else None
    if found is None:
        return len(original.splitlines()), len(original.splitlines())
    shipped = KERNEL_FILE
    if found.text != original and found.mode == "fill":
        shipped = _ship_fill_kernel(bundle, found, (kernel, grid, args, exact), title, check)
    elif found.text != original:
        import torch
        with open(os.path.join(bundle, LAUNCH_FILE), "rb") as handle:
            saved = handle.read()
        os.replace(path, os.path.join(bundle, ORIGINAL_FILE))
        _write(path, found.text)
        kernel_ir = ttir_reduce.Kernel.parse(ttir_reduce.generic_form(found.text, tool))
        written = sorted(set(value.store_targets(kernel_ir, launch).values()))
        torch.save({"before": launch.before, "expected": value.expected_after(launch, written)},
                   os.path.join(bundle, LAUNCH_FILE))
        if check is not None and not check():
            os.replace(os.path.join(bundle, ORIGINAL_FILE), path)
            with open(os.path.join(bundle, LAUNCH_FILE), "wb") as handle:
                handle.write(saved)
            shipped = REDUCED_FILE
            _write(os.path.join(bundle, REDUCED_FILE), found.text)
    lowered = ttir_reduce.lowering_passes(found.text, tool, ADAPTER_PASSES)
    _record(bundle, kind="wrong_values", file=shipped, mode=found.mode, buffers=found.buffers, lines=list(found.lines),
            seconds=found.seconds, evidence=found.evidence, passes={str(k): "lowers " + ", ".join(
                ttir_reduce.construct(o for o, at in lowered.items() if at == k)) for k in sorted(set(lowered.values()))},
            construct=_construct(found.text))
    return found.lines


def _ship_fill_kernel(bundle: str, found, launch: tuple, title: str, check) -> str:
    """The file the reduced kernel of a `fill` reduction is shipped as: kernel.ttir, with a
    repro.py that judges it by the fills, where that repro.py reproduces; else kernel.reduced.ttir
    beside the whole kernel and its repro.py, as they were."""
    from torchsim_diff.report import kernel_bundle
    kernel, repro = os.path.join(bundle, KERNEL_FILE), os.path.join(bundle, "repro.py")
    whole_repro = _read(repro)
    os.replace(kernel, os.path.join(bundle, ORIGINAL_FILE))
    _write(kernel, found.text)
    judged = ", ".join(f"`{name}`" for name in found.buffers)
    head = (f"{title}\nA kernel reduced from Inductor's Triton kernel (kernel.original.ttir; kernel.py its source), "
            f"one launch, lowered by the adapter and LLVM 19 and run on this host twice, with malloc's memory filled "
            f"with {kernel_bundle.FILLS[0]}, then {kernel_bundle.FILLS[1]}.\nExpected: {judged} the same under both "
            "fills: the kernel reads only memory it wrote.")
    _write(repro, kernel_bundle.render_script(head, *launch, fill_judged=tuple(found.buffers)))
    if check is None or check():
        return KERNEL_FILE
    os.replace(os.path.join(bundle, ORIGINAL_FILE), kernel)
    _write(repro, whole_repro)
    _write(os.path.join(bundle, REDUCED_FILE), found.text)
    return REDUCED_FILE


def _construct(ttir: str, triton_ops: set | None = None) -> list:
    """The construct of a reduced kernel (ttir_reduce.construct): its Triton ops (or `triton_ops`,
    those seen before the failing pass) and math ops, with its arith ops for a kernel of addresses."""
    from torchsim_diff.report import ttir_reduce
    ops = ttir_reduce.triton_ops(ttir) if triton_ops is None else triton_ops
    return ttir_reduce.construct(ops | ttir_reduce.dialect_ops(ttir, "math"), ttir_reduce.dialect_ops(ttir, "arith"))


def _record(bundle: str, **fields) -> None:
    """Add `fields` to the bundle's reduction.json."""
    _write(os.path.join(bundle, REDUCTION_FILE), json.dumps({**(reduction(bundle) or {}), **fields}, indent=1) + "\n")


def record_provenance(fixed_ttir: str, bundle: str) -> None:
    """Note in reduction.json where the bundle's kernel.ttir came from (provenance)."""
    _record(bundle, provenance=provenance(fixed_ttir))


def lead(bundle: str) -> list:
    """ISSUE.md's first lines for an adapter bundle: the construct, the pass that fails on it or
    lowers it (first), the command with the whole pass list, the reduced kernel, its provenance."""
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_PASSES
    told = reduction(bundle)
    if not told or not isinstance(told.get("lines"), list):
        return []
    name = told.get("file") if told.get("file") in (KERNEL_FILE, REDUCED_FILE) else KERNEL_FILE
    before, after = (told["lines"] + [0, 0])[:2]
    construct = [c for c in told.get("construct", []) if isinstance(c, str)]
    passes = {int(k): v for k, v in told.get("passes", {}).items() if str(k).isdigit() and int(k) < len(ADAPTER_PASSES)}
    shown = ", ".join(f"`{c}`" for c in construct[:3]) or "the ops below"
    out = [f"**Reduced kernel**: `{name}`, {after} lines of TTIR (the kernel as it reached the adapter had {before}). "
           + ("Every op and operand the failure does not need was removed, with triton-adapter-opt as the judge "
              "(the same first error; for a crash, at the same place in the adapter's code: the same innermost "
              "frames of its stack dump)." if told.get("kind") == "compile_error" else _value_judge(told)), ""]
    if told.get("kind") == "compile_error" and passes:
        at = min(passes)
        out += [f"The construct: {shown}. The pass that fails on it: `{ADAPTER_PASSES[at]}` "
                f"(pass {at + 1} of {len(ADAPTER_PASSES)}; the passes before it convert the kernel without error).", ""]
    elif passes:
        lowering = [f"`{ADAPTER_PASSES[k]}` ({what}, pass {k + 1} of {len(ADAPTER_PASSES)})"
                    for k, what in sorted(passes.items(), key=lambda kv: not any(c in kv[1] for c in construct[:1]))]
        out += [f"The construct: {shown}. The passes that lower it, the one that lowers {construct[0] if construct else 'it'} "
                f"first: " + "; ".join(lowering) + ".", ""]
    out += ["With triton-adapter-opt alone (triton-ascend 3.2.0's ttir_to_linalg pass list, its CPU path):", "",
            "```", f"triton-adapter-opt {name} \\", *(f"  '{p}' \\" for p in ADAPTER_PASSES[:-1]),
            f"  '{ADAPTER_PASSES[-1]}'", "```", ""]
    text = _read(os.path.join(bundle, name)).strip("\n") if os.path.exists(os.path.join(bundle, name)) else ""
    if text and len(text.splitlines()) <= LEAD_IR_LINES:
        out += [f"`{name}`:", "", "```mlir", text, "```", ""]
    out += [provenance_text(told.get("provenance")), ""]
    return out


LEAD_IR_LINES = 60


def _value_judge(found: dict) -> str:
    buffers = ", ".join(f"`{b}`" for b in found.get("buffers", []) if isinstance(b, str))
    if found.get("mode") == "fill":
        return ("Every op and operand was removed that the defect does not need, with the adapter and a run of its "
                "output on this host as the judge: the kernel, run twice with every byte it mallocs filled first "
                f"with 0x47, then with 0xC7, must still leave different values in {buffers} (a kernel that reads "
                "only memory it wrote cannot depend on the fill; a masked load without `other`, whose masked-off "
                "lanes Triton leaves undefined, was given `other` = 0 first). " + (f"Here: {found['evidence']}. " if
                                                                      found.get("evidence") else "")
                + (f"`repro.py` runs it twice, once per fill, and compares {buffers} between the runs; the kernel "
                   f"as found is `{ORIGINAL_FILE}`." if found.get("file") == KERNEL_FILE else
                   f"`repro.py` runs the whole kernel (`{KERNEL_FILE}`) against Triton's interpreter."))
    return ("Triton's interpreter knows the right values only for the whole kernel, so the reduction removed only "
            f"what the wrong buffer(s) {buffers} are not computed from (stores to other buffers and the ops only "
            "they read), judged by the adapter and a run of its output on this host: they must still differ from "
            "the interpreter's values.")


def provenance_text(found) -> str:
    """One paragraph: the TTIR's provenance (record_provenance's record)."""
    found = found if isinstance(found, dict) else {}
    rewrites = [r for r in found.get("rewrites", []) if isinstance(r, dict)]
    changed = ("; ".join(f"{r.get('name')}: {r.get('why')}" for r in rewrites) if rewrites else
               "none of them changed this kernel") if found.get("rewrites_known") else "which of them applied is not recorded"
    return (f"Provenance: Inductor's Triton kernel (torch {found.get('torch', 'unknown')}), lowered to TTIR by Triton "
            f"{found.get('triton', 'unknown')} (CPU target); that TTIR was then rewritten for the adapter's older "
            f"Triton dialect (triton-ascend 3.2.0 reads Triton 3.2's), by textual rewrites ({changed}). The adapter "
            "reads the rewritten text.")


def reduction(bundle: str) -> dict | None:
    """The bundle's reduction.json, None where it has none or it is not ours."""
    try:
        with open(os.path.join(bundle, REDUCTION_FILE), encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def provenance(fixed_ttir: str) -> dict:
    """Where the kernel's TTIR came from: the versions that wrote it and the route's rewrites
    (routes.triton_spike.fixups) that changed it, read off the unfixed kernel.ttir beside it."""
    from torchsim_diff.report.issue_text import dist_version
    from torchsim_diff.routes.triton_spike.fixups import TTIR_FIXUPS
    unfixed = os.path.join(os.path.dirname(fixed_ttir), KERNEL_FILE)
    changed = []
    if os.path.exists(unfixed):
        text = _read(unfixed)
        for fixup in TTIR_FIXUPS:
            new = fixup(text)
            if new != text:
                changed.append({"name": fixup.name, "why": fixup.why})
            text = new
    return {"torch": dist_version("torch"), "triton": dist_version("triton"), "rewrites": changed,
            "rewrites_known": os.path.exists(unfixed)}


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


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
if done.returncode:  # a stack dump is long: its size, then the innermost frames of the adapter's own code
    frames = [line.strip() for line in done.stderr.splitlines() if re.match(r"\\s*#\\d+ 0x", line)]
    inner = [re.sub(r"0x[0-9a-f]+ [(]\\S*/", "(", f) for f in frames[next(
        (k for k, f in enumerate(frames) if "triton-adapter-opt+" not in f), 0):] if "triton-adapter-opt+" in f][:3]
    dump = [f"stack dump: {{len(frames)}} frames; innermost in triton-adapter-opt:", *inner] if frames else []
    sys.exit(print(f"REPRODUCES: triton-adapter-opt exited {{done.returncode}}:", *why[:4], *dump, sep="\\n") or 1)
left = set(re.findall(r'^\\s*(?:%[\\w#:]+(?:, %[\\w#:]+)* = )?"?(tt\\.\\w+)', done.stdout, re.M)) - {{"tt.reduce.return"}}
if left:
    sys.exit(print(f"REPRODUCES: Triton op(s) {{', '.join(sorted(left))}} left unconverted in the output") or 1)
print("FIXED: triton-adapter-opt converted the kernel")
''', doc)
