"""Benchmark of the reducer: seconds from a failing case to its minimal case, and sizes.

Double route: generated cases of 6-8 nodes (all fail on `double-wrong-element`, whose
output 0 is off by one element). Real route: the known inductor argmax bug
(corpora/known/inductor-argmax-permuted-input.json) padded with unrelated nodes and
inputs. Prints one line per case and the medians of seconds, route runs and node counts.

    .venv/bin/python benchmarks/bench_reduce.py [--cases N] [--jobs J] [--skip-inductor] [--skip-doubles] [--show]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from tests.route_doubles import DOUBLES  # noqa: E402
from torchsim_diff.triage import corpus, reduce  # noqa: E402
from torchsim_diff.case.graph import Case  # noqa: E402
from torchsim_diff.routes import EXTRA_ROUTES_ENV  # noqa: E402
from torchsim_diff.generate.strategies import cases  # noqa: E402

KNOWN_ARGMAX = os.path.join(REPO, "corpora", "known", "inductor-argmax-permuted-input.json")


def generated_cases(count: int) -> list:
    """`count` generated float32 cases of 6-8 nodes whose first output is a float tensor."""
    found: list = []

    @hypothesis_seed(20261129)
    @settings(max_examples=200, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=cases(min_nodes=6, max_nodes=8, max_numel=256, families=["pointwise", "reduction", "view",
                                                                          "normalization", "inplace"]))
    def collect(case):
        big_enough = len(case.nodes) >= 6 and case.size()[1] >= 2 and case.size()[2] >= 32
        if len(found) < count and big_enough and _first_output_is_float(case):
            found.append(case)

    collect()
    return found


def _first_output_is_float(case: Case) -> bool:
    if not case.outputs:
        return False
    result = reduce.meta_results(case)[case.outputs[0]]
    return result.dtype.is_floating_point and result.numel() > 0


def padded_argmax_case() -> Case:
    """The known argmax bug with three unrelated nodes, an extra input and an extra output."""
    data = corpus.read_entry(KNOWN_ARGMAX).case.to_dict()
    data["inputs"].append({"name": "x1", "shape": [4, 6], "dtype": "float32", "domain": {"kind": "real"},
                           "layout": {"classes": ["contiguous"], "strides": [6, 1], "offset": 0,
                                      "storage_size": 24}, "mutated": False})
    data["nodes"] = [
        {"id": "p0", "op": "tanh", "args": ["x1"], "attrs": {}},
        data["nodes"][0],
        {"id": "p1", "op": "mul", "args": ["p0", "x1"], "attrs": {}},
        {"id": "p2", "op": "sum", "args": ["p1"], "attrs": {"dim": [1], "keepdim": False}},
        {"id": "p3", "op": "abs", "args": ["v0"], "attrs": {}},
        *data["nodes"][1:],
    ]
    data["outputs"] = ["p2", "p3", *data["outputs"]]
    return Case.from_dict(data)


def bench(label: str, route: str, subjects: list, jobs: int, show: bool) -> None:
    rows = []
    for case in subjects:
        try:
            result = reduce.reduce_case(case, route, out_dir=tempfile.mkdtemp(prefix="bench_reduce_"), jobs=jobs)
        except reduce.ReduceError as exc:
            print(f"  skipped: {exc}")
            continue
        rows.append(result)
        print(f"  {result.summary()}")
        if show:
            print(result.reduced.program_source())
            print(result.reduced.to_json(indent=None))
    if not rows:
        print(f"{label}: no case reduced")
        return
    print(f"{label}: {len(rows)} cases, median {statistics.median(r.seconds for r in rows):.1f} s, "
          f"median runs {statistics.median(r.runs for r in rows):.0f}, "
          f"median nodes {statistics.median(r.size_before[0] for r in rows):.0f} -> "
          f"{statistics.median(r.size_after[0] for r in rows):.0f}, "
          f"median input elements {statistics.median(r.size_before[2] for r in rows):.0f} -> "
          f"{statistics.median(r.size_after[2] for r in rows):.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5, help="generated cases on the double route")
    parser.add_argument("--jobs", type=int, default=None, help="parallel checkers (default: one per core)")
    parser.add_argument("--skip-inductor", action="store_true")
    parser.add_argument("--skip-doubles", action="store_true")
    parser.add_argument("--show", action="store_true", help="print each reduced case")
    args = parser.parse_args()
    os.environ[EXTRA_ROUTES_ENV] = ",".join(f"{k}={v}" for k, v in DOUBLES.items())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    if not args.skip_doubles:
        bench("double-wrong-element", "double-wrong-element", generated_cases(args.cases), args.jobs, args.show)
    if not args.skip_inductor:
        bench("inductor (known argmax bug, padded)", "inductor", [padded_argmax_case()], args.jobs, args.show)


if __name__ == "__main__":
    main()
