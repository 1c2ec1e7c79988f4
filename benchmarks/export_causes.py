"""Export every root cause of the known-bug ledger and run each repro.py as a maintainer would.

    python benchmarks/export_causes.py [--to reports/causes] [--only NAME,...] [--projects P,...]
                                       [--no-bisect] [--timeout 600]

Each cause (corpora/known/<cause>/) is exported with `torchsim-diff export` (its plainest case,
its title and summary; repro.py run once and quoted in ISSUE.md), then its repro.py is run
again in a fresh venv that sees torch (and what is installed beside it: triton, torch-mlir)
but not torchsim-diff. Prints one row per cause: project, status, the case's route, repro.py's
lines, its imports beyond the standard library, its exit status there (1: reproduces), what
the upstream's checklist finds missing (report.checklist) and seconds; then the counts per
project. Exits 1 when a cause's repro.py does not exit 1.
"""
from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KNOWN = os.path.join(REPO, "corpora", "known")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--to", default=os.path.join(REPO, "reports", "causes"), help="folder for the bundles")
    parser.add_argument("--only", help="only these causes (comma-separated names)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per repro.py run")
    parser.add_argument("--projects", help="only the causes of these upstream projects (comma-separated)")
    parser.add_argument("--no-bisect", action="store_true", help="leave out CompilerBisector (faster)")
    args = parser.parse_args(argv)
    from tabulate import tabulate

    from torchsim_diff.cli import main as cli
    from torchsim_diff.report import checklist
    from torchsim_diff.report.plain_script import torch_only_python
    from torchsim_diff.buckets.causes import read_causes
    causes, problems = read_causes(KNOWN)
    for line in problems:
        print(f"problem: {line}")
    only = set(args.only.split(",")) if args.only else None
    python = torch_only_python(tempfile.mkdtemp(prefix="torch-only-"))
    rows = []
    for cause in causes:
        if only and cause.name not in only or args.projects and cause.project not in args.projects.split(","):
            continue
        bundle = os.path.join(args.to, cause.name)
        started = time.perf_counter()
        exported = cli(["export", cause.folder, "--to", bundle, "--all-shims"]
                       + (["--no-bisect"] if args.no_bisect else [])) == 0
        status = _run(python, bundle, args.timeout) if exported else "no bundle"
        rows.append({"cause": cause.name, "project": cause.project, "status": cause.status,
                     "route": cause.representative().route, "lines": _lines(bundle),
                     "imports": ",".join(_imports(bundle)) or "-", "exit": status,
                     "checklist": "; ".join(checklist.problems(bundle)) or "ok" if exported else "-",
                     "seconds": round(time.perf_counter() - started, 1)})
        print(" ".join(str(v) for v in rows[-1].values()), flush=True)
    print()
    print(tabulate(rows, headers="keys"))
    _totals(rows)
    return 0 if all(r["exit"] == 1 for r in rows) else 1


def _run(python: str, bundle: str, timeout_s: float):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TORCHSIM_DIFF"))}
    try:
        done = subprocess.run([python, "repro.py"], cwd=bundle, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return "timeout"
    return done.returncode


def _lines(bundle: str):
    path = os.path.join(bundle, "repro.py")
    return len(open(path, encoding="utf-8").read().splitlines()) if os.path.exists(path) else "-"


def _imports(bundle: str) -> list:
    path = os.path.join(bundle, "repro.py")
    if not os.path.exists(path):
        return []
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    return sorted(names - set(sys.stdlib_module_names))


def _totals(rows: list) -> None:
    from tabulate import tabulate
    totals = {}
    for r in rows:
        t = totals.setdefault(r["project"], {"project": r["project"], "causes": 0, "reproduce (exit 1)": 0,
                                             "<= 40 lines": 0, "new": 0, "reported": 0, "fixed": 0})
        t["causes"] += 1
        t["reproduce (exit 1)"] += r["exit"] == 1
        t["<= 40 lines"] += isinstance(r["lines"], int) and r["lines"] <= 40
        t[r["status"]] += 1
    print()
    print(tabulate(sorted(totals.values(), key=lambda t: t["project"]), headers="keys"))


if __name__ == "__main__":
    sys.exit(main())
