"""Do two runs hold the same records, apart from timing? For refactors that must not change
behaviour: run the same derandomized campaign before and after, then

    python benchmarks/compare_runs.py BEFORE_RUN AFTER_RUN [--prefix]

Records are read through this tree's record type (so a results.jsonl written before a change
of the record format compares with one written after: a field an old line lacks has its default), matched by (case_id, route) in order,
and compared field by field without the fields that measure time or depend on it (per-op
figures are measured within a share of the route's time) or that name where a run put its
files. --prefix compares only as many records as the shorter run holds (a run cut short).
Prints one line per differing field, then a summary; exits 1 when anything differs.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from torchsim_diff.results.jsonl import find_results, read_records  # noqa: E402

TIMING = {"t_compile", "t_run", "t_case", "t_harness", "t_start", "t_diagnose", "cost", "reduce_s", "op_errors",
          "op_local_errors", "artifacts", "reduced_artifacts", "node", "schema"}


def records_of(run: str) -> list:
    records = [r for path in find_results([run]) for r in read_records(path)]
    return [_plain(r) for r in records]


def _plain(record) -> dict:
    """Every field of the record type, with its default where an old line lacks it."""
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)
              if f.name not in ("extra", "absent", "artifacts_tar")}
    return {k: v for k, v in {**record.extra, **fields}.items() if k not in TIMING}


def differences(before: list, after: list) -> list:
    """(index, case_id, route, field, before, after) for every differing field."""
    found = []
    for i, (old, new) in enumerate(zip(before, after)):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                found.append((i, old.get("case_id"), old.get("route"), key, old.get(key), new.get(key)))
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--prefix", action="store_true", help="compare the first records only, as many as both hold")
    args = parser.parse_args(argv)
    before, after = records_of(args.before), records_of(args.after)
    n = min(len(before), len(after)) if args.prefix else max(len(before), len(after))
    if not args.prefix and len(before) != len(after):
        print(f"record counts differ: {len(before)} before, {len(after)} after")
    found = differences(before[:n], after[:n])
    for index, case_id, route, key, old, new in found[:50]:
        print(f"record {index} ({route} {case_id}) {key}: {str(old)[:120]!s} -> {str(new)[:120]!s}")
    failing = sum(1 for r in before[:n] if r.get("status") == "fail")
    print(f"{n} records compared ({failing} failing), {len(found)} differing fields"
          f"{' (first 50 shown)' if len(found) > 50 else ''}")
    return 1 if found or (not args.prefix and len(before) != len(after)) else 0


if __name__ == "__main__":
    sys.exit(main())
