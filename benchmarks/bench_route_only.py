"""How a route's own work scales with cores, no harness around it: the ceiling for a campaign.

    .venv/bin/python benchmarks/bench_route_only.py --routes mlir,spike --workers 1,2 --window 60

For each worker count W, W plain processes each take a core of their own and, for the
window, compile and run their own distinct cases in-process, exactly as a route worker does
(`WorkerServer.on_run`: inputs, compile, run, results serialised), with no eager or float64
reference, no judging, no pytest and no xdist. Every process runs the same cases (one seed),
each with its own compile caches, so W processes do W times the work of one; each draws its
cases and warms its route before the clock starts.

If the route alone does not scale linearly from 1 to 2 cores on a machine (shared caches and
memory bandwidth, a busy neighbour), no campaign of it can: compare a campaign's scaling
(bench_scaling.py --pin) with this one. Figures are printed, never asserted.
"""
import argparse
import multiprocessing
import os
import sys
import tempfile
import time

from tabulate import tabulate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES_PER_PROCESS = 400


def route_only_rate(route: str, seed: int, core: int, window: float, ready, start, results) -> None:
    """One process: draw, warm, wait for the common start, then run cases for `window` s."""
    os.sched_setaffinity(0, {core})
    os.environ.update(OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1",
                      TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix=f"route-only-{route}-{core}-"))
    sys.path.insert(0, REPO)
    from torchsim_diff.campaign.fuzz import CampaignOptions
    from torchsim_diff.campaign.ray_cluster import draw_cases
    from torchsim_diff.worker.server import WorkerServer
    cases = draw_cases(CampaignOptions(routes=[route], out_dir="."), seed, CASES_PER_PROCESS)
    server = WorkerServer(route, {})
    server.on_hello({"warm": True})
    scratch = tempfile.mkdtemp(prefix="route-only-artifacts-")
    ready.release()
    start.wait()
    t0, done = time.perf_counter(), 0
    for case in cases:
        if time.perf_counter() - t0 >= window:
            break
        server.on_run({"case": case.to_dict(), "program": case.program_source(),
                       "artifact_dir": os.path.join(scratch, case.case_id)})
        done += 1
    results.put((done, time.perf_counter() - t0))


def measure(route: str, workers: int, args) -> dict:
    cores = sorted(os.sched_getaffinity(0))
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Semaphore(0), context.Event(), context.Queue()
    procs = [context.Process(target=route_only_rate,
                             args=(route, args.seed, cores[k % len(cores)], args.window, ready, start, results))
             for k in range(workers)]
    for proc in procs:
        proc.start()
    for _ in procs:
        ready.acquire()
    start.set()
    finished = [results.get() for _ in procs]
    for proc in procs:
        proc.join()
    cases = sum(n for n, _ in finished)
    return {"route": route, "workers": workers, "cases": cases,
            "rate": sum(n / seconds for n, seconds in finished), "load": os.getloadavg()[0]}


def table(rows: list) -> str:
    base = {row["route"]: row["rate"] for row in rows if row["workers"] == 1}
    out = [[row["route"], row["workers"], row["cases"], round(row["rate"], 3),
            round(100 * row["rate"] / (base[row["route"]] * row["workers"]), 1) if base.get(row["route"]) else None,
            round(row["load"], 1)] for row in rows]
    return tabulate(out, headers=["route", "processes (1 core each)", "cases", "cases/s", "% of linear", "load avg"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="inductor,triton")
    parser.add_argument("--workers", default="1,2", help="comma-separated process counts; 1 should come first")
    parser.add_argument("--window", type=float, default=60.0, help="seconds each process runs cases (default: 60)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    for route in args.routes.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            rows.append(measure(route, workers, args))
            sys.stderr.write(f"{route} x{workers}: {rows[-1]['cases']} cases in {args.window:g} s\n")
    print(table(rows))


if __name__ == "__main__":
    main()
