"""`kill -9` of a campaign at 5 points, 3 times each, then the same campaign again: is anything lost,
and are the NEW buckets those of an undisturbed run?

    python benchmarks/bench_kill_points.py [--points start-up,mid-case,...] [--trials 3]

The campaign is `fuzz` on a planted bug (tests/fault_routes.py's double-marked-wrong: output 0
off by one, every case fails; its worker writes a mark when it sets up and when it compiles a
case, then pauses), with a bucket history of its own, run in a child process that also marks
the campaign's phases (this file's --child mode: `phase reduce`, `phase self-check`, and
`phase report` when cmd_fuzz starts its closing output, then pauses). On the aimed mark this
script sends SIGKILL to the campaign process alone, as `kill -9 PID` does, notes what the kill
left, then runs the same command again into the same run folder and history. Points (trial k
of each aims a little later than trial k-1):

    start-up         the route worker is setting up (k x 0.4 s after its `setup` mark)
    mid-case         the k-th case run outside a reduction, while its worker compiles it
    mid-reduction    the (2 + 3k)-th case run of a reduction
    mid-self-check   k x 1 s into the self-check (a replay, then repro.py in a fresh process)
    mid-report       k x 0.3 s into the closing output, before the NEW buckets are printed

Per point it prints: runs; kills that landed in the aimed phase; records lost (a whole line
the killed run wrote that is missing after the rerun; a torn tail set aside in results.jsonl.torn
is not lost); whether the rerun's own records are the undisturbed run's (case, status, kind,
bucket); whether the rerun's NEW buckets equal the undisturbed run's; whether every NEW bucket
of the undisturbed run was told as NEW by the killed run or its rerun; the longest time a killed
campaign's route workers outlived it, and how many were still running WORKER_GRACE_S later.
Figures, never asserts.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTE = "double-marked-wrong"
ROUTES_ENV = f"{ROUTE}=tests.fault_routes:MarkedWrongRoute"
OPTIONS = ("--max-examples", "4", "--max-nodes", "3", "--seed", "1", "--reduce-budget", "600", "--known-bugs", "none")
PAUSES = {"DOUBLE_SETUP_S": "1.5", "DOUBLE_CASE_S": "0.1", "KILL_BENCH_REPORT_S": "1.5"}
POINTS = ("start-up", "mid-case", "mid-reduction", "mid-self-check", "mid-report")


# -- the child: the campaign, with its phases marked -----------------------------------------------
def child(argv: list) -> int:
    """`torchsim-diff` with marks at the start of each reduction, the self-check and the closing
    output; writes the run's NEW buckets to KILL_BENCH_RESULT when it ends."""
    from torchsim_diff import cli
    from torchsim_diff.cli import fuzz_command
    from torchsim_diff.triage import refine, self_check
    _mark_calls(refine.ReduceThenBucket, "_reduce_and_classify", "reduce", end="reduced")
    _mark_calls(self_check, "self_check_buckets", "self-check")
    _mark_calls(fuzz_command, "_standing_of", "report", pause=float(os.environ.get("KILL_BENCH_REPORT_S", "0")))
    results = {}
    run_fuzz = fuzz_command._run_fuzz

    def keeping(opts, args):
        results["result"] = result = run_fuzz(opts, args)
        return result
    fuzz_command._run_fuzz = keeping
    status = cli.main(argv)
    if "result" in results:
        with open(os.environ["KILL_BENCH_RESULT"], "w", encoding="utf-8") as handle:
            json.dump({"new": sorted(results["result"].new_buckets)}, handle)
    return status


def _mark_calls(owner, name: str, phase: str, *, end: str | None = None, pause: float = 0.0) -> None:
    original = getattr(owner, name)

    def marked(*args, **kwargs):
        _mark("phase", os.getpid(), phase)
        time.sleep(pause)
        try:
            return original(*args, **kwargs)
        finally:
            if end:
                _mark("phase", os.getpid(), end)
    setattr(owner, name, marked)


def _mark(*words) -> None:
    with open(os.environ["DOUBLE_MARK"], "a", encoding="utf-8") as handle:
        handle.write(" ".join(map(str, words)) + "\n")


# -- the parent: run, kill, rerun, compare ---------------------------------------------------------
class Marks:
    """What the marks file says so far: the phase the campaign is in, case runs in and out of
    reductions, and when the current phase began."""

    def __init__(self, path: str):
        self.path, self.offset = path, 0
        self.phase, self.phase_since = "start", time.monotonic()
        self.setup_at = None
        self.cases_outside = self.cases_in_reduction = 0

    def update(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, encoding="utf-8") as handle:
            handle.seek(self.offset)
            text = handle.read()
        whole = text[:text.rfind("\n") + 1]
        self.offset += len(whole)
        for words in (line.split() for line in whole.splitlines()):
            self._take(words)

    def _take(self, words: list) -> None:
        if words[0] == "setup" and self.setup_at is None:
            self.setup_at = time.monotonic()
        elif words[0] == "case":
            if self.phase == "reduce":
                self.cases_in_reduction += 1
            elif self.phase in ("start", "reduced"):
                self.cases_outside += 1
        elif words[0] == "phase":
            self.phase, self.phase_since = words[2], time.monotonic()


def _since(moment, seconds: float) -> bool:
    return moment is not None and time.monotonic() - moment >= seconds


# point -> (aim(marks, k): kill now?, the phase the kill must land in)
AIMS = {
    "start-up": (lambda m, k: m.phase == "start" and _since(m.setup_at, 0.4 * k), ("start",)),
    "mid-case": (lambda m, k: m.cases_outside >= k and m.phase in ("start", "reduced"), ("start", "reduced")),
    "mid-reduction": (lambda m, k: m.phase == "reduce" and m.cases_in_reduction >= 2 + 3 * k, ("reduce",)),
    "mid-self-check": (lambda m, k: m.phase == "self-check" and _since(m.phase_since, 1.0 * k), ("self-check",)),
    "mid-report": (lambda m, k: m.phase == "report" and _since(m.phase_since, 0.3 * (k - 1)), ("report",)),
}


def campaign(folder: str, tag: str) -> subprocess.Popen:
    """The campaign's child process (its own session, so its workers can be found after a kill)."""
    env = {**os.environ, "PYTHONPATH": REPO, "PYTHONUNBUFFERED": "1", "TORCHSIM_DIFF_ROUTES": ROUTES_ENV, **PAUSES,
           "DOUBLE_MARK": os.path.join(folder, f"marks-{tag}"), "KILL_BENCH_RESULT": os.path.join(folder, f"new-{tag}.json")}
    command = [sys.executable, os.path.abspath(__file__), "--child", "fuzz", "--routes", ROUTE, *OPTIONS,
               "--out", os.path.join(folder, "run"), "--buckets", os.path.join(folder, "buckets.sqlite")]
    with open(os.path.join(folder, f"stdout-{tag}"), "w") as out, open(os.path.join(folder, f"stderr-{tag}"), "w") as err:
        return subprocess.Popen(command, cwd=folder, env=env, stdout=out, stderr=err, start_new_session=True)


def run_to_end(folder: str, tag: str) -> dict:
    proc = campaign(folder, tag)
    proc.wait()
    return {"status": proc.returncode, "new": _new_of(folder, tag), "told": _told_new(folder, tag)}


def run_and_kill(folder: str, point: str, k: int) -> dict:
    """The campaign killed at `point` (trial k): whether it was killed, the phase it was in, and
    how long its route workers outlived it (those alive WORKER_GRACE_S later are ended: they are
    this script's, and counted)."""
    aim, phases = AIMS[point]
    proc, marks = campaign(folder, "killed"), Marks(os.path.join(folder, "marks-killed"))
    while proc.poll() is None:
        marks.update()
        if aim(marks, k):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.01)
    killed = proc.returncode == -signal.SIGKILL
    outlived, left = _workers_outliving(proc.pid)
    return {"killed": killed, "landed": killed and marks.phase in phases, "outlived": outlived, "left": left,
            "told": _told_new(folder, "killed")}


WORKER_GRACE_S = 15.0


def _workers_outliving(group: int) -> tuple:
    """(seconds until the killed campaign's workers were gone, how many were still alive after
    WORKER_GRACE_S and were ended then)."""
    started = time.monotonic()
    while _live(_group_members(group)) and time.monotonic() - started < WORKER_GRACE_S:
        time.sleep(0.1)
    left = _live(_group_members(group))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return time.monotonic() - started, len(left)


def _live(pids: list) -> list:
    """The processes of `pids` that are not zombies."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _group_members(group: int) -> list:
    pids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group:
            pids.append(int(name))
    return pids


def _new_of(folder: str, tag: str):
    path = os.path.join(folder, f"new-{tag}.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return set(json.load(handle)["new"])


def _told_new(folder: str, tag: str) -> set:
    """The buckets the run's printed Buckets table calls NEW (none when it was killed first)."""
    with open(os.path.join(folder, f"stdout-{tag}"), encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    if "Buckets" not in lines:
        return set()
    header, dashes, *rows = lines[lines.index("Buckets") + 1:]
    status = _column(header, dashes, "status")
    return {row.split()[0] for row in rows if row.strip() and row[status].strip() == "NEW"}


def _column(header: str, dashes: str, name: str) -> slice:
    start = 0
    for cell in dashes.split():
        begin = dashes.index(cell, start)
        start = begin + len(cell)
        if header[begin:start].strip() == name:
            return slice(begin, start)
    raise ValueError(f"no column {name!r}")


def whole_lines(folder: str) -> list:
    path = os.path.join(folder, "run", "results.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, "rb") as handle:
        data = handle.read()
    return data[:data.rfind(b"\n") + 1].splitlines()


def verdicts(lines: list) -> list:
    records = [json.loads(line) for line in lines]
    return sorted((r["case_id"], r["status"], r["kind"], r["bucket"]) for r in records)


def trial(point: str, k: int, undisturbed: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"kill-{point}-") as folder:
        killed = run_and_kill(folder, point, k)
        before = whole_lines(folder)
        rerun = run_to_end(folder, "rerun")
        after = whole_lines(folder)
        torn = os.path.exists(os.path.join(folder, "run", "results.jsonl.torn"))
        return {**killed, "lost": sum(1 for line in before if line not in after), "torn": torn,
                "same records": verdicts(after[len(before):]) == undisturbed["verdicts"],
                "rerun new same": rerun["new"] == undisturbed["new"],
                "told same": (killed["told"] | rerun["told"]) == undisturbed["new"],
                "rerun new": sorted(rerun["new"] or ())}


def undisturbed_run() -> dict:
    with tempfile.TemporaryDirectory(prefix="kill-undisturbed-") as folder:
        started = time.perf_counter()
        run = run_to_end(folder, "undisturbed")
        return {**run, "verdicts": verdicts(whole_lines(folder)), "seconds": time.perf_counter() - started}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        sys.path.insert(0, REPO)
        return child(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=",".join(POINTS))
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    undisturbed = undisturbed_run()
    print(f"undisturbed: exit {undisturbed['status']}, {len(undisturbed['verdicts'])} records, "
          f"NEW {sorted(undisturbed['new'] or ())}, {undisturbed['seconds']:.0f} s", flush=True)
    print(f"{'point':<15} {'runs':>4} {'landed':>6} {'lost':>4} {'torn':>4} {'same records':>12} "
          f"{'rerun NEW same':>14} {'NEW told same':>13} {'workers gone s':>14} {'left':>4}", flush=True)
    for point in args.points.split(","):
        trials = [trial(point, k, undisturbed) for k in range(1, args.trials + 1)]
        count = lambda key: sum(1 for t in trials if t[key])     # noqa: E731
        print(f"{point:<15} {len(trials):>4} {count('landed'):>6} {sum(t['lost'] for t in trials):>4} "
              f"{count('torn'):>4} {count('same records'):>12} {count('rerun new same'):>14} "
              f"{count('told same'):>13} {max(t['outlived'] for t in trials):>14.1f} "
              f"{sum(t['left'] for t in trials):>4}", flush=True)
        for t in trials:
            if not (t["landed"] and t["same records"] and t["rerun new same"] and not t["lost"]):
                print(f"    trial: landed={t['landed']} lost={t['lost']} same records={t['same records']} "
                      f"rerun NEW={t['rerun new']} told NEW={sorted(t['told'])} workers left={t['left']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
