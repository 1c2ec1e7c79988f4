"""What each upstream asks of a fuzzer's report, checked on a written bundle.

PyTorch's pt2 template asks fuzzer reports to keep tolerances (never an atol of 0 on floats),
to compare no indices that max/min-like ops return, and for an ablation; Triton asks for a
plain `@triton.jit` kernel and its launch; every upstream wants
a short script that runs with its own tools, loads no pickle, and names no path of the
reporter's machine. `problems(bundle)` lists what a bundle misses, one line each.
"""
from __future__ import annotations

import ast
import os
import re

from torchsim_diff.report import quoted_output

SHIM_LINES = 60
DRAFT_MARKS = ("<!-- File at https://", "<!-- A comment for https://", "<!-- Re-test of the fix of https://")
PT2_MARK = "template=pt2-bug-report.yml"
TRITON_MARK = "github.com/triton-lang/triton/issues/new"
# Triton asks for a plain @triton.jit kernel and its launch; a draft through torch.compile says why not.
NOT_PLAIN_MARK = "not as one plain `@triton.jit` launch"
FLOAT_REASON = re.compile(r"(float16|bfloat16|float32|float64)")


def problems(bundle: str) -> list:
    """The checklist lines `bundle` (a folder export wrote) fails."""
    issue = _read(bundle, "ISSUE.md")
    script = _read(bundle, "repro.py")
    found = []
    if not issue.startswith(DRAFT_MARKS):
        found.append("ISSUE.md names no template, thread or fix to file at")
    if PT2_MARK in issue.splitlines()[0] and "\nAblation: " not in issue:
        found.append("a torch.compile draft without its ablation (CompilerBisector)")
    if TRITON_MARK in issue.splitlines()[0] and "torch.compile(" in script and NOT_PLAIN_MARK not in issue:
        found.append("a Triton draft through torch.compile that does not say why it is not one plain kernel launch")
    found += _tolerance_problems(script)
    if "assert_close" in script and _compares_indices(script):
        found.append("repro.py compares the indices an argmax, argmin or argsort returns")
    shims = _read(bundle, "triton_shims.py")
    if len(shims.splitlines()) > SHIM_LINES:
        found.append(f"triton_shims.py has {len(shims.splitlines())} lines (at most {SHIM_LINES})")
    for name in ("ISSUE.md", "repro.py", "repro_cuda.py"):
        text = _read(bundle, name)
        if "torch.load(" in text and "weights_only=True" not in text:
            found.append(f"{name} loads with torch.load without weights_only=True")
        leaked = [path for path, _name in quoted_output.machine_paths() if path in text]
        if leaked:
            found.append(f"{name} names a path of this machine")
    return found


def _read(bundle: str, name: str) -> str:
    try:
        with open(os.path.join(bundle, name), encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def _tolerance_problems(script: str) -> list:
    """An atol of 0 on a float output: the TOLERANCES line's dicts, read with their reasons."""
    line = next((ln for ln in script.splitlines() if ln.startswith("TOLERANCES = [")), None)
    if line is None:
        return []
    literal, _, reasons = line.partition("  # ")
    try:
        tolerances = _dicts(literal.split("=", 1)[1])
    except (SyntaxError, ValueError):
        return ["repro.py's TOLERANCES do not read"]
    zero_float = any(tol.get("atol") == 0 for tol in tolerances) and FLOAT_REASON.search(reasons)
    return ["repro.py holds a float output to atol=0"] if zero_float else []


def _dicts(text: str) -> list:
    """The dict(...) calls of a TOLERANCES literal, as dicts (keyword values are numbers)."""
    tree = ast.parse(text.strip(), mode="eval").body
    if not isinstance(tree, ast.List):
        raise ValueError("not a list")
    out = []
    for call in tree.elts:
        if not (isinstance(call, ast.Call) and getattr(call.func, "id", "") == "dict"):
            raise ValueError("not dict(...)")
        out.append({kw.arg: ast.literal_eval(kw.value) for kw in call.keywords})
    return out


def _compares_indices(script: str) -> bool:
    """Whether the program returns an index op's result and the script has no picker for it."""
    try:
        tree = ast.parse(script)
    except SyntaxError:
        return False
    program = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "program"), None)
    if program is None:
        return False
    index_vars = {target.id for node in program.body if isinstance(node, ast.Assign)
                  for target in node.targets if isinstance(target, ast.Name)
                  and isinstance(node.value, ast.Call) and _called(node.value) in ("argmax", "argmin", "argsort")}
    returned = next((node.value for node in program.body if isinstance(node, ast.Return)), None)
    names = [elt.id for elt in getattr(returned, "elts", []) if isinstance(elt, ast.Name)]
    pickers = {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("picked_")}
    return any(name in index_vars and f"picked_{k}" not in pickers for k, name in enumerate(names))


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
