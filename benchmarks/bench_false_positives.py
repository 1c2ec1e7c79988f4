"""False-positive benchmark: clean campaigns per route, judged by the rule with and without
the rounding carried through the graph (torchsim_diff.judge).

    .venv/bin/python benchmarks/bench_false_positives.py --routes inductor,triton,mlir,spike \\
        --seeds 1,2 --cases 2000 --out reports/fp

Prints per route: cases run, failures of the current rule and of the rule before carried
rounding (same route outputs), the share of discrete elements judged unstable, and the
allowance each op added (median and max, in ulps of the outputs). Every value failure is
listed with a verdict: "known bug" when it lands in a corpora/known bucket (same route,
kind and op), "real bug" when the route is off by at least REAL_BUG_RATIO times what the
rule allows (far beyond any rounding), else "review" (a false-positive candidate: read it).
Not part of CI; exit status 0 when no failure needs review, 1 otherwise.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings
from tabulate import tabulate

from torchsim_diff import oracle
from torchsim_diff.check import Checker
from torchsim_diff.corpus import KNOWN, iter_entries
from torchsim_diff.kinds import Kind
from torchsim_diff.strategies import cases

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALUE_KINDS = (Kind.WRONG_VALUES, Kind.NONFINITE_MISMATCH)
REAL_BUG_RATIO = 10.0
DRAWS_PER_CASE = 3          # Hypothesis draws repeats; ask for more draws than distinct cases


class Tally:
    """What one route's campaign found."""

    def __init__(self):
        self.cases = 0
        self.failures = []           # (verdict, old_failed, review) for the current rule
        self.old_value_failures = 0
        self.failing = [0, 0]        # failing cases of any kind: before, now
        self.other_failures = collections.Counter()
        self.discrete = 0
        self.unstable = 0
        self.by_op = collections.defaultdict(list)
        self.seconds = 0.0


def known_signatures() -> set:
    """(route, kind, op) of the corpora/known entries."""
    found = set()
    for entry, _ in iter_entries([os.path.join(REPO, "corpora", "known")]):
        if entry is not None and entry.kind == KNOWN:
            sig = entry.raw.get("signature", "").split("|")
            found.add((entry.route, entry.raw.get("kind"), sig[2] if len(sig) > 2 else None))
    return found


def verdict_of(v, known: set) -> str:
    if (v.route, v.kind.value, v.op) in known:
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
    return Checker._verdict(case, route, ref, reply), Checker._verdict(case, route, oracle.without_carried(ref), reply)


def run_route(checker, route: str, seeds, n_cases: int, dtype: str, tally: Tally) -> None:
    strategy = cases(dtype=dtype)
    for campaign_seed in seeds:
        seen: set = set()

        @seed(campaign_seed)
        @settings(max_examples=n_cases * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def one(case):
            if case.case_id in seen or len(seen) >= n_cases:
                return
            seen.add(case.case_id)
            t0 = time.perf_counter()
            new, old = judge_both(checker, case, route)
            tally.seconds += time.perf_counter() - t0
            _count(tally, new, old)

        one()


def _count(tally: Tally, new, old) -> None:
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
        tally.failures.append(new)
    elif new.failed:
        tally.other_failures[new.kind.value] += 1


def report(tallies: dict, known: set) -> int:
    rows, listed, review = [], [], 0
    for route, t in tallies.items():
        verdicts = collections.Counter(verdict_of(v, known) for v in t.failures)
        review += verdicts["review"]
        share = 100.0 * t.unstable / t.discrete if t.discrete else 0.0
        rows.append([route, t.cases, f"{t.failing[0]} / {t.failing[1]}", t.old_value_failures, len(t.failures),
                     verdicts["known bug"],
                     verdicts["real bug"], verdicts["review"], dict(t.other_failures) or "-",
                     f"{t.unstable} / {t.discrete} ({share:.2f}%)", f"{t.seconds:.0f}"])
        listed += [[route, v.case.case_id, v.kind.value, v.op, verdict_of(v, known), v.message.splitlines()[-1][:110]]
                   for v in t.failures]
    print(tabulate(rows, ["route", "cases", "failing before / now", "value failures before", "value failures now",
                          "known bug",
                          "real bug", "review (FP?)", "other failures", "unstable discrete elements", "s"]))
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="inductor,triton,mlir,spike")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--cases", type=int, default=2000, help="distinct cases per seed and route")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--out", default=os.path.join("reports", "fp"))
    parser.add_argument("--known", action="store_true", help="only the before/after table on corpora/known")
    args = parser.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        print(f"--seeds={args.seeds!r} is not a comma-separated list of integers", file=sys.stderr)
        return 2
    known, tallies = known_signatures(), {}
    with Checker(out_dir=args.out, timeout_s=args.timeout) as checker:
        if args.known:
            known_before_after(checker)
            return 0
        try:
            for route in args.routes.split(","):
                ok, reason, _ = checker.availability(route)
                if not ok:
                    print(f"{route}: unavailable ({reason})")
                    continue
                tallies[route] = Tally()
                run_route(checker, route, seeds, args.cases, args.dtype, tallies[route])
        except KeyboardInterrupt:
            print("interrupted: figures so far", file=sys.stderr)
    return report(tallies, known)


if __name__ == "__main__":
    sys.exit(main())
