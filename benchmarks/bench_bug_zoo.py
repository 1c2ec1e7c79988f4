"""Bug zoo: how well fuzz + reduce-then-bucket finds and files the planted bugs.

    python benchmarks/bench_bug_zoo.py [--cases 100] [--seed 1] [--budget 60] [--bugs a,b] [--zoo {1,2,all}] [--jobs 1]

Runs one `fuzz` campaign (the CLI's, reduction on) per planted bug of benchmarks/bug_zoo
(--zoo: round 1, planted.ZOO; round 2, round2.ROUND2; or both)
and prints per bug: found or not, cases to the first failure, buckets, merges (another bug
with the same signature, route left out), the reduced case's size and the time from first
failure to the reduced case, then the medians against the issue's targets. Figures, never asserts.
--jobs runs that many bugs' campaigns at once (each in its own process).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import functools
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bug_zoo import planted  # noqa: E402


def run_bug(route: str, args) -> dict:
    from torchsim_diff.campaign.fuzz import CampaignOptions, run_campaign
    out = tempfile.mkdtemp(prefix=f"zoo-{route}-")
    opts = CampaignOptions(routes=[route], out_dir=out, max_examples=args.cases, seed=args.seed,
                           reduce=True, reduce_budget_s=args.budget)
    result = run_campaign(opts)
    fails = [r for r in result.records if r.failed]
    first = next((k for k, r in enumerate(result.records) if r.failed), None)
    reduced = {}
    for r in fails:
        reduced.setdefault(r.bucket, r)
    return {"bug": route, "found": bool(fails), "first": None if first is None else first + 1,
            "failures": len(fails), "buckets": {b: r.first_op for b, r in reduced.items()},
            "signatures": sorted({_signature(r) for r in fails}),
            "nodes": [len(r.reduced_case["nodes"]) for r in reduced.values() if r.reduced_case],
            "seconds": [r.reduce_s for r in reduced.values() if r.reduce_s is not None]}


def _signature(record) -> str:
    """The bucket's signature with the route left out (each bug is its own route); an
    unreduced record's raw parts otherwise (record: results.record.Record)."""
    if record.signature:
        return record.signature.split("|", 1)[1]
    return f"{record.kind}|{record.first_op}|{'+'.join(record.trigger or []) or 'any'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", type=float, default=60.0)
    parser.add_argument("--bugs", help="only these zoo routes (comma-separated)")
    parser.add_argument("--zoo", choices=["1", "2", "all"], default="all", help="which round of planted bugs")
    parser.add_argument("--jobs", type=int, default=1, help="bugs run at once, one process each")
    args = parser.parse_args(argv)
    os.environ.update(planted.environment())
    names = [cls.name for cls in _zoo(args.zoo)]
    chosen = args.bugs.split(",") if args.bugs else names
    if args.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
            rows = list(pool.map(functools.partial(run_bug, args=args), chosen))
    else:
        rows = [run_bug(name, args) for name in chosen]
    _print(rows)
    return 0


def _zoo(which: str) -> tuple:
    """The planted bug classes of round 1, round 2 or both."""
    from benchmarks.bug_zoo.round2 import ROUND2
    return {"1": planted.ZOO, "2": ROUND2, "all": planted.ZOO + ROUND2}[which]


def _print(rows) -> None:
    from tabulate import tabulate
    # Each bug runs as its own route, so bucket ids never collide across bugs; a merge is two
    # bugs sharing a bucket signature once the route is left out.
    owners: dict = {}
    for row in rows:
        for signature in row["signatures"]:
            owners.setdefault(signature, set()).add(row["bug"])
    table = []
    for row in rows:
        merges = sorted({o for s in row["signatures"] for o in owners[s]} - {row["bug"]})
        row["merges"] = merges
        table.append([row["bug"], "yes" if row["found"] else "NO", row["first"] or "-", row["failures"],
                      len(row["buckets"]), ", ".join(merges) or "0", "; ".join(row["signatures"]),
                      _median(row["nodes"]), _median(row["seconds"])])
    print(tabulate(table, headers=["bug", "found", "cases to first", "failures", "buckets", "merges",
                                   "signatures (route left out)", "reduced nodes", "reduce s"]))
    found = [r for r in rows if r["found"]]
    print(f"\nfound {len(found)}/{len(rows)} ({100.0 * len(found) / max(len(rows), 1):.0f}%, target >= 90%); "
          f"median buckets per found bug {_median([len(r['buckets']) for r in found])} (target <= 2); "
          f"merges {sum(bool(r['merges']) for r in rows)} (target 0); "
          f"median reduced nodes {_median([min(r['nodes']) for r in found if r['nodes']])} (target <= 3); "
          f"median time to reduced {_median([min(r['seconds']) for r in found if r['seconds']])} s (target <= 60)")


def _median(values):
    return round(statistics.median(values), 2) if values else "-"


if __name__ == "__main__":
    sys.exit(main())
