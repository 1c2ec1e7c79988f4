"""The memory `table` needs for a large results file: peak RSS of `python -m torchsim_diff table FILE`.

    python benchmarks/bench_table_memory.py [--mb 60] [--from RUN_DIR] [--code DIR ...]

Makes a results.jsonl of about --mb megabytes by repeating the real records of a small run
(`--from RUN_DIR`, or a 50-case `fuzz --routes eager` campaign run first), each copy with its
own case id, then runs `table` on it once per --code folder (a checkout whose torchsim_diff is
imported: the default is this one; give an older checkout to compare) and prints, for each,
the file's size, the child's peak resident memory (getrusage of that child), the same on a
one-record file (what imports cost, torch among them), and the bytes of memory the records
add per byte of file. Figures, never asserts.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_run(folder: str) -> str:
    """A 50-case eager campaign's run folder (its records are the pattern repeated)."""
    run = os.path.join(folder, "seed-run")
    subprocess.run([sys.executable, "-m", "torchsim_diff", "fuzz", "--routes", "eager", "--max-examples", "50",
                    "--out", run], cwd=REPO, env=_env(REPO), check=True, stdout=subprocess.DEVNULL)
    return run


def pattern_lines(run: str) -> list:
    with open(os.path.join(run, "results.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_large_file(path: str, pattern: list, megabytes: float) -> tuple:
    """Copies of `pattern`, each record under a case id of its own, until `megabytes` are
    written: (bytes, records)."""
    goal, written, copy = megabytes * 1e6, 0, 0
    with open(path, "w", encoding="utf-8") as handle:
        while copy == 0 or written < goal:
            for record in pattern:
                line = json.dumps({**record, "case_id": f"{record['case_id']}-{copy}"}) + "\n"
                handle.write(line)
                written += len(line.encode("utf-8"))
            copy += 1
    return written, copy * len(pattern)


def peak_rss_of_table(path: str, code: str) -> tuple:
    """(peak RSS in bytes, seconds, exit status) of `table FILE` importing torchsim_diff from `code`."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "torchsim_diff", "table", path], cwd=code, env=_env(code),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    child.stderr.close()
    return usage.ru_maxrss * 1024, time.perf_counter() - started, child.returncode


def _env(code: str) -> dict:
    return {**os.environ, "PYTHONPATH": code}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60.0, help="size of the results file (default: 60)")
    parser.add_argument("--from", dest="run", help="a finished run folder whose records are repeated")
    parser.add_argument("--code", nargs="+", default=[REPO], help="checkouts to measure (default: this one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="table-memory-") as folder:
        pattern = pattern_lines(args.run or small_run(folder))
        path = os.path.join(folder, "results.jsonl")
        size, lines = write_large_file(path, pattern, args.mb)
        one = os.path.join(folder, "one", "results.jsonl")
        os.makedirs(os.path.dirname(one))
        write_large_file(one, pattern[:1], 0)
        print(f"results file: {size / 1e6:.1f} MB, {lines} records ({len(pattern)} repeated)")
        print(f"{'code':<30} {'peak RSS MB':>12} {'one record MB':>13} {'added/file byte':>15} {'seconds':>8} {'exit':>5}")
        for code in args.code:
            rss, seconds, status = peak_rss_of_table(path, code)
            floor = peak_rss_of_table(one, code)[0]
            print(f"{os.path.basename(os.path.abspath(code)):<30} {rss / 1e6:>12.1f} {floor / 1e6:>13.1f} "
                  f"{(rss - floor) / size:>15.2f} {seconds:>8.1f} {status:>5}")
    print(f"(this process: peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
