"""Re-sign known-bug entries with the cause signature of their minimal case.

    python benchmarks/resign_known.py [--routes triton,inductor] [--write] [--simplify] [--budget 30] [--timeout 60] [PATHS...]

Each known entry (corpora/known by default) is checked on its route and, when it still fails as
its kind, reduced and bucketed like a campaign's failure (triage.refine.ReduceThenBucket); its
raw `bucket`/`signature` (as its case is checked now) and its `cause` are printed, and written
back with --write; --simplify also keeps the minimal case as the entry's case (what its bundle
shows). An entry whose route cannot run here is left as it is and listed; one that no
longer fails is listed and left as it is (replay fails on it: the corpus tests say so). Exits 1
when an entry whose route runs here could not be re-signed, or (without --write) when one
would change.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

KNOWN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora", "known")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=[KNOWN])
    parser.add_argument("--routes", help="only entries of these routes (comma-separated)")
    parser.add_argument("--budget", type=float, default=30.0, help="reduction budget per entry (s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="route time limit per run (s)")
    parser.add_argument("--write", action="store_true", help="write the re-signed entries back")
    parser.add_argument("--simplify", action="store_true",
                        help="keep each entry's minimal case (fewer nodes, simpler values) where it fails as its kind")
    args = parser.parse_args(argv)
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.buckets.corpus import KNOWN as KNOWN_KIND, iter_entries, write_atomic
    from torchsim_diff.triage.corpus_replay import resign
    from torchsim_diff.triage.refine import ReduceThenBucket
    routes = set(args.routes.split(",")) if args.routes else None
    entries = [e for e, err in iter_entries(args.paths) if e is not None and e.kind == KNOWN_KIND
               and (routes is None or e.route in routes)]
    failed = changed = 0
    with Checker(out_dir=tempfile.mkdtemp(prefix="resign-"), timeout_s=args.timeout) as checker:
        refiner = ReduceThenBucket(checker, budget_s=args.budget)
        for entry in entries:
            ok, reason, *_ = checker.availability(entry.route)
            if not ok:
                print(f"{entry.name}: route {entry.route} unavailable, kept as it is ({reason})", flush=True)
                continue
            try:
                data, what = resign(refiner, entry, simplify=args.simplify)
            except Exception as exc:  # noqa: BLE001 - one entry's failure is reported, the others go on
                data, what = None, f"not re-signed: {type(exc).__name__}: {exc}"
            print(f"{entry.name}: {what}", flush=True)
            if data is None:
                failed += 1
            elif data != entry.raw:
                changed += 1
                if args.write:
                    write_atomic(entry.path, data)
    print(f"\n{len(entries)} entries, {changed} {'re-signed' if args.write else 'would change'}, {failed} not re-signed")
    return 1 if failed or (changed and not args.write) else 0


if __name__ == "__main__":
    sys.exit(main())
