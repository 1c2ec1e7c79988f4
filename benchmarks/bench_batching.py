"""Batching identity check and speed: the same cases one at a time and in batches.

    .venv/bin/python benchmarks/bench_batching.py --route inductor --cases 500 --batch 8

Draws the cases once (fixed seed), runs them one at a time, then in batches of --batch
(torchsim_diff.batch), each in a fresh checker, and prints cases/s both ways and whether
every case got the same verdict (status, kind, bucket). Figures are printed, never asserted.
"""
import argparse
import collections
import tempfile
import time

from tabulate import tabulate

from torchsim_diff.batch import check_batch
from torchsim_diff.campaign import CampaignOptions
from torchsim_diff.check import Checker
from torchsim_diff.ray_campaign import draw_cases


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", default="inductor")
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--max-nodes", type=int, default=4)
    args = parser.parse_args()
    cases = draw_cases(CampaignOptions(routes=[args.route], out_dir=".", max_nodes=args.max_nodes),
                       args.seed, args.cases)
    solo, t_solo = _timed(lambda ch: [ch.check(c, args.route) for c in cases], args.route)
    batched, t_batch = _timed(lambda ch: [v for k in range(0, len(cases), args.batch)
                                          for v in check_batch(ch, cases[k:k + args.batch], args.route)], args.route)
    differ = [(s, b) for s, b in zip(solo, batched) if _verdict(s) != _verdict(b)]
    from_batch = sum(1 for v in batched if v.metrics.get("batch"))
    print(tabulate([["one at a time", len(cases), round(t_solo, 1), round(len(cases) / t_solo, 3)],
                    [f"batches of {args.batch}", len(cases), round(t_batch, 1), round(len(cases) / t_batch, 3)]],
                   headers=["run", "cases", "seconds (warm worker)", "cases/s"]))
    print(f"\nverdicts: {collections.Counter(_verdict(s)[0] for s in solo)}; "
          f"{from_batch} passes taken from a batch, {len(cases) - from_batch} from solo reruns")
    print(f"identical verdicts (status, kind, bucket): {len(cases) - len(differ)} / {len(cases)}")
    for s, b in differ[:20]:
        print(f"  differs: case {s.case.case_id}: one at a time {_verdict(s)}, batched {_verdict(b)}")


def _verdict(v) -> tuple:
    return v.status.value, v.kind.value if v.kind else None, v.bucket


def _timed(run, route: str):
    """Verdicts and seconds, with the route worker started (and warm) before the clock."""
    with tempfile.TemporaryDirectory() as out, Checker(out_dir=out) as checker:
        checker.availability(route)
        t0 = time.perf_counter()
        verdicts = run(checker)
        return verdicts, time.perf_counter() - t0


if __name__ == "__main__":
    main()
