"""Timing campaign over the routes' real kernels: cases through triton-spike (each launch's TOG)
or spike (each linalg op's TOG), through TOGSim and the timing checks
(torchsim_diff.timing.kernel_timing).

    TORCHSIM_DIFF_TOGSIM=path/to/Simulator .venv/bin/python benchmarks/togsim_kernels.py \\
        corpora/seed --out reports/togsim-kernels [--route spike] [--budget 1200]

Prints cases, kernels simulated, seconds per kernel (TOGSim runs of a kernel: base, again, more
cores), each check's pass/fail counts, and every bucket with its key, known defect and
reproducer folder; writes timing.jsonl (`torchsim-diff table DIR --tables timing`) and
summary.json into --out. Exit status: 0 no new bucket, 1 new buckets, 2 bad input or TOGSim or
the route unavailable.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

from torchsim_diff.timing.kernel_timing import (RouteUnavailable, Settings, hardware_of, route_server,
                                                time_case, write_timings)
from torchsim_diff.buckets.known_defects import known_defects
from torchsim_diff.timing.togsim_runner import Unavailable, find_togsim
from torchsim_diff.buckets.corpus import iter_entries
from torchsim_diff.buckets.known_ledger import default_ledger


def campaign(cases: list, settings: Settings, budget_s: float, route: str) -> dict:
    started, counts = time.monotonic(), collections.defaultdict(collections.Counter)
    buckets, timed, kernels, not_timed, togsim_s = {}, 0, 0, collections.Counter(), 0.0
    with route_server(route) as server:
        for case in cases:
            if time.monotonic() - started > budget_s:
                break
            reply, timings, skipped = time_case(case, settings, server, route)
            write_timings(settings.out, timings)
            timed, kernels = timed + 1, kernels + len(timings)
            not_timed.update(why.split(": ", 1)[-1][:80] for _name, why in skipped)
            for timing in timings:
                togsim_s += timing.seconds
                for v in timing.verdicts:
                    counts[v["check"]]["pass" if v["passed"] else "fail"] += 1
                    if v["bucket"]:
                        buckets.setdefault(v["bucket"], {"check": v["check"], "known": v["known"],
                                                         "message": v["message"], "kernels": 0})["kernels"] += 1
    return {"cases": timed, "kernels": kernels, "seconds": round(time.monotonic() - started, 1),
            "togsim_seconds_per_kernel": round(togsim_s / kernels, 3) if kernels else None,
            "counts": {k: dict(v) for k, v in sorted(counts.items())}, "buckets": buckets,
            "not_timed": dict(not_timed)}


def report(summary: dict, out: str) -> None:
    print(f"{summary['cases']} cases, {summary['kernels']} kernels simulated in {summary['seconds']} s "
          f"({summary['togsim_seconds_per_kernel']} s of TOGSim per kernel, first run)")
    print(f"{'check':<20}{'pass':>6}{'fail':>6}")
    for check, counter in summary["counts"].items():
        print(f"{check:<20}{counter.get('pass', 0):>6}{counter.get('fail', 0):>6}")
    for name, bucket in summary["buckets"].items():
        state = f"KNOWN {bucket['known']}" if bucket["known"] else "NEW"
        print(f"\n{state} bucket {name} ({bucket['check']}, {bucket['kernels']} kernel(s)): {bucket['message'][:200]}"
              f"\n  reproducer: {os.path.join(out, 'buckets', name)}")
    for why, count in summary["not_timed"].items():
        print(f"not timed: {count} launch(es): {why}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("cases", nargs="+", help="case files or folders of them")
    parser.add_argument("--out", required=True)
    parser.add_argument("--budget", type=float, default=float("inf"), help="seconds; no new case after it")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per TOGSim run")
    parser.add_argument("--route", choices=("triton-spike", "spike"), default="triton-spike",
                        help="whose kernels: triton-spike's launches or spike's linalg ops (default: triton-spike)")
    args = parser.parse_args(argv)
    install = find_togsim()
    if isinstance(install, Unavailable):
        print(f"togsim_kernels: {install.reason}", file=sys.stderr)
        return 2
    entries = list(iter_entries(args.cases))         # (entry, None) or (None, CorruptEntry)
    corrupt = [why for _entry, why in entries if why]
    for why in corrupt:
        print(f"togsim_kernels: {why}", file=sys.stderr)
    if not entries:
        print(f"togsim_kernels: no case files in {', '.join(args.cases)}", file=sys.stderr)
    if corrupt or not entries:
        return 2
    os.makedirs(args.out, exist_ok=True)
    settings = Settings(install, hardware_of(install), args.out, args.timeout, known_defects(default_ledger()))
    try:
        summary = campaign([entry.case for entry, _ in entries], settings, args.budget, args.route)
    except (RouteUnavailable, ValueError) as why:
        print(f"togsim_kernels: {why}", file=sys.stderr)
        return 2
    with open(os.path.join(args.out, "summary.json"), "w") as handle:
        json.dump(summary, handle, indent=1)
    report(summary, args.out)
    return 1 if any(not b["known"] for b in summary["buckets"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
