"""Generator reach without running a route: the cases `torchsim-diff fuzz --seed S
--max-examples N --dtype D` draws (the same strategy, seed and de-duplication), and what they
cover: nodes per op (min/median/max, Gini, ops never drawn), the value-tail and size-tail
shares, the share with a second size (dynamic shapes), the share dynamic=mixed compiles
dynamically, and the drawing time per case.

    python benchmarks/bench_generator_reach.py --cases 150 --seed 1 --dtypes float32,int64
"""
import argparse
import collections
import statistics
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.run import second_size
from torchsim_diff.generate.draws import DRAWS_PER_CASE
from torchsim_diff.ops import all_ops
from torchsim_diff.report.tables import gini
from torchsim_diff.routes.compile_options import dynamic_for
from torchsim_diff.generate.strategies import cases


def draw(dtype: str, count: int, seed_value: int) -> list:
    found: dict = {}

    @seed(seed_value)
    @settings(max_examples=count * DRAWS_PER_CASE, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(dtype=dtype))
    def collect(case):
        if len(found) < count:
            found.setdefault(case.case_id, case)
    collect()
    return list(found.values())


def share(cases_, predicate) -> float:
    return 100.0 * sum(1 for c in cases_ if predicate(c)) / max(len(cases_), 1)


def report(dtype: str, drawn: list, seconds: float) -> None:
    supported = [n for n, s in all_ops().items() if s.supports(dtype)]
    counts = collections.Counter(node["op"] for c in drawn for node in c.nodes)
    per_op = sorted(counts[n] for n in supported)
    tails = lambda c: set(c.values.get("tails", []))  # noqa: E731
    print(f"{dtype}: {len(drawn)} cases, {sum(per_op)} nodes, {len(supported)} ops; nodes per op "
          f"min/median/max {per_op[0]}/{statistics.median(per_op):g}/{per_op[-1]}, Gini {gini(per_op):.3f}, "
          f"never drawn: {[n for n in supported if not counts[n]] or 'none'}")
    print(f"  value tail {share(drawn, lambda c: tails(c) - {'odd_sizes'}):.1f}%, "
          f"size tail {share(drawn, lambda c: 'odd_sizes' in tails(c)):.1f}%, "
          f"second size {share(drawn, lambda c: second_size.resized(c) is not None):.1f}%, "
          f"dynamic under dynamic=mixed {share(drawn, lambda c: dynamic_for({'dynamic': 'mixed'}, c.to_dict())):.1f}%, "
          f"{1000 * seconds / max(len(drawn), 1):.1f} ms to draw a case")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16,int32,int64")
    args = parser.parse_args()
    for dtype in args.dtypes.split(","):
        start = time.perf_counter()
        drawn = draw(dtype, args.cases, args.seed)
        report(dtype, drawn, time.perf_counter() - start)


if __name__ == "__main__":
    main()
