"""NEW means real: campaigns per route, then every NEW bundle's repro.py run again by hand.

    python benchmarks/bench_self_check.py --routes mlir,spike --cases 1000 [--seed 1] [--budget 30m]
    python benchmarks/bench_self_check.py --from RUN_DIR [RUN_DIR ...]   # a finished run's bundles

Runs one `fuzz` campaign per route (reduction and self-check on, no bucket history, so every
bucket is new to it), then runs each bundle under RUN/bundles/ once more in a fresh process,
as a maintainer would, and prints per route: cases, failing cases, buckets, NEW buckets,
NEW bundles whose repro.py exits 1, unconfirmed buckets and their reasons. Figures, never asserts.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def campaign(route: str, args) -> dict:
    from torchsim_diff.campaign.fuzz import CampaignOptions, run_campaign
    out = tempfile.mkdtemp(prefix=f"self-check-{route}-")
    started = time.perf_counter()
    result = run_campaign(CampaignOptions(routes=[route], out_dir=out, max_examples=args.cases, seed=args.seed,
                                          budget_s=args.budget, bucket_store=None))
    seconds = time.perf_counter() - started
    failing = [r for r in result.records if r.failed and not r.known]
    return {"route": route, "run": out, "cases": result.cases, "seconds": round(seconds),
            "failing": len(failing), "buckets": len({r.bucket for r in failing}),
            "new": sorted(result.new_buckets), "unconfirmed": result.unconfirmed,
            "bundles": result.bundles}


def checks_of(run: str) -> dict:
    """bucket -> its self-check (triage.self_check.RESULTS_FILE) of a finished run."""
    from torchsim_diff.triage.self_check import RESULTS_FILE
    path = os.path.join(run, RESULTS_FILE)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def rerun(bundles: dict) -> collections.Counter:
    """Exit statuses of every bundle's repro.py, each in a fresh process."""
    from torchsim_diff.triage.self_check import run_repro
    return collections.Counter(str(run_repro(path)[0]) for path in bundles.values())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="mlir")
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=None, help="seconds per route campaign")
    parser.add_argument("--from", dest="runs", nargs="+", help="finished run folders: rerun their bundles only")
    args = parser.parse_args(argv)
    rows = []
    if args.runs:
        for run in args.runs:
            checks = checks_of(run)
            confirmed = {b: c["bundle"] for b, c in checks.items() if c["confirmed"]}
            reasons = collections.Counter(c["reason"].split(":")[0] for c in checks.values() if not c["confirmed"])
            rows.append({"run": run, "new": len(confirmed), "NEW repro.py exits": dict(rerun(confirmed)),
                         "unconfirmed": len(checks) - len(confirmed), "unconfirmed reasons": dict(reasons)})
    else:
        for route in args.routes.split(","):
            found = campaign(route, args)
            statuses = rerun(found.pop("bundles"))
            reasons = collections.Counter(r.split(":")[0] for r in found["unconfirmed"].values())
            rows.append({**found, "new": len(found["new"]), "NEW repro.py exits": dict(statuses),
                         "unconfirmed": len(found["unconfirmed"]), "unconfirmed reasons": dict(reasons)})
    from tabulate import tabulate
    print(tabulate(rows, headers="keys"))
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
