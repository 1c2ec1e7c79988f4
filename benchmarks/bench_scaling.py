"""How a pytest-xdist campaign scales with workers: cases/s per worker count, per route.

    .venv/bin/python benchmarks/bench_scaling.py --routes inductor,triton --workers 1,2 --window 60

Each (route, worker count) runs `pytest -n W fuzz/ --routes ROUTE` for a fixed window of wall
time, then stops it; every record in the run's results-*.jsonl counts as a case. Two rates:

- window: cases / window, start-up (interpreters, route workers, Inductor's first compile)
  included, as a short campaign sees it;
- steady: cases after the last worker's first record / the time since then, the rate a long
  campaign approaches.

A window runs items of ITEM_CASES cases, shard by shard over the 7 op families, so that
one worker and W workers both go round the families in the same window (with whole-campaign
items, one worker spent a window on the first family while two reached a costlier second
one). Every W gets the same list of items, sized for the largest W: with a list sized per W,
the cases themselves differed, and one worker met a crash (Hypothesis then shrinks it, a worker
restart a step) or a hang that two never drew, which read as a loss of a fifth at 2 workers.
`--timeout` is 15 s by default, so that a hang costs a window seconds, not the campaign's 120.
`--same-cases N` runs every W over the same 28 items of N cases to completion, without the
end-of-run reduction (one process reduces a failure whatever W is), and the rate is cases
over the whole run, start-up included. `--budget S` runs each W as the
default campaign does, `--fuzz-budget S` over the same 28 items: every item gets its equal
share of the time whatever W is, so each W runs the same mix of families, and start-up
costs every W the same share of the budget. Its rate is cases over the run's wall time.

Before its windows, each route runs one case in one process (`--warm`, on by default), so
that machine-wide state every worker then only reads (Inductor's precompiled header and
ISA checks, see routes/inductor_machine.py) is built once, as a campaign on a prepared machine would find it.

Scaling is each rate against the one-worker rate times W (100% = linear). A second table
gives CPU-seconds per case by role (the xdist controller, the pytest workers: drawing,
references, judging; the route workers with the tools they ran): a harness that lost work to
contention at W workers would spend more per case there than at one. The machine's load
average is printed with each row: on a shared machine, other work distorts the figures.
Figures are printed, never asserted.

`--pin` runs each window on W cores only (the run inherits the CPU affinity), so that other
cores' spare time cannot flatter a window. "cores busy" is the whole machine's average of busy
CPUs over the window, from /proc/stat: how much of the machine the campaign used. On a 2-core
machine a one-worker campaign kept 1.02-1.05 cores busy, so pinned and unpinned one-worker
rates agree there. bench_route_only.py gives the ceiling: how the route's own work scales.
"""
import argparse
import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
import time

from tabulate import tabulate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL_S = 0.5
ITEM_CASES = 8


def count_records(report_dir: str) -> dict:
    """Records written so far, per results file (one file per xdist worker)."""
    counts = {}
    for path in glob.glob(os.path.join(report_dir, "results-*.jsonl")):
        with open(path, "rb") as handle:
            counts[path] = handle.read().count(b"\n")
    return counts


def pytest_command(route: str, workers: int, report_dir: str, args) -> list:
    # Windows: short items (ITEM_CASES each) that go round the 7 families shard by shard, so
    # that a window at any W runs the same mix; more than the window can use, at ~8 cases/s a worker.
    # The same items at every W (sized for the largest): W workers run more of one list of items,
    # where items sized per W had one worker meet a hang that two never drew.
    most = max(int(w) for w in args.workers.split(","))
    shards = max(4, -(-int(args.window * most) // ITEM_CASES))
    fixed = ["--fuzz-examples", str(ITEM_CASES)]
    if args.same_cases:                       # the same items, cases and shards at every W
        # no reduction at the end: one process reduces a failure at any W, which is not scaling
        shards, fixed = 4, ["--fuzz-examples", str(args.same_cases), "--fuzz-reduce-budget", "0"]
    if args.budget:                           # the same items at every W, each its share of the time
        shards, fixed = 4, ["--fuzz-budget", f"{args.budget:g}", "--fuzz-reduce-budget", "0"]
    return [sys.executable, "-m", "pytest", "-n", str(workers), "-p", "no:cacheprovider", "-q",
            *_plugin_option(), "--hypothesis-profile=long", "fuzz/", "--routes", route, *fixed,
            "--fuzz-shards", str(shards), "--fuzz-seed", str(args.seed), "--report-dir", report_dir,
            "--fuzz-timeout", str(args.timeout)]


def _plugin_option() -> list:
    """Load the plugin by module where torchsim-diff is not installed (e.g. a bare checkout)."""
    from importlib.metadata import entry_points
    installed = any(e.name == "torchsim_diff" for e in entry_points(group="pytest11"))
    return [] if installed else ["-p", "torchsim_diff.campaign.pytest_plugin"]


def measure(route: str, workers: int, args) -> dict:
    """Run one window; return cases, rates and the load average at its end."""
    with _report_dir(args.keep, f"{route}-x{workers}") as report_dir:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
        cores = _cores(workers) if args.pin else None
        proc = subprocess.Popen(pytest_command(route, workers, report_dir, args), cwd=REPO, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
        t0, busy0 = time.monotonic(), _busy_seconds()
        all_started = None
        started_count = 0
        try:
            while (args.same_cases or args.budget or time.monotonic() - t0 < args.window) and proc.poll() is None:
                time.sleep(POLL_S)
                counts = count_records(report_dir)
                if all_started is None and sum(1 for n in counts.values() if n) >= workers:
                    all_started, started_count = time.monotonic() - t0, sum(counts.values())
        finally:
            elapsed = time.monotonic() - t0
            busy = (_busy_seconds() - busy0) / elapsed
            cpu = cpu_by_role(proc.pid)
            _stop(proc)
        total = sum(count_records(report_dir).values())
    steady = None
    if all_started is not None and elapsed > all_started:
        steady = (total - started_count) / (elapsed - all_started)
    return {"route": route, "workers": workers, "cases": total, "window_rate": total / elapsed, "seconds": elapsed,
            "steady_rate": steady, "first_all_s": all_started, "load": os.getloadavg()[0],
            "cores": len(cores) if cores else os.cpu_count(), "busy": busy, "cpu": cpu}


ROLES = (("route worker", "torchsim_diff.worker.server"), ("pytest worker", "sys.stdin.readline"),
         ("controller", "pytest"))


def cpu_by_role(group: int) -> dict:
    """CPU-seconds so far of the run's processes (its process group), by role: the xdist
    controller, the pytest workers (drawing, eager and float64 references, judging), the route
    workers (compile and run, with the tools they ran and reaped: clang, llc, spike)."""
    seconds: dict = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[2]) != group:
            continue
        role = next((name for name, mark in ROLES if mark in command), "other")
        seconds[role] = seconds.get(role, 0.0) + sum(int(v) for v in fields[11:15]) / tick
    return seconds


def _busy_seconds() -> float:
    """CPU-seconds the whole machine has spent busy (not idle or waiting on I/O) since boot."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _cores(workers: int) -> set:
    """The first `workers` CPUs this process may use (all of them when there are fewer)."""
    mine = sorted(os.sched_getaffinity(0))
    return set(mine[:workers]) if workers < len(mine) else set(mine)


@contextlib.contextmanager
def _report_dir(keep: str | None, name: str):
    """A window's report folder: kept under `keep` (its records are a campaign's), else temporary."""
    if keep:
        path = os.path.join(keep, name)
        os.makedirs(path, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as path:
        yield path


def warm(route: str) -> tuple:
    """(seconds, exit status) of one case of `route` in one process (builds the shared machine
    state); a non-zero status means the machine was not warmed, and its message is printed."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-scaling-warm-") as out:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
        done = subprocess.run([sys.executable, "-m", "torchsim_diff", "fuzz", "--routes", route, "--max-examples", "1",
                               "--no-reduce", "--buckets", "none", "--out", out], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode not in (0, 1):          # 1: the one case failed, which still warms
        sys.stderr.write(done.stderr[-2000:])
    return time.monotonic() - t0, done.returncode


def _stop(proc) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(wait_s)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _percent(rate, base, workers):
    if rate is None or not base:
        return None
    return round(100 * rate / (base * workers), 1)


def table(rows: list) -> str:
    base = {}
    out = []
    for row in rows:
        if row["workers"] == 1:
            base[row["route"]] = row
        one = base.get(row["route"], {})
        out.append([row["route"], row["workers"], row["cores"], row["cases"], round(row["window_rate"], 3),
                    _percent(row["window_rate"], one.get("window_rate"), row["workers"]),
                    None if row["steady_rate"] is None else round(row["steady_rate"], 3),
                    _percent(row["steady_rate"], one.get("steady_rate"), row["workers"]),
                    None if row["first_all_s"] is None else round(row["first_all_s"], 1), round(row["busy"], 2),
                    round(row["load"], 1)])
    return tabulate(out, headers=["route", "workers", "cores", "cases", "cases/s (window)", "% of linear",
                                  "cases/s (steady)", "% of linear (steady)", "s to every worker's first case",
                                  "cores busy (machine)", "load avg"])


def cpu_table(rows: list) -> str:
    """CPU-seconds per case by role: where W workers spend more per case than one did."""
    roles = [name for name, _ in ROLES] + ["other"]
    out = [[row["route"], row["workers"], round(sum(row["cpu"].values()) / max(row["cases"], 1), 3),
            *(round(row["cpu"].get(role, 0.0) / max(row["cases"], 1), 3) for role in roles)]
           for row in rows if row["cpu"]]     # a run that ended by itself has no processes left to read
    return tabulate(out, headers=["route", "workers", "CPU s/case", *roles])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="inductor,triton")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts; 1 should come first")
    parser.add_argument("--window", type=float, default=60.0, help="seconds of wall time per run (default: 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=15.0, help="seconds per case (default: 15)")
    parser.add_argument("--no-warm", dest="warm", action="store_false",
                        help="measure from a cold machine (the first window then builds Inductor's header)")
    parser.add_argument("--keep", metavar="DIR", help="keep each window's report folder under DIR")
    parser.add_argument("--pin", action="store_true", help="run each window on as many cores as it has workers")
    parser.add_argument("--same-cases", type=int, default=0, metavar="N",
                        help="instead of a window, run every worker count to completion over the same 28 items "
                             "(7 families x 4 shards) of N cases each, so every W does the same work")
    parser.add_argument("--budget", type=float, default=0, metavar="S",
                        help="instead of a window, run every worker count as a campaign of S seconds "
                             "(--fuzz-budget) over the same 28 items, each item its equal share of the time")
    args = parser.parse_args()
    rows = []
    for route in args.routes.split(","):
        if args.warm:
            seconds, status = warm(route)
            sys.stderr.write(f"{route}: warmed in {seconds:.1f} s (exit status {status})\n")
        for workers in (int(w) for w in args.workers.split(",")):
            rows.append(measure(route, workers, args))
            sys.stderr.write(f"{route} x{workers}: {rows[-1]['cases']} cases in {rows[-1]['seconds']:.0f} s\n")
    print(table(rows))
    if any(row["cpu"] for row in rows):
        print()
        print(cpu_table(rows))


if __name__ == "__main__":
    main()
