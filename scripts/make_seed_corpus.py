"""Regenerate corpora/seed/: a few cases that together cover every op and layout class.

Greedy cover over cases the generator draws (fixed seed, so the corpus is reproducible):
each chosen case adds the most (op, dtype) and layout-class pairs not yet covered.
Usage: python scripts/make_seed_corpus.py [--out corpora/seed] [--draws 600] [--extend]
--extend keeps the entries already there and adds cases only for what they miss (new ops),
so that the entries already replayed on every route stay as they are.
"""
import argparse
import glob
import os

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.buckets.corpus import read_entry, write_atomic
from torchsim_diff.case.layout import LAYOUT_CLASSES
from torchsim_diff.ops import all_ops
from torchsim_diff.generate.strategies import cases


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


def existing(out: str) -> list:
    return [read_entry(path).case for path in sorted(glob.glob(os.path.join(out, "seed-*.json")))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("corpora", "seed"))
    parser.add_argument("--draws", type=int, default=600)
    parser.add_argument("--extend", action="store_true", help="keep the entries there, add only what they miss")
    args = parser.parse_args()
    kept = existing(args.out) if args.extend else []
    have = {dtype: set().union(*[features(c) for c in kept if (c.dtype == "int64") == (dtype == "int64")])
            for dtype in ("float32", "int64")}
    layouts = {("layout", c) for c in LAYOUT_CLASSES}
    float_ops = {("op", n) for n, s in all_ops().items() if s.supports("float32")}
    chosen, missing = greedy_cover(draw_cases("float32", args.draws, 6), (float_ops | layouts) - have["float32"])
    # Integer cases: the integer-only ops, plus a few shared ones for exact comparison.
    int_wanted = {("op", n) for n, s in all_ops().items() if s.dtypes == "int"}
    int_wanted |= {("op", n) for n in ("sum", "cumsum", "sort", "scatter_add", "floor_divide")}
    int_chosen, int_missing = greedy_cover(draw_cases("int64", args.draws // 2, 6), int_wanted - have["int64"])
    half = [] if any(c.dtype == "float16" for c in kept) else \
        greedy_cover(draw_cases("float16", args.draws // 4, 4), {("op", "sum"), ("op", "softmax")})[0][:1]
    for i, case in enumerate(chosen + int_chosen + half, start=len(kept)):
        note = f"ops: {', '.join(case.ops)}; layouts: {', '.join(case.layouts)}"
        write_atomic(os.path.join(args.out, f"seed-{i:02d}-{case.dtype}.json"), {"note": note, "case": case.to_dict()})
    uncovered = sorted(missing | int_missing)
    print(f"kept {len(kept)}, wrote {len(chosen) + len(int_chosen) + len(half)} entries; "
          f"uncovered: {uncovered or 'none'}")


if __name__ == "__main__":
    main()
