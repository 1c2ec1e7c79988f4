"""Where the test suite's time goes, from a pytest junit file:

    bash scripts/test.sh --junitxml=readme.xml
    python benchmarks/suite_durations.py readme.xml [--top 25] [--before OLD.xml]

Prints, per test file: tests, wall seconds (call time as junit records it, setup and teardown
included), and the CPU seconds of the child processes its tests reaped (route workers, repro.py
runs, compilers; the `child_cpu_s` property tests/conftest.py records); then the slowest tests.
With --before, each row shows the older run's figures beside it. Figures, never assertions.
"""
from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET

from tabulate import tabulate


def read_junit(path: str) -> dict:
    """{test id: (seconds, child CPU seconds)}; the file is the module path of the test."""
    try:
        root = ET.parse(path)
    except (OSError, ET.ParseError) as error:
        sys.exit(f"suite_durations: cannot read {path} as a junit file: {error}")
    tests = {}
    for case in root.iter("testcase"):
        child = next((float(p.get("value", 0)) for p in case.iter("property") if p.get("name") == "child_cpu_s"), 0.0)
        tests[f"{case.get('classname')}::{case.get('name')}"] = (float(case.get("time", 0)), child)
    return tests


def file_of(test_id: str) -> str:
    return test_id.split("::")[0]


def per_file(tests: dict) -> dict:
    files = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for test_id, (seconds, child) in tests.items():
        row = files[file_of(test_id)]
        row[0] += 1
        row[1] += seconds
        row[2] += child
    return files


def file_table(tests: dict, before: dict | None) -> list:
    now, old = per_file(tests), per_file(before or {})
    rows = []
    for name, (count, seconds, child) in sorted(now.items(), key=lambda kv: -kv[1][1]):
        row = [name, count, round(seconds, 1), round(child, 1)]
        if before is not None:
            was = old.get(name, [0, 0.0, 0.0])
            row += [was[0], round(was[1], 1)]
        rows.append(row)
    total = [sum(r[i] for r in rows) for i in range(1, len(rows[0]))] if rows else []
    rows.append(["(all)", *[round(t, 1) for t in total]])
    return rows


def slowest(tests: dict, top: int, before: dict | None) -> list:
    rows = []
    for test_id, (seconds, child) in sorted(tests.items(), key=lambda kv: -kv[1][0])[:top]:
        row = [test_id, round(seconds, 1), round(child, 1)]
        if before is not None:
            row.append(round(before[test_id][0], 1) if test_id in before else "-")
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--before", help="an older junit file, shown beside")
    args = parser.parse_args()
    tests = read_junit(args.junit)
    before = read_junit(args.before) if args.before else None
    extra = ["tests before", "s before"] if before is not None else []
    print(tabulate(file_table(tests, before), headers=["file", "tests", "s", "child CPU s", *extra]))
    print()
    print(tabulate(slowest(tests, args.top, before), headers=["test", "s", "child CPU s", *(["s before"] if before else [])]))


if __name__ == "__main__":
    main()
