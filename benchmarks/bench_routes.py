"""Throughput and harness overhead per route: cases/s, median seconds per case, and the share
of time spent outside the route's own compile and run (generation, serialisation, process
hops, the eager/float64 reference, comparison).

    .venv/bin/python benchmarks/bench_routes.py --routes eager,inductor --cases 40

Figures are printed, never asserted: they depend on the machine.
"""
import argparse
import cProfile
import io
import pstats
import statistics
import tempfile
import time

from tabulate import tabulate

from torchsim_diff.campaign.fuzz import CampaignOptions, run_campaign


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="eager,inductor")
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--max-nodes", type=int, default=4)
    parser.add_argument("--reduce", action="store_true",
                        help="reduce failures as a campaign does (off: reduction is not per-case harness time)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print the N costliest functions of this (the harness's) process per route")
    args = parser.parse_args()
    rows = []
    for route in args.routes.split(","):
        with tempfile.TemporaryDirectory() as out:
            profiler = cProfile.Profile() if args.profile else None
            t0 = time.perf_counter()
            if profiler:
                profiler.enable()
            result = run_campaign(CampaignOptions(routes=[route], out_dir=out, max_examples=args.cases,
                                                  seed=args.seed, max_nodes=args.max_nodes,
                                                  reduce=args.reduce))
            wall = time.perf_counter() - t0
            if profiler:
                profiler.disable()
                print(f"-- {route}: the harness process's top {args.profile} functions by own time "
                      f"(waiting on the route worker shows as select)\n{_top(profiler, args.profile)}")
        recs = [r for r in result.records if r.judged]
        if not recs:
            rows.append([route, 0] + [None] * 6)
            continue
        t_case = sum(r.t_case for r in recs)
        harness = sum(r.t_harness for r in recs)
        inside = sum((r.t_compile or 0) + (r.t_run or 0) for r in recs)
        warm = [r.t_case for r in recs[1:]] or [recs[0].t_case]
        rows.append([route, len(recs), round(len(result.records) / wall, 2), round(statistics.median(warm), 3),
                     round(statistics.median(r.t_compile or 0 for r in recs), 3),
                     round(statistics.median(r.t_run or 0 for r in recs), 4),
                     round(100 * harness / t_case, 1), round(100 * (wall - inside) / wall, 1)])
    print(tabulate(rows, headers=["route", "cases", "cases/s (wall)", "median s/case (warm)", "median compile s",
                                  "median run s", "harness % of case time",
                                  "harness % of wall (incl. generation, startup)"]))


def _top(profiler, n: int) -> str:
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).strip_dirs().sort_stats("tottime").print_stats(n)
    return text.getvalue().split("ncalls", 1)[-1].join(("ncalls", "")) if "ncalls" in text.getvalue() else ""


if __name__ == "__main__":
    main()
