"""Generator reach without running a route: the cases `torchsim-diff fuzz --seed S
--max-examples N --dtype D` draws (the same strategy, seed and de-duplication), and what they
cover: nodes per op (min/median/max, Gini, ops never drawn), distinct nodes per op (cases
sharing a prefix repeat a node whole), the share of cases holding special values, the value-tail and size-tail
shares, the share with a second size (dynamic shapes), the share dynamic=mixed compiles
dynamically, the drawing time per case, the operand forms of binary pointwise nodes (same
shape, broadcasting, 0-d, a Python number or another dtype, on either side), the value classes
of fresh float inputs, the share of cases holding each view class, and the edge census: per op
family and overall, the share of (op, edge) cells (`OpSpec.edges`) that some case met at the op's
own operands in eager (`--per-op` also lists, per op, how many cases met each cell); and the cells
the generator meant (`case.values["meant"]`): per op and overall, the cells meant and how many of
them reached the op's own operands at the node that meant them.

    python benchmarks/bench_generator_reach.py --cases 150 --seed 1 --dtypes float32,int64
"""
import argparse
import collections
import json
import statistics
import time

import torch

from torchsim_diff.case import layout
from torchsim_diff.case.values import SPECIAL_TAIL
from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.ops import get_op
from torchsim_diff.ops.pointwise import OPERAND_FORMS

from torchsim_diff.run import second_size
from torchsim_diff.generate.draws import first_cases
from torchsim_diff.ops import all_ops
from torchsim_diff.report.tables import gini
from torchsim_diff.routes.compile_options import dynamic_for
from torchsim_diff.generate import strategies
from torchsim_diff.generate.edge_reach import cells_met, declared_edges, meant_reached
from torchsim_diff.ops.edges import is_cell
from torchsim_diff.generate.strategies import cases


def draw(dtype: str, count: int, seed_value: int) -> list:
    """The campaign's cases (generate.draws.first_cases): drawing stops at the count's last
    distinct case, as a campaign's does, so the time per case is a campaign's."""
    return first_cases(cases(dtype=dtype), seed_value=seed_value, count=count)


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
    distinct = sorted(len(nodes) for nodes in distinct_nodes(drawn).values())
    print(f"  distinct nodes {sum(distinct)} of {sum(per_op)}; distinct nodes per drawn op min/median/max "
          f"{distinct[0]}/{statistics.median(distinct):g}/{distinct[-1]}; cases with special values "
          f"{share(drawn, holds_specials):.1f}%")
    print(f"  value tail {share(drawn, lambda c: tails(c) - {'odd_sizes'}):.1f}%, "
          f"size tail {share(drawn, lambda c: 'odd_sizes' in tails(c)):.1f}%, "
          f"second size {share(drawn, lambda c: second_size.resized(c) is not None):.1f}%, "
          f"dynamic under dynamic=mixed {share(drawn, lambda c: dynamic_for({'dynamic': 'mixed'}, c.to_dict())):.1f}%, "
          f"{1000 * seconds / max(len(drawn), 1):.1f} ms to draw a case")


def distinct_nodes(drawn: list) -> dict:
    """op -> its distinct nodes: each written out whole, down to the inputs it reads
    (shape, dtype, value domain, layout classes), values' seed left out."""
    found = collections.defaultdict(set)
    for case in drawn:
        written = {s["name"]: json.dumps([s["shape"], s["dtype"], s["domain"], s["layout"]["classes"]], sort_keys=True)
                   for s in case.inputs}
        for node in case.nodes:
            written[node["id"]] = (f'{node["op"]}({",".join(written[a] for a in node["args"])};'
                                   f'{json.dumps(node["attrs"], sort_keys=True)})')
            found[node["op"]].add(written[node["id"]])
    return found


def holds_specials(case) -> bool:
    """Special values in the case: all its float inputs (`special`) or some (their value class)."""
    return bool(case.values.get("special")) or any(s["domain"].get("tail") == SPECIAL_TAIL for s in case.inputs)


def node_tensors(case) -> dict:
    """Every input's and node's result as a meta tensor (shape and dtype), from the program."""
    env = {s["name"]: torch.empty(s["shape"], dtype=layout.dtype_of(s["dtype"]), device="meta") for s in case.inputs}
    for node in case.nodes:
        result = eval_expression(get_op(node["op"]).emit(list(node["args"]), node["attrs"]), {"torch": torch, **env})
        env[node["id"]] = result
    return {name: t for name, t in env.items() if isinstance(t, torch.Tensor)}


def operand_form(node, tensors: dict, dtype: torch.dtype) -> str:
    """Which of OPERAND_FORMS a binary node's operands make in a case of `dtype`."""
    if "scalar" in node["attrs"]:
        return f"{node['attrs'].get('scalar_side', 'right')} scalar"
    left, right = (tensors[a] for a in node["args"])
    if left.dtype != right.dtype:
        return "left other dtype" if left.dtype != dtype else "right other dtype"
    if left.shape == right.shape:
        return "same shape"
    if not right.shape:
        return "right 0-d"
    if not left.shape:
        return "left 0-d"
    return "right broadcasts" if torch.broadcast_shapes(left.shape, right.shape) == left.shape else "left broadcasts"


BINARY_OPS = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "fmod", "remainder", "floor_divide", "atan2",
              "eq", "ne", "lt", "le", "gt", "ge"}
VIEW_OPS = strategies.VIEW_OPS - {"contiguous"}
VIEW_CLASSES = {
    "step slice": lambda case, node, ids: node["op"] == "slice" and node["attrs"]["step"] > 1,
    "view of a view": lambda case, node, ids: node["op"] in VIEW_OPS and ids.get(node["args"][0]) in VIEW_OPS,
    "view after an op": lambda case, node, ids: node["op"] in VIEW_OPS and ids.get(node["args"][0]) not in VIEW_OPS | {None},
    "in-place write through a view": lambda case, node, ids: bool(node["attrs"].get("view")),
}
def forms_and_views(drawn: list) -> None:
    forms = collections.Counter()
    for case in drawn:
        tensors = node_tensors(case)
        for node in case.nodes:
            if node["op"] in BINARY_OPS:
                forms[operand_form(node, tensors, layout.dtype_of(case.dtype))] += 1
    total = sum(forms.values())
    print("  binary operand forms: " + ", ".join(f"{f} {100.0 * forms[f] / max(total, 1):.0f}%" for f in OPERAND_FORMS)
          + f" ({total} nodes)")
    classes = collections.Counter(spec["domain"].get("tail", "ordinary") for case in drawn for spec in case.inputs
                                  if spec["domain"]["kind"] in strategies.TAILED_KINDS
                                  and spec["dtype"] in strategies.FLOAT_DTYPES)
    total = sum(classes.values())
    if total:
        print("  value classes of float inputs: " + ", ".join(f"{c} {100.0 * n / total:.0f}%"
                                                             for c, n in classes.most_common()) + f" ({total} inputs)")
    views = {}
    for name, holds in VIEW_CLASSES.items():
        views[name] = share(drawn, lambda c: any(holds(c, n, {m["id"]: m["op"] for m in c.nodes}) for n in c.nodes))
    views["overlapping input"] = share(drawn, lambda c: any("overlapping" in s["layout"]["classes"] for s in c.inputs))
    print("  cases with a view class: " + ", ".join(f"{name} {value:.1f}%" for name, value in views.items()))


def edge_census(dtype: str, drawn: list, per_op: bool) -> None:
    """Cells met at least once, per family and overall; per op, the cases meeting each cell. In an
    integer case, the float-only value classes (NaN, -0, ...) are no cells, and in a float case the
    integer-only ones (int min): ops.edges.is_cell."""
    cases_meeting = collections.Counter(cell for case in drawn for cell in cells_met(case))
    by_family = collections.defaultdict(lambda: [0, 0])
    for spec in all_ops().values():
        if not spec.supports(dtype):
            continue
        counts = {edge.label: cases_meeting[(spec.name, edge.label)] for edge in declared_edges(spec)
                  if is_cell(edge, dtype)}
        tally = by_family[spec.family]
        tally[0] += sum(1 for n in counts.values() if n)
        tally[1] += len(counts)
        if per_op and counts:
            print(f"    {spec.name}: {sum(1 for n in counts.values() if n)}/{len(counts)} cells; "
                  + ", ".join(f"{label} {n}" for label, n in counts.items()))
    met, total = (sum(t[i] for t in by_family.values()) for i in (0, 1))
    print(f"  edge cells met in {len(drawn)} cases: {met}/{total} ({100.0 * met / max(total, 1):.1f}%); "
          + ", ".join(f"{family} {m}/{n} ({100.0 * m / max(n, 1):.0f}%)" for family, (m, n) in by_family.items()))
    meant_census(dtype, drawn, per_op)


def meant_census(dtype: str, drawn: list, per_op: bool) -> None:
    """Per op: the cells meant (distinct of declared) and reached when meant; overall, the share of
    meant placements that reached the op and the distinct cells meant and reached."""
    meant = collections.defaultdict(lambda: [0, 0])          # (op, label) -> [times meant, times reached]
    for case in drawn:
        for op, label, reached in meant_reached(case):
            meant[(op, label)][0] += 1
            meant[(op, label)][1] += reached
    declared = {(spec.name, edge.label) for spec in all_ops().values() if spec.supports(dtype)
                for edge in declared_edges(spec) if is_cell(edge, dtype)}
    if per_op:
        for op in sorted({op for op, _ in meant}):
            cells = {label: n for (o, label), n in meant.items() if o == op}
            total = sum(1 for o, _ in declared if o == op)
            print(f"    {op} meant: {len(cells)}/{total} cells, reached {sum(1 for m, r in cells.values() if r)}; "
                  + ", ".join(f"{label} {r}/{m}" for label, (m, r) in cells.items()))
    placements = sum(m for m, _ in meant.values())
    reached = sum(r for _, r in meant.values())
    print(f"  edge cells meant in {len(drawn)} cases: {len(meant)}/{len(declared)} cells meant, "
          f"{sum(1 for m, r in meant.values() if r)} of them reached when meant; {placements} placements, "
          f"{reached} reached the op ({100.0 * reached / max(placements, 1):.1f}%)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=150)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16,int32,int64")
    parser.add_argument("--per-op", action="store_true", help="the edge census per op, cell by cell")
    args = parser.parse_args()
    for dtype in args.dtypes.split(","):
        start = time.perf_counter()
        drawn = draw(dtype, args.cases, args.seed)
        report(dtype, drawn, time.perf_counter() - start)
        forms_and_views(drawn)
        edge_census(dtype, drawn, args.per_op)


if __name__ == "__main__":
    main()
