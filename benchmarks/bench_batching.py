"""Batching identity check and speed: the same cases one at a time and in batches.

    .venv/bin/python benchmarks/bench_batching.py --route inductor --cases 500 --batch 8 --jobs 1

Draws the cases once (fixed seed), then each of --jobs processes takes its slice and runs it
one at a time, then in batches of --batch (torchsim_diff.run.batch), each in a fresh checker
whose route worker is started before the clock. Prints cases/s per process (one process per
core: cases/s per core) both ways, and whether every case got the same verdict (status,
kind, bucket). Figures are printed, never asserted; the load average is printed with them.
"""
import argparse
import collections
import concurrent.futures
import os
import tempfile
import time

from tabulate import tabulate

from torchsim_diff.run.batch import check_batch
from torchsim_diff.campaign.fuzz import CampaignOptions
from torchsim_diff.run.checker import Checker
from torchsim_diff.campaign.ray_cluster import draw_cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", default="inductor")
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=1, help="processes, each with its slice of the cases")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-nodes", type=int, default=4)
    args = parser.parse_args()
    cases = draw_cases(CampaignOptions(routes=[args.route], out_dir=".", max_nodes=args.max_nodes),
                       args.seed, args.cases)
    slices = [cases[k::args.jobs] for k in range(args.jobs)]
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        parts = list(pool.map(_run_slice, slices, [args.route] * args.jobs, [args.batch] * args.jobs))
    solo = [v for part in parts for v in part["solo"]]
    batched = [v for part in parts for v in part["batched"]]
    t_solo, t_batch = (max(part[key] for part in parts) for key in ("t_solo", "t_batch"))
    per_core = [len(cases) / t_solo / args.jobs, len(cases) / t_batch / args.jobs]
    print(tabulate([["one at a time", len(cases), round(t_solo, 1), round(per_core[0], 3)],
                    [f"batches of {args.batch}", len(cases), round(t_batch, 1), round(per_core[1], 3)]],
                   headers=["run", "cases", f"seconds (slowest of {args.jobs} processes)", "cases/s per process"]))
    differ = [(s, b) for s, b in zip(solo, batched) if s != b]
    from_batch = sum(part["from_batch"] for part in parts)
    print(f"\nload average {os.getloadavg()[0]:.1f}; verdicts one at a time: "
          f"{dict(collections.Counter(s[1] for s in solo))}; {from_batch} passes taken from a batch, "
          f"{len(cases) - from_batch} verdicts from solo reruns")
    print(f"identical verdicts (status, kind, bucket): {len(cases) - len(differ)} / {len(cases)}")
    for s, b in differ[:20]:
        print(f"  differs: case {s[0]}: one at a time {s[1:]}, batched {b[1:]}")


def _run_slice(cases: list, route: str, batch: int) -> dict:
    solo, t_solo = _timed(lambda ch: [ch.check(c, route) for c in cases], route)
    batched, t_batch = _timed(lambda ch: [v for k in range(0, len(cases), batch)
                                          for v in check_batch(ch, cases[k:k + batch], route)], route)
    return {"solo": [_verdict(v) for v in solo], "batched": [_verdict(v) for v in batched],
            "t_solo": t_solo, "t_batch": t_batch, "from_batch": sum(1 for v in batched if v.metrics.batch)}


def _verdict(v) -> tuple:
    return v.case.case_id, v.status.value, v.kind.value if v.kind else None, v.bucket


def _timed(run, route: str):
    """Verdicts and seconds, with the route worker started before the clock."""
    with tempfile.TemporaryDirectory() as out, Checker(out_dir=out) as checker:
        checker.availability(route)
        t0 = time.perf_counter()
        verdicts = run(checker)
        return verdicts, time.perf_counter() - t0


if __name__ == "__main__":
    main()
