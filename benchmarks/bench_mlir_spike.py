"""Seconds per case for the `mlir` and `spike` routes, warm, and where the time goes.

    .venv/bin/python benchmarks/bench_mlir_spike.py [--repeats 3] [--routes mlir,spike]

A case is one new graph compiled and run once (what a fuzz campaign does for each new
graph), in-process, after a warm-up graph so that first-use costs (torch.export tracing
machinery, torch-mlir's context, the runtime objects) are excluded. Targets: mlir <= 0.5 s,
spike <= 1 s per case. The stage split comes from the routes' own ctx.metrics
(t_export, t_import, t_lowering, t_jit / t_translation, t_cc, t_link, t_kernel / t_spike).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchsim_diff.routes import make_route  # noqa: E402
from torchsim_diff.routes.base import RouteFailure, RunContext  # noqa: E402

STAGES = ("export", "import", "lowering", "jit", "translation", "cc", "link", "kernel", "spike")


def programs(generator: torch.Generator) -> list:
    """(name, program, inputs): small graphs of the kinds the fuzzer draws."""
    def r(*shape):
        return torch.randn(*shape, generator=generator)
    return [
        ("permute-add", lambda x, b: (x.permute(2, 0, 1) + b,), (r(2, 3, 4), r(2, 3))),
        ("relu-sum", lambda x, y: (torch.relu(x.t() + y).sum(1),), (r(5, 3), r(3, 5))),
        ("softmax", lambda x: (torch.softmax(x, -1),), (r(8, 33),)),
        ("matmul", lambda a, b: (a @ b,), (r(16, 24), r(24, 8))),
        ("inplace-add", lambda x, y: (y.add_(x.t()), y * 2)[1:], (r(6, 9), r(9, 6))),
        ("gelu-tanh", lambda x: (torch.nn.functional.gelu(x) * torch.tanh(x),), (r(7, 37),)),
        ("cat-slice", lambda x, y: (torch.cat([x[:, 1:], y], 1),), (r(4, 6), r(4, 3))),
        ("index-put", lambda a, i, b: (a.clone().index_put_((i,), b, accumulate=True),),
         (r(6, 4), torch.tensor([1, 1, 3]), r(3, 4))),
        ("amax-where", lambda x: (torch.where(x > 0, x, -x).amax(0),), (r(12, 20),)),
        ("conv2d", lambda x, w: (torch.nn.functional.conv2d(x, w),), (r(1, 2, 8, 8), r(3, 2, 3, 3))),
    ]


def one_case(route, program, inputs) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-mlir-spike-") as artifact_dir:
        ctx = RunContext(artifact_dir=artifact_dir, case={})
        started = time.perf_counter()
        compiled = route.compile(program, [t.clone() for t in inputs], ctx)
        compiled_at = time.perf_counter()
        compiled([t.clone() for t in inputs], ctx)
        finished = time.perf_counter()
    return {"total": finished - started, "compile": compiled_at - started, "run": finished - compiled_at,
            **{k: v for k, v in ctx.metrics.stage_s.items() if k in STAGES}}


def bench_route(name: str, repeats: int) -> list:
    route = make_route(name)
    ok, reason = route.available()
    if not ok:
        print(f"{name}: unavailable ({reason})")
        return []
    route.setup()
    cases = programs(torch.Generator().manual_seed(0))
    one_case(route, *cases[0][1:])  # warm-up
    rows = []
    for _ in range(repeats):
        for case_name, program, inputs in cases:
            try:
                rows.append(one_case(route, program, inputs))
            except RouteFailure as failure:
                print(f"{name} {case_name}: {failure.kind.value} at {failure.stage}: {failure.message[:200]}")
    return rows


def report(name: str, rows: list) -> None:
    if not rows:
        return
    median = {key: statistics.median(row.get(key, 0.0) for row in rows) for key in rows[0]}
    print(f"\n{name}: {len(rows)} cases, median {median['total']:.3f} s per case "
          f"(compile {median['compile']:.3f} s, run {median['run']:.3f} s); p90 "
          f"{sorted(r['total'] for r in rows)[int(0.9 * (len(rows) - 1))]:.3f} s")
    for stage in STAGES:
        values = [row[stage] for row in rows if stage in row]
        if values:
            share = statistics.median(values) / median["total"] * 100
            print(f"  {stage:<12} median {statistics.median(values):.4f} s  ({share:4.1f}% of a case)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="passes over the graph set (default: 3)")
    parser.add_argument("--routes", default="mlir,spike", help="comma-separated (default: mlir,spike)")
    args = parser.parse_args(argv)
    for name in args.routes.split(","):
        report(name, bench_route(name, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
