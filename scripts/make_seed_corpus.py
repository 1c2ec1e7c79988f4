"""Regenerate corpora/seed/: a few cases that together cover every op and layout class.

Greedy cover over cases the generator draws (fixed seed, so the corpus is reproducible):
each chosen case adds the most (op, dtype) and layout-class pairs not yet covered.
Usage: python scripts/make_seed_corpus.py [--out corpora/seed] [--draws 600]
"""
import argparse
import os

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.corpus import write_atomic
from torchsim_diff.layout import LAYOUT_CLASSES
from torchsim_diff.ops import all_ops
from torchsim_diff.strategies import cases


def draw_cases(dtype: str, draws: int, max_nodes: int) -> list:
    found = []

    @seed(2024)
    @settings(max_examples=draws, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(dtype=dtype, max_nodes=max_nodes, max_numel=512))
    def collect(case):
        found.append(case)
    collect()
    return found


def features(case) -> set:
    return {("op", op) for op in case.ops} | {("layout", c) for c in case.layouts}


def greedy_cover(pool: list, wanted: set) -> list:
    chosen, missing = [], set(wanted)
    while missing:
        best = max(pool, key=lambda c: (len(features(c) & missing), -len(c.nodes)))
        gained = features(best) & missing
        if not gained:
            break
        chosen.append(best)
        missing -= gained
    return chosen, missing


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("corpora", "seed"))
    parser.add_argument("--draws", type=int, default=600)
    args = parser.parse_args()
    layouts = {("layout", c) for c in LAYOUT_CLASSES}
    float_ops = {("op", n) for n, s in all_ops().items() if s.supports("float32")}
    chosen, missing = greedy_cover(draw_cases("float32", args.draws, 6), float_ops | layouts)
    # Integer cases: the integer-only ops, plus a few shared ones for exact comparison.
    int_wanted = {("op", n) for n, s in all_ops().items() if s.dtypes == "int"}
    int_wanted |= {("op", n) for n in ("sum", "cumsum", "sort", "scatter_add", "floor_divide")}
    int_chosen, int_missing = greedy_cover(draw_cases("int64", args.draws // 2, 6), int_wanted)
    half, _ = greedy_cover(draw_cases("float16", args.draws // 4, 4), {("op", "sum"), ("op", "softmax")})
    for i, case in enumerate(chosen + int_chosen + half[:1]):
        note = f"ops: {', '.join(case.ops)}; layouts: {', '.join(case.layouts)}"
        write_atomic(os.path.join(args.out, f"seed-{i:02d}-{case.dtype}.json"), {"note": note, "case": case.to_dict()})
    uncovered = sorted(missing | int_missing)
    print(f"wrote {len(chosen) + len(int_chosen) + min(1, len(half))} entries; uncovered: {uncovered or 'none'}")


if __name__ == "__main__":
    main()
