"""Benchmark of the reducer: seconds from a failing case to its minimal case, and sizes.

Three sets, each reduced the way a campaign reduces (one warm Checker, `--budget` seconds as
ReduceThenBucket's base budget):

- double: generated cases of 6-8 nodes, all failing on `double-wrong-element` (output 0 off by
  one element);
- known: every known bug of corpora/known on the chosen real routes (hangs left out), grown
  into a bigger failing case: an unrelated input and side chain (tanh, mul, sum) and an `abs`
  of each of its outputs as an extra output;
- records: the failing records of campaigns run with --no-reduce (results.jsonl files);
- causes: the known set reduced and bucketed as a campaign does (ReduceThenBucket): whether the
  minimal case's cause signature is the known entry's own `cause` (no slip to another bug met on
  the way), and how many reductions met another failure they did not switch to.

Prints one line per case, then per set and over all real failures: how many, the median and
90th percentile of nodes after reduction, seconds per reduction (median, p90, mean), route
runs, and the reduced cases whose values still hold noise (a float that is no multiple of 1/2
or above 8 in magnitude) or special values (NaN, Inf, subnormal).

    .venv/bin/python benchmarks/bench_reduce.py [--sets known,records,double] [--routes inductor,mlir,triton]
        [--records RUN/results.jsonl ...] [--budget 60] [--limit N] [--only NAME] [--show]

Failing records to reduce come from e.g. `torchsim-diff fuzz --routes mlir --no-reduce --special-values
--known-bugs none --buckets none --budget 8m --out RUN`.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402

from tests.route_doubles import DOUBLES  # noqa: E402
from torchsim_diff.triage import case_edits, reduce, refine  # noqa: E402
from torchsim_diff.case import layout  # noqa: E402
from torchsim_diff.case.graph import Case  # noqa: E402
from torchsim_diff.results.jsonl import read_records  # noqa: E402
from torchsim_diff.routes import EXTRA_ROUTES_ENV  # noqa: E402
from torchsim_diff.run.checker import Checker  # noqa: E402
from torchsim_diff.generate.strategies import cases  # noqa: E402
from torchsim_diff.buckets.signatures import reduction_key  # noqa: E402

KNOWN = os.path.join(REPO, "corpora", "known")
SKIPPED_KINDS = ("timeout",)          # each run of a hang costs the whole timeout
NOISE_LIMIT = 8.0


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
    return [("double-wrong-element", f"generated{k}", case) for k, case in enumerate(found)]


def _first_output_is_float(case: Case) -> bool:
    if not case.outputs:
        return False
    result = case_edits.meta_results(case)[case.outputs[0]]
    return result.dtype.is_floating_point and result.numel() > 0


def grown_case(case: Case) -> Case:
    """`case` with an unrelated input and side chain, and the abs of each output as an extra output."""
    data = case.to_dict()
    metas = case_edits.meta_results(case)
    data["inputs"].append({"name": "pad", "shape": [4, 6], "dtype": "float32", "domain": {"kind": "real"},
                           "layout": {"classes": ["contiguous"], "strides": [6, 1], "offset": 0,
                                      "storage_size": 24}, "mutated": False})
    wraps = [{"id": f"w{k}", "op": "abs", "args": [out], "attrs": {}} for k, out in enumerate(case.outputs)
             if metas[out].dtype != layout.dtype_of("bool") and metas[out].numel() > 0]
    data["nodes"] = [{"id": "p0", "op": "tanh", "args": ["pad"], "attrs": {}}, *data["nodes"],
                     {"id": "p1", "op": "mul", "args": ["p0", "pad"], "attrs": {}},
                     {"id": "p2", "op": "sum", "args": ["p1"], "attrs": {"dim": [1], "keepdim": False}}, *wraps]
    data["outputs"] = ["p2", *data["outputs"], *[w["id"] for w in wraps]]
    return Case.from_dict(data)


def known_entries(routes) -> list:
    """The ledger's entries (corpora/known/<cause>/<entry>.json) on `routes`, hangs left out."""
    from torchsim_diff.buckets.causes import read_causes
    causes, _problems = read_causes(KNOWN)
    return sorted((e for c in causes for e in c.entries if e.route in routes and e.fields.kind not in SKIPPED_KINDS),
                  key=lambda e: e.path)


def known_cases(routes) -> list:
    return [(e.route, e.name, grown_case(e.case)) for e in known_entries(routes)]


def bench_causes(entries: list, budget_s: float) -> None:
    """Each entry grown, then reduced and bucketed as a campaign does: is the cause kept?"""
    kept = met_others = total = 0
    for entry in entries:
        with Checker(out_dir=tempfile.mkdtemp(prefix="bench_reduce_")) as checker:
            verdict = checker.check(grown_case(entry.case), entry.route)
            if not verdict.failed or not entry.cause:
                print(f"  {entry.route:9} {entry.name:48} skipped: {'no cause' if verdict.failed else 'passes'}", flush=True)
                continue
            if not verdict.kind.value_failure and verdict.signature != entry.fields.signature:
                # the side chain met another bug first: the found case is that bug, not the entry's
                print(f"  {entry.route:9} {entry.name:48} skipped: the grown case fails as another bug "
                      f"({verdict.signature[:80]})", flush=True)
                continue
            fields = refine.ReduceThenBucket(checker, budget_s=budget_s).refine(verdict)
            total += 1
            same = verdict.refined == entry.cause
            kept += same
            met_others += bool(fields.get("other_failures"))
            print(f"  {entry.route:9} {entry.name:48} {'kept' if same else 'SLIPPED'}: {verdict.refined}"
                  + ("" if same else f" (entry: {entry.cause})")
                  + (f"; met {len(fields['other_failures'])} other failure(s)" if fields.get("other_failures") else ""),
                  flush=True)
    print(f"causes: the minimal case's cause is the entry's own in {kept}/{total}; "
          f"{met_others} reduction(s) met another failure and did not switch to it", flush=True)


def record_cases(paths, routes) -> list:
    subjects, seen = [], set()
    for path in paths:
        for record in read_records(path):
            if record.failed and record.route in routes and record.case and record.case_id not in seen:
                seen.add(record.case_id)
                subjects.append((record.route, f"{record.kind}-{record.case_id[:8]}", Case.from_dict(record.case)))
    return subjects


def reduce_one(checker: Checker, route: str, case: Case, budget_s: float):
    return reduce.reduce_case(case, route, out_dir=checker.out_dir, jobs=1, checkers=[checker],
                              key=reduction_key, budget_s=budget_s)


def value_counts(case: Case) -> tuple:
    """(noise, special): float input elements that are no multiple of 1/2 or above NOISE_LIMIT,
    and elements that are NaN, infinite or subnormal."""
    noise = special = 0
    for spec, view in zip(case.inputs, layout.materialize_all(case.to_dict())):
        if not view.dtype.is_floating_point:
            continue
        for x in view.double().reshape(-1).tolist():
            tiny = x != 0 and abs(x) < torch.finfo(view.dtype).smallest_normal
            if not math.isfinite(x) or tiny:
                special += 1
            elif abs(x) > NOISE_LIMIT or x * 2 != round(x * 2):
                noise += 1
    return noise, special


def bench(label: str, subjects: list, budget_s: float, show: bool) -> list:
    """Reduce each subject on a warm Checker, as a campaign does: the failing case was just
    checked (the worker is started and its compile cached) when the reduction starts. One
    Checker per subject: a Checker gives a route up after a few crashes in a row."""
    rows = []
    for route, name, case in subjects:
        with Checker(out_dir=tempfile.mkdtemp(prefix="bench_reduce_")) as checker:
            if not checker.check(case, route).failed:
                print(f"  {route:9} {name:48} skipped: passes", flush=True)
                continue
            try:
                result = reduce_one(checker, route, case, budget_s)
            except reduce.ReduceError as exc:      # a flaky failure
                print(f"  {route:9} {name:48} skipped: {str(exc)[:80]}", flush=True)
                continue
            noise, special = value_counts(result.reduced)
            rows.append((result, noise, special))
            print(f"  {route:9} {name:48} nodes {result.size_before[0]:2} -> {result.size_after[0]:2}  "
                  f"{result.seconds:6.1f} s {result.runs:4} runs  noise {noise:3}  special {special:3}  "
                  f"flag {result.reduced.values.get('special')}", flush=True)
            if show:
                print(result.reduced.to_json(indent=None))
    summarise(label, rows)
    return rows


def percentile(values, share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def summarise(label: str, rows: list) -> None:
    if not rows:
        print(f"{label}: no case reduced")
        return
    nodes = [r.size_after[0] for r, _, _ in rows]
    seconds = [r.seconds for r, _, _ in rows]
    print(f"{label}: {len(rows)} reductions; nodes {statistics.median(r.size_before[0] for r, _, _ in rows):.0f} -> "
          f"median {statistics.median(nodes):.1f}, p90 {percentile(nodes, 0.9)}, max {max(nodes)}; "
          f"seconds median {statistics.median(seconds):.1f}, p90 {percentile(seconds, 0.9):.1f}, "
          f"mean {statistics.mean(seconds):.1f}; median runs {statistics.median(r.runs for r, _, _ in rows):.0f}; "
          f"cases with noise values {sum(1 for _, n, _ in rows if n)}, with special values "
          f"{sum(1 for _, _, s in rows if s)}", flush=True)


def chosen(subjects: list, args) -> list:
    return [s for s in subjects if args.only in s[1]][: args.limit]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="known,records", help="comma-separated: known, records, causes, double")
    parser.add_argument("--routes", default="inductor,mlir,triton", help="real routes for known and records")
    parser.add_argument("--records", nargs="*", default=[], help="results.jsonl files of --no-reduce campaigns")
    parser.add_argument("--cases", type=int, default=5, help="generated cases on the double route")
    parser.add_argument("--budget", type=float, default=reduce.DEFAULT_BUDGET_S, help="base budget per reduction")
    parser.add_argument("--limit", type=int, default=None, help="at most this many cases per set")
    parser.add_argument("--only", default="", help="only cases whose name holds this text")
    parser.add_argument("--show", action="store_true", help="print each reduced case")
    args = parser.parse_args()
    os.environ[EXTRA_ROUTES_ENV] = ",".join(f"{k}={v}" for k, v in DOUBLES.items())
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    sets, routes = args.sets.split(","), args.routes.split(",")
    real = []
    if "known" in sets:
        real += bench("known (grown)", chosen(known_cases(routes), args), args.budget, args.show)
    if "records" in sets:
        real += bench("campaign records", chosen(record_cases(args.records, routes), args), args.budget, args.show)
    if "causes" in sets:
        bench_causes([e for e in known_entries(routes) if args.only in e.name][: args.limit], args.budget)
    if "double" in sets:
        bench("double-wrong-element", chosen(generated_cases(args.cases), args), args.budget, args.show)
    if real:
        summarise("all real failures", real)


if __name__ == "__main__":
    main()
