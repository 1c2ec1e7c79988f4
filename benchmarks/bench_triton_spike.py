"""Benchmark of route `triton-spike`: seconds per case for small graphs, warm process, and the
share of each stage of the chain.

The cases are bench_triton.py's (graphs of at most 4 nodes, at most 4,096 elements per
tensor), each a new graph compiled and run once, as a campaign does; the first case warms the
process (and starts the TTIR child) and is left out. A case's time splits into the chain's
stages (ttir, adapter, mlir-opt, translate, clang, link: once per new kernel specialisation;
spike: every launch) and the rest (Inductor, capture, writing in.bin, reading back).

    .venv/bin/python benchmarks/bench_triton_spike.py [--cases N] [--vlen 256]

Figures are printed, never asserted: they depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_triton import cases, run_case  # noqa: E402  (sets TRITON_INTERPRET=1 first)

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from torchsim_diff.routes import make_route  # noqa: E402
from torchsim_diff.routes.base import RouteFailure  # noqa: E402

STAGES = ("ttir", "adapter", "mlir-opt", "translate", "clang", "link", "spike")


class MetricsTap:
    """Wraps SpikeLauncher.begin so that every RunContext's metrics of a case are summed."""

    def __init__(self, launcher):
        self.contexts = []
        original = launcher.begin

        def begin(ctx):
            self.contexts.append(ctx)
            original(ctx)
        launcher.begin = begin

    def take(self) -> dict:
        totals = {stage: 0.0 for stage in STAGES}
        seen = set()
        for ctx in self.contexts:
            if id(ctx.metrics) in seen:
                continue
            seen.add(id(ctx.metrics))
            for stage in STAGES:
                totals[stage] += ctx.metrics.stage_s.get(stage, 0.0)
        self.contexts = []
        return totals


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--vlen", type=int, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    route = make_route("triton-spike", {"vlen": args.vlen} if args.vlen else None)
    ok, reason = route.available()
    if not ok:
        print(f"route triton-spike unavailable: {reason}")
        return 2
    route.setup()
    tap = MetricsTap(route.spike_launcher)
    rows, failed = [], []
    for i, (source, case) in enumerate(cases(args.cases + 1)):
        try:
            row = run_case(route, source, case)
        except RouteFailure as failure:  # Unsupported included
            tap.take()
            failed.append(f"case {i}: {failure.kind.value} at {failure.stage}: {failure.message[:120]}")
            continue
        row.update(tap.take())
        if i == 0:
            print(f"warm-up case: {row['t_case']:.2f} s (left out)")
            continue
        rows.append(row)
        print(f"case {i:2d}: {row['t_case']:.3f} s  launches {row['launches']}  "
              + "  ".join(f"{s} {row[s]:.3f}" for s in STAGES))
    for line in failed:
        print(line)
    if not rows:
        print("no case ran")
        return 1
    total = sum(r["t_case"] for r in rows)
    shares = [[s, round(sum(r[s] for r in rows), 2), round(100 * sum(r[s] for r in rows) / total, 1)]
              for s in STAGES]
    rest = total - sum(row[1] for row in shares)
    shares.append(["inductor, capture, launcher I/O", round(rest, 2), round(100 * rest / total, 1)])
    print(f"\nmedian seconds per case: {statistics.median(r['t_case'] for r in rows):.3f} s over {len(rows)} "
          f"cases (target <= 1.5 s); {len(failed)} cases failed or unsupported (listed above)")
    print(tabulate(shares, headers=["stage", "seconds", "% of case time"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
