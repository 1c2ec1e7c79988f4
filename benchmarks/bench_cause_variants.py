"""Known causes met again in other clothes: every variant of a ledger case must be matched to its cause.

    python benchmarks/bench_cause_variants.py [--routes inductor,triton] [--causes NAME,...] [--budget 60]

For every ledger cause with a value failure on one of the routes, one of its cases is varied three ways:
  idle-special  a special value (NaN, Inf, a subnormal) put on an element the failure does not
                need: the first element whose ordinary value 0.5 keeps the failure, then each
                special in turn until one keeps it too;
  consumer      the failing output fed into a consumer, `add(out, out)`;
  shape         an input size grown by 1, 3 or 8 wherever it occurs (new elements 0.5, or 0
                for integer inputs), the old values kept in the leading elements: the first
                such case that fails (a bug may need its vector tail, say).
Each variant that fails is reduced as a campaign reduces a failure (ReduceThenBucket) and
looked up in the ledger (which_cause). Per variant it prints the cause it was matched to, or
"new"; then the count matched to their own cause. Figures, never asserts.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

KNOWN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora", "known")
SPECIALS = (float("nan"), float("inf"), float("-inf"), 1e-40)
ORDINARY = 0.5
GROWTHS = (3, 1, 8)


def value_entries(causes, routes) -> list:
    """(cause, entry) of the first value-failure entry of each cause on one of `routes`."""
    from torchsim_diff.results.kinds import Kind
    found = []
    for cause in causes:
        entry = next((e for e in cause.entries if e.route in routes and e.failure_kind
                      and Kind(e.failure_kind).value_failure), None)
        if entry is not None:
            found.append((cause, entry))
    return found


def idle_special_variant(checker, case, route):
    """`case` with a special value on an element the failure does not need (None: none found)."""
    from torchsim_diff.case import layout
    from torchsim_diff.triage import case_edits
    for k, spec in enumerate(case.inputs):
        if not spec["dtype"].startswith(("float", "bfloat")) or layout.is_overlapping(spec["shape"], spec["layout"]["strides"]):
            continue
        view = case_edits._materialize(case, k)
        for e in range(view.numel()):
            if not torch.isfinite(view.reshape(-1)[e]) or _set(case, k, view, e, ORDINARY) is None:
                continue
            if not checker.check(_set(case, k, view, e, ORDINARY), route).failed:
                continue
            for special in SPECIALS:
                variant = _set(case, k, view, e, special)
                if variant is not None and checker.check(variant, route).failed:
                    return variant
    return None


def _set(case, k, view, e, value):
    from torchsim_diff.triage import case_edits
    new = view.reshape(-1).clone()
    new[e] = value
    variant = case_edits._with_values(case, k, new.reshape(view.shape))
    return variant if variant is not None and case_edits._is_valid(variant) else None


def consumer_variant(case, where: str):
    """`case` with its failing output (`where`: "output k") fed into add(out, out)."""
    from torchsim_diff.triage import case_edits
    if not where.startswith("output "):
        return None
    k = int(where.split()[1])
    data = case.to_dict()
    ref = data["outputs"][k]
    data["nodes"].append({"id": "consumer", "op": "add", "args": [ref, ref], "attrs": {}})
    data["outputs"][k] = "consumer"
    variant = case_edits._candidate(data)
    return variant if variant is not None and case_edits._is_valid(variant) else None


def shape_variant(checker, case, route):
    """The first failing `case` with an input size grown by one of GROWTHS (None: none fails)."""
    sizes = sorted({s for spec in case.inputs for s in spec["shape"]}, reverse=True)
    for size in sizes:
        for growth in GROWTHS:
            variant = _grown(case, size, size + growth)
            if variant is not None and checker.check(variant, route).failed:
                return variant
    return None


def _grown(case, size: int, bigger: int):
    """`case` with `size` made `bigger` in every input shape, index bound and size attribute."""
    from torchsim_diff.case import layout, values
    from torchsim_diff.triage import case_edits, graph_passes
    data = case.to_dict()
    for k, spec in enumerate(data["inputs"]):
        shape = [bigger if s == size else s for s in spec["shape"]]
        if shape == spec["shape"]:
            continue
        old = case_edits._materialize(case, k)
        data["inputs"][k] = new_spec = graph_passes._reshaped(spec, shape)
        if layout.is_overlapping(shape, new_spec["layout"]["strides"]):
            return None          # an expanded input's values are not per element
        view = torch.full(shape, ORDINARY if old.dtype.is_floating_point else 0, dtype=old.dtype)
        view[tuple(slice(0, n) for n in old.shape)] = old
        lay = new_spec["layout"]
        storage = torch.zeros(lay["storage_size"], dtype=old.dtype)
        storage.as_strided(shape, lay["strides"], lay["offset"]).copy_(view)
        new_spec["data"] = values.encode(storage)
        if new_spec.get("domain", {}).get("high") == size:
            new_spec["domain"]["high"] = bigger
    for node in data["nodes"]:
        for key in ("shape", "size", "normalized_shape", "repeats"):
            if isinstance(node["attrs"].get(key), list):
                node["attrs"][key] = [bigger if s == size else s for s in node["attrs"][key]]
    variant = case_edits._candidate(data)
    return variant if variant is not None and case_edits._is_valid(variant) else None


def check_variants(out_dir: str, routes, *, names=None, budget_s: float = 60.0, timeout_s: float = 60.0,
                   progress=lambda line: None) -> list:
    """One row per (cause, variant): cause, entry, variant, outcome (matched / other cause /
    new / not identified / passes / not built), cause signature, seconds."""
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.buckets.causes import read_causes
    from torchsim_diff.triage.refine import ReduceThenBucket
    from torchsim_diff.buckets.which_cause import CauseLedger
    causes, _problems = read_causes(KNOWN)
    ledger = CauseLedger(causes)
    rows = []
    with Checker(out_dir=out_dir, timeout_s=timeout_s) as checker:
        refiner = ReduceThenBucket(checker, budget_s=budget_s)
        for cause, entry in value_entries(causes, routes):
            if names and cause.name not in names:
                continue
            found = checker.check(entry.case, entry.route)
            builders = {"idle-special": lambda: idle_special_variant(checker, entry.case, entry.route),
                        "consumer": lambda: consumer_variant(entry.case, found.where or ""),
                        "shape": lambda: shape_variant(checker, entry.case, entry.route)}
            for name, build in builders.items():
                started = time.perf_counter()
                row = {"cause": cause.name, "entry": entry.name, "variant": name, "signature": "-"}
                variant = build() if found.failed else None
                row.update(_identified(checker, refiner, ledger, cause, variant, entry.route))
                row["seconds"] = round(time.perf_counter() - started, 1)
                rows.append(row)
                progress(f"{cause.name} {name}: {row['outcome']} ({row['seconds']} s)")
    return rows


def _identified(checker, refiner, ledger, cause, variant, route) -> dict:
    if variant is None:
        return {"outcome": "not built"}
    verdict = checker.check(variant, route)
    if not verdict.failed:
        return {"outcome": "passes"}
    refiner.by_raw.clear()
    identity = ledger.identify(refiner, verdict)
    names = [c.name for c, _entry in identity.causes]
    if identity.unidentified:
        outcome = f"not identified: {identity.unidentified}"
    elif cause.name in names:
        outcome = "matched" if len(names) == 1 else "matched, among " + ", ".join(names)
    else:
        outcome = f"other cause: {', '.join(names)}" if names else "new"
    return {"outcome": outcome, "signature": identity.signature or "-"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="inductor,triton", help="routes whose causes are varied")
    parser.add_argument("--causes", default="", help="only these causes (comma-separated)")
    parser.add_argument("--budget", type=float, default=60.0, help="reduction budget per variant (s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="route time limit per case (s)")
    args = parser.parse_args(argv)
    rows = check_variants(tempfile.mkdtemp(prefix="cause-variants-"), args.routes.split(","),
                          names=set(filter(None, args.causes.split(","))), budget_s=args.budget,
                          timeout_s=args.timeout, progress=lambda line: print(line, file=sys.stderr, flush=True))
    _print(rows)
    return 0


def _print(rows) -> None:
    from tabulate import tabulate
    print(tabulate([[r["cause"], r["variant"], r["outcome"], r["signature"], r["seconds"]] for r in rows],
                   headers=["cause", "variant", "identified as", "cause signature", "s"]))
    failing = [r for r in rows if r["outcome"] not in ("not built", "passes")]
    matched = [r for r in failing if r["outcome"].startswith("matched")]
    print(f"\nvariants matched to their own cause: {len(matched)}/{len(failing)} failing variants "
          f"({len(rows) - len(failing)} not built or passing, of {len(rows)})")


if __name__ == "__main__":
    sys.exit(main())
