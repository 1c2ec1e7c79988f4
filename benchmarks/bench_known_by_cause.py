"""Known bugs matched by cause: planted bugs in ops that have known bugs must come out NEW.

    python benchmarks/bench_known_by_cause.py [--budget 30] [--timeout 8]

Each planted route of benchmarks/bug_zoo/shared_ops runs its trigger case through the case
runner, reduction on, with the known bugs of corpora/known re-labelled to that route (known
entries are per route; a planted route shares its ops with the real routes, so every real
route's entries are put on it). Per bug it prints: the entries its raw bucket (route, kind,
op, place) would have matched, its cause signature, and whether it came out known or NEW.
The target is every planted bug NEW. Figures, never asserts (tests/test_cause.py asserts).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bug_zoo import planted, shared_ops  # noqa: E402

KNOWN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora", "known")


def check_bugs(out_dir: str, *, known_dir: str = KNOWN, budget_s: float = 30.0, timeout_s: float = 8.0,
               bugs=None) -> list:
    """One row per planted bug (dict): bug, failed, kind, raw_matches (known entries its raw
    bucket hits) and their causes, cause (its cause signature), known (marked known by cause),
    matched (the entry)."""
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.run.runner import CaseRunner
    from torchsim_diff.buckets.corpus import KNOWN as KNOWN_KIND, cause_buckets, iter_entries
    from torchsim_diff.triage.refine import ReduceThenBucket
    from torchsim_diff.buckets.signatures import bucket_of, on_route
    entries = [e for e, err in iter_entries([known_dir]) if e is not None and e.kind == KNOWN_KIND]
    rows = []
    with Checker(out_dir=out_dir, timeout_s=timeout_s) as checker:
        refiner = ReduceThenBucket(checker, budget_s=budget_s)
        for route, case in shared_ops.trigger_cases().items():
            if bugs and route not in bugs:
                continue
            causes = {bucket_of(on_route(e.cause, route)): e.name for e in entries if e.cause}
            runner = CaseRunner(checker, known=cause_buckets([e.cause for e in entries if e.cause], route),
                                reducer=refiner)
            _verdict, record = runner.run(case, route)
            raw_matches = [e for e in entries if e.fields.signature
                           and bucket_of(on_route(e.fields.signature, route)) == record.raw_bucket]
            rows.append({"bug": route, "failed": record.failed, "kind": record.kind,
                         "raw_matches": [e.name for e in raw_matches], "raw_match_causes": [e.cause for e in raw_matches],
                         "cause": record.signature, "known": record.known, "matched": causes.get(record.bucket)})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=30.0, help="reduction budget per failure (s)")
    parser.add_argument("--timeout", type=float, default=8.0, help="route time limit per case (s): hangs cost it")
    args = parser.parse_args(argv)
    os.environ.update(planted.environment())
    rows = check_bugs(tempfile.mkdtemp(prefix="known-by-cause-"), budget_s=args.budget, timeout_s=args.timeout)
    _print(rows)
    return 0


def _print(rows) -> None:
    from tabulate import tabulate
    table = [[r["bug"], r["kind"] or "PASS", ", ".join(r["raw_matches"]) or "-", r["cause"] or "-",
              "known: " + str(r["matched"]) if r["known"] else ("NEW" if r["failed"] else "not found")] for r in rows]
    print(tabulate(table, headers=["planted bug", "kind", "known entries its raw bucket matches", "cause signature",
                                   "filed as"]))
    new = sum(1 for r in rows if r["failed"] and not r["known"])
    absorbed = sum(1 for r in rows if r["raw_matches"])
    print(f"\nfound as NEW {new}/{len(rows)} (target {len(rows)}/{len(rows)}); "
          f"absorbed by a known entry when matched by raw bucket: {absorbed}/{len(rows)}")


if __name__ == "__main__":
    sys.exit(main())
