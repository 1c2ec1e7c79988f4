"""False-positive benchmark: clean campaigns per route, judged by the rule with and without
the rounding carried through the graph (torchsim_diff.judge.comparison).

    .venv/bin/python benchmarks/bench_false_positives.py --routes inductor,triton,mlir,spike \\
        --seeds 1,2 --cases 2000 --out reports/fp

Prints per route: cases run, failures of the current rule and of the rule before carried
rounding (same route outputs), the share of discrete elements judged unstable, and the
allowance each op added (median and max, in ulps of the outputs). Every value failure is
listed with a verdict: "known bug" when it lands in a corpora/known bucket (same route,
kind and op), "real bug" when the route is off by at least REAL_BUG_RATIO times what the
rule allows (far beyond any rounding), else "review" (a false-positive candidate: read it).
Not part of CI; exit status 0 when no failure needs review, 1 otherwise.

Spread over processes: `--shard I/N` runs every N-th distinct case (from the I-th) of the
same draws, so N shards together run exactly the cases of the unsharded run. Each run
writes a summary file (JSON, rewritten as it goes; --summary), and `--merge FILE...`
prints the report of several runs as one.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings
from tabulate import tabulate

from torchsim_diff.judge import oracle
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets.corpus import KNOWN, iter_entries
from torchsim_diff.results.kinds import Kind
from torchsim_diff.generate.strategies import cases, no_local_constants

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUE_KINDS = (Kind.WRONG_VALUES, Kind.NONFINITE_MISMATCH)
REAL_BUG_RATIO = 10.0
DRAWS_PER_CASE = 3          # Hypothesis draws repeats; ask for more draws than distinct cases
SUMMARY_EVERY = 25          # cases between rewrites of the summary file


class BudgetSpent(Exception):
    """The run's --budget is over: stop drawing cases."""


class Tally:
    """What one route's campaign found; a plain-data copy goes to the summary file."""

    def __init__(self):
        self.cases = 0
        self.failures = []           # value failures of the current rule: dicts (see _failure)
        self.old_value_failures = 0
        self.failing = [0, 0]        # failing cases of any kind: before, now
        self.other_failures = collections.Counter()
        self.other_buckets: dict = {}    # bucket -> {"kind", "known", "count", "message"} of non-value failures
        self.discrete = 0
        self.unstable = 0
        self.by_op = collections.defaultdict(list)
        self.seconds = 0.0

    def to_dict(self) -> dict:
        return dict(vars(self), other_failures=dict(self.other_failures), by_op=dict(self.by_op))

    def add(self, data: dict) -> None:
        """Fold another run's to_dict() into this tally."""
        self.cases += data["cases"]
        self.failures += data["failures"]
        self.old_value_failures += data["old_value_failures"]
        self.failing = [a + b for a, b in zip(self.failing, data["failing"])]
        self.other_failures.update(data["other_failures"])
        for bucket, seen in data.get("other_buckets", {}).items():
            mine = self.other_buckets.setdefault(bucket, dict(seen, count=0))
            mine["count"] += seen["count"]
        self.discrete += data["discrete"]
        self.unstable += data["unstable"]
        for op, values in data["by_op"].items():
            self.by_op[op] += values
        self.seconds += data["seconds"]


class Known:
    """The corpora/known entries: (route, kind, op) of each, and their buckets."""

    def __init__(self):
        self.signatures, self.buckets = set(), set()
        for entry, _ in iter_entries([os.path.join(REPO, "corpora", "known")]):
            if entry is not None and entry.kind == KNOWN:
                sig = entry.raw.get("signature", "").split("|")
                self.signatures.add((entry.route, entry.raw.get("kind"), sig[2] if len(sig) > 2 else None))
                self.buckets.add(entry.bucket)


def verdict_of(v, known: Known) -> str:
    if (v.route, v.kind.value, v.op) in known.signatures:
        return "known bug"
    ratio = _error_over_allowed(v.message)
    if ratio is not None and ratio >= REAL_BUG_RATIO:
        return "real bug"
    return "review"


def _error_over_allowed(message: str):
    match = re.search(r"Greatest absolute difference: (\S+) at .*?\(up to (\S+) allowed\)", message)
    if not match:
        return None
    err, allowed = float(match.group(1)), float(match.group(2))
    return err / allowed if allowed > 0 else float("inf")


def judge_both(checker: Checker, case, route: str):
    """The route's outputs judged by the current rule and by the rule before carried rounding."""
    source = case.program_source()
    ref = checker.reference(case, source)
    folder = os.path.join(checker.out_dir, "artifacts", route, case.case_id)
    reply = checker.worker(route).run(case.to_dict(), source, folder, 1)
    new = Checker._verdict(case, route, ref, reply)
    if not new.failed:
        shutil.rmtree(folder, ignore_errors=True)      # keep artifacts of failing cases only, as Checker does
    return new, Checker._verdict(case, route, oracle.without_carried(ref), reply)


class Run:
    """One process's share of the campaigns: which cases it runs, until when, where it writes."""

    def __init__(self, args, known: Known):
        self.shard, self.shards = args.shard
        self.start, self.budget = time.monotonic(), args.budget
        self.deadline = None
        self.summary_path = args.summary
        self.known = known
        self.settings = {k: getattr(args, k) for k in ("routes", "seeds", "cases", "dtype", "timeout", "budget")}
        self.settings["shard"] = f"{self.shard}/{self.shards}"
        self.tallies: dict = {}
        self.stopped_early = False

    def begin_part(self, index: int, count: int) -> None:
        """Each (route, seed) gets its share of the budget, plus what earlier parts left."""
        if self.budget:
            self.deadline = self.start + self.budget * (index + 1) / count

    def mine(self, index: int) -> bool:
        return index % self.shards == self.shard

    def check_budget(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.stopped_early = True
            raise BudgetSpent

    def write_summary(self) -> None:
        if not self.summary_path:
            return
        data = {"settings": self.settings, "stopped_early": self.stopped_early,
                "tallies": {route: t.to_dict() for route, t in self.tallies.items()}}
        os.makedirs(os.path.dirname(os.path.abspath(self.summary_path)), exist_ok=True)
        tmp = self.summary_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, self.summary_path)


def run_route(checker, run: Run, route: str, seeds, n_cases: int, dtype: str, part: int, parts: int) -> None:
    """Each seed draws from a strategy of its own, without constants mined from the modules
    loaded so far: its cases depend on the seed alone, not on earlier seeds, on where a budget
    stopped them, or on which shard ran which case first."""
    tally = run.tallies.setdefault(route, Tally())
    for k, campaign_seed in enumerate(seeds):
        run.begin_part(part + k, parts)
        strategy = cases(dtype=dtype)
        seen: list = []

        @seed(campaign_seed)
        @settings(max_examples=n_cases * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def one(case):
            run.check_budget()          # first: Hypothesis replays a raising draw and must see it raise again
            if case.case_id in seen or len(seen) >= n_cases:
                return
            seen.append(case.case_id)
            if not run.mine(len(seen) - 1):
                return
            t0 = time.perf_counter()
            try:
                new, old = judge_both(checker, case, route)
            except Exception as exc:  # noqa: BLE001 - eager rejecting a case: count it, keep the campaign going
                tally.cases += 1
                tally.other_failures[f"reference: {type(exc).__name__}"] += 1
                return
            finally:
                tally.seconds += time.perf_counter() - t0
            _count(tally, new, old, run.known)
            if tally.cases % SUMMARY_EVERY == 0:
                run.write_summary()

        try:
            with no_local_constants():
                one()
        except BudgetSpent:
            print(f"  {route}: seed {campaign_seed}'s share of the budget spent", file=sys.stderr, flush=True)


def _count(tally: Tally, new, old, known: Known) -> None:
    tally.cases += 1
    if tally.cases % 50 == 0:
        print(f"  {new.route}: {tally.cases} cases, {len(tally.failures)} value failures", file=sys.stderr, flush=True)
    tally.discrete += new.stats.discrete
    tally.unstable += new.stats.unstable
    for op, ulps in new.stats.carried_by_op.items():
        tally.by_op[op].append(ulps)
    tally.failing[0] += old.failed
    tally.failing[1] += new.failed
    if old.failed and old.kind in VALUE_KINDS:
        tally.old_value_failures += 1
    if new.failed and new.kind in VALUE_KINDS:
        tally.failures.append(_failure(new, known))
    elif new.failed:
        tally.other_failures[new.kind.value] += 1
        _count_bucket(tally, new, known)


def _count_bucket(tally: Tally, v, known: Known) -> None:
    """Non-value failures by bucket, with one message each for the bucket table and, for a
    bucket no known bug covers, its first case and whole message (to triage it)."""
    seen = tally.other_buckets.setdefault(v.bucket, {
        "kind": v.kind.value, "known": v.bucket in known.buckets, "count": 0,
        "message": v.message.splitlines()[0][:110] if v.message else ""})
    if not seen["known"] and "case" not in seen:
        seen.update(case=v.case.to_dict(), full_message=v.message[-4000:] if v.message else "")
    seen["count"] += 1


def _failure(v, known: Known) -> dict:
    """A value failure as plain data, with its case so that it can be replayed."""
    return {"route": v.route, "case_id": v.case.case_id, "kind": v.kind.value, "op": v.op,
            "verdict": verdict_of(v, known), "worst": v.message.splitlines()[-1][:110] if v.message else "",
            "message": v.message, "case": v.case.to_dict()}


def report(tallies: dict) -> int:
    rows, listed, review = [], [], 0
    for route, t in tallies.items():
        verdicts = collections.Counter(f["verdict"] for f in t.failures)
        review += verdicts["review"]
        share = 100.0 * t.unstable / t.discrete if t.discrete else 0.0
        rows.append([route, t.cases, f"{t.failing[0]} / {t.failing[1]}", t.old_value_failures, len(t.failures),
                     verdicts["known bug"], verdicts["real bug"], verdicts["review"], dict(t.other_failures) or "-",
                     f"{t.unstable} / {t.discrete} ({share:.2f}%)", f"{t.seconds:.0f}"])
        listed += [[route, f["case_id"], f["kind"], f["op"], f["verdict"], f["worst"]] for f in t.failures]
    print(tabulate(rows, ["route", "cases", "failing before / now", "value failures before", "value failures now",
                          "known bug", "real bug", "review (FP?)", "other failures", "unstable discrete elements",
                          "s"]))
    buckets = [[route, b, o["kind"], o["count"], "known bug" if o["known"] else "NEW", o["message"]]
               for route, t in tallies.items() for b, o in sorted(t.other_buckets.items())]
    if buckets:
        print("\nOther failures by bucket:")
        print(tabulate(buckets, ["route", "bucket", "kind", "cases", "verdict", "message"]))
    if listed:
        print("\nValue failures now:")
        print(tabulate(listed, ["route", "case", "kind", "op", "verdict", "worst element"]))
    print("\nAllowance added per op (ulps of the outputs, over cases where the op appears):")
    print(tabulate(_op_rows(tallies), ["op", "cases", "median", "max"], floatfmt=".3g"))
    return 1 if review else 0


def _op_rows(tallies: dict) -> list:
    merged = collections.defaultdict(list)
    for t in tallies.values():
        for op, values in t.by_op.items():
            merged[op] += values
    return [[op, len(v), statistics.median(v), max(v)] for op, v in sorted(merged.items())]


def merge(paths: list) -> int:
    """The report of several runs' summary files, as one campaign."""
    tallies: dict = {}
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        early = " (stopped early: budget spent)" if data.get("stopped_early") else ""
        print(f"{path}: {data['settings']}{early}")
        for route, t in data["tallies"].items():
            tallies.setdefault(route, Tally()).add(t)
    print()
    return report(tallies)


def known_before_after(checker) -> None:
    """corpora/known value entries judged by the rule before and after carried rounding."""
    rows = []
    for entry, _ in iter_entries([os.path.join(REPO, "corpora", "known")]):
        if entry is None or entry.kind != KNOWN or entry.raw.get("kind") not in [k.value for k in VALUE_KINDS]:
            continue
        new, old = judge_both(checker, entry.case, entry.route)
        rows.append([entry.name, entry.route, entry.raw.get("kind"), _found(old), _found(new),
                     new.stats.unstable, new.message.splitlines()[-1][:90] if new.message else ""])
    print(tabulate(rows, ["known entry", "route", "kind", "before", "after", "unstable", "worst element (after)"]))


def _found(v) -> str:
    return f"found ({v.kind.value})" if v.failed else "MISSED"


def _shard(text: str) -> tuple:
    try:
        index, count = (int(s) for s in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N") from None
    if not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"shard {text!r}: I must be in 0..N-1")
    return index, count


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="inductor,triton,mlir,spike")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--cases", type=int, default=2000, help="distinct cases per seed and route (all shards)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--out", default=os.path.join("reports", "fp"))
    parser.add_argument("--shard", type=_shard, default=(0, 1), metavar="I/N",
                        help="run the distinct cases whose index modulo N is I (0-based)")
    parser.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                        help="stop drawing cases after this long, shared out over routes and seeds; "
                             "the summary says so")
    parser.add_argument("--summary", default=None,
                        help="summary file (JSON) to write; default OUT/summary-<routes>-<seeds>-<I>of<N>.json")
    parser.add_argument("--merge", nargs="+", metavar="SUMMARY", help="only print the report of these summary files")
    parser.add_argument("--known", action="store_true", help="only the before/after table on corpora/known")
    args = parser.parse_args(argv)
    if args.summary is None:
        tag = f"{args.routes.replace(',', '+')}-s{args.seeds.replace(',', '+')}-{args.shard[0]}of{args.shard[1]}"
        args.summary = os.path.join(args.out, f"summary-{tag}.json")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        return merge(args.merge)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"--seeds={args.seeds!r} is not a comma-separated list of integers", file=sys.stderr)
        return 2
    run = Run(args, Known())
    with Checker(out_dir=args.out, timeout_s=args.timeout) as checker:
        if args.known:
            known_before_after(checker)
            return 0
        try:
            routes = args.routes.split(",")
            for r, route in enumerate(routes):
                ok, reason, _ = checker.availability(route)
                if not ok:
                    print(f"{route}: unavailable ({reason})")
                    continue
                run_route(checker, run, route, seeds, args.cases, args.dtype, r * len(seeds), len(routes) * len(seeds))
        except KeyboardInterrupt:
            print("interrupted: figures so far", file=sys.stderr)
    run.write_summary()
    print(f"summary: {args.summary}", file=sys.stderr)
    return report(run.tallies)


if __name__ == "__main__":
    sys.exit(main())
