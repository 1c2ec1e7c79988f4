"""Error-tolerance tables: what each op on each route needs, in the forms test suites use.

Per route x op x dtype, from each op's local figures (judge.local_error: its output against the
float64 op applied to the route's own values of its inputs, so an error upstream is not
charged to it), over the passing cases:

- error / eager's error at p50, p99 and max (eager's error floored at one ulp of the output);
- the atol a test needs at the dtype's default rtol, and the rtol at its default atol, at p99.9
  and at max (max: every case passes), and the atol eager's own result needs on the same inputs
  (where it is as large, the inputs' conditioning asks for it, not the route);
- the largest ulp error of the op's own output;
- the carried figures beside them (the node against the whole program's float64 value).

Failing cases are no tolerance a test should grant: they are left out of those rows and
counted apart in rows of their own, marked FAILING. A row of fewer than FEW_CASES cases is
marked: its quantiles say little.

    rows = tolerance_rows(records)             # sorted by error / eager's error, worst first
    route_rows = route_tolerance_rows(records) # what each route needs overall, and which ops set it
    print(opinfo_text(rows))                   # toleranceOverride per op, for a suite's DecorateInfo
"""
from __future__ import annotations

import math
from collections import defaultdict

from torchsim_diff.results.kinds import Kind

FEW_CASES = 10
PASSING, FAILING = "pass", "FAILING (apart)"
RATIO = ("err/eager p50", "err/eager p99", "err/eager max")
ATOL_MAX, RTOL_MAX = "atol needed max", "rtol needed max"
EAGER_ATOL_MAX = "eager's atol needed max"


def quantile(values, q: float):
    """The nearest-rank q-quantile of the finite values (None when there is none): p99.9 of
    fewer than 1,000 values is their max."""
    values = sorted(v for v in values if v is not None and math.isfinite(v))
    if not values:
        return None
    return values[min(len(values) - 1, max(0, int(math.ceil(q * len(values))) - 1))]


def default_tolerance(dtype: str):
    """(rtol, atol) of the judge's table for a dtype's name (torch.testing's defaults), or None."""
    import torch
    from torchsim_diff.judge.comparison import TOLERANCES
    return TOLERANCES.get(getattr(torch, dtype or "", None))


def _groups(records) -> dict:
    """(verdict, route, op, dtype) -> [(local Figures or None, carried Figures or None)] over
    the judged records whose figures count (Kind.tolerance_figures)."""
    groups = defaultdict(list)
    for r in records:
        if not r.judged or (r.kind is not None and r.kind not in Kind.values_where("tolerance_figures")):
            continue
        verdict = FAILING if r.failed else PASSING
        dtype = r.case_dtype if r.case else ",".join(r.dtypes)
        local, carried = r.local_op_figures(), r.per_op_figures()
        for op in sorted({*local, *carried}):
            groups[(verdict, r.route, op, dtype)].append((local.get(op), carried.get(op)))
    return groups


def _row(verdict, route, op, dtype, seen) -> dict:
    local = [f for f, _c in seen if f is not None]
    carried = [c for _f, c in seen if c is not None]
    ratios, atols, rtols = ([getattr(f, name) for f in local] for name in ("err_ratio", "atol_needed", "rtol_needed"))
    return {
        "route": route, "op": op, "dtype": dtype, "cases": len(local), "verdict": verdict,
        "note": _note(len(local), len(seen)),
        RATIO[0]: quantile(ratios, 0.5), RATIO[1]: quantile(ratios, 0.99), RATIO[2]: quantile(ratios, 1.0),
        "atol needed p99.9": quantile(atols, 0.999), ATOL_MAX: quantile(atols, 1.0),
        EAGER_ATOL_MAX: quantile([f.eager_atol_needed for f in local], 1.0),
        "rtol needed p99.9": quantile(rtols, 0.999), RTOL_MAX: quantile(rtols, 1.0),
        "max ulp": quantile([f.max_ulp for f in local], 1.0),
        "carried err/eager max": quantile([c.err_ratio for c in carried], 1.0),
        "carried atol needed max": quantile([c.atol_needed for c in carried], 1.0),
    }


def _note(measured: int, cases: int) -> str:
    """Few cases (their quantiles say little), and cases with carried figures only."""
    if measured == 0:
        return f"no local figures ({cases} carried only)"
    notes = [f"few cases (<{FEW_CASES})"] if measured < FEW_CASES else []
    if measured < cases:
        notes.append(f"{cases - measured} carried only")
    return "; ".join(notes)


def sort_key(row: dict) -> tuple:
    """Passing rows first, each by error / eager's error at p99 then max, worst first (rows
    without local figures last)."""
    worst = [-(row[name] if row[name] is not None else -1.0) for name in (RATIO[1], RATIO[2])]
    return (row["verdict"] != PASSING, *worst, row["route"], row["op"], row["dtype"])


def tolerance_rows(records) -> list:
    """Per verdict (passing, failing apart) x route x op x dtype: the rows of the module
    docstring, worst error / eager's error first."""
    return sorted((_row(*key, seen) for key, seen in _groups(records).items()), key=sort_key)


def above_default(row: dict) -> bool:
    """Whether the row's passing cases need more than the dtype's default tolerance."""
    default = default_tolerance(row["dtype"])
    return (row["verdict"] == PASSING and default is not None and row[ATOL_MAX] is not None
            and row[ATOL_MAX] > default[1])


def route_tolerance_rows(records) -> list:
    """Per route x dtype, over its passing rows: the atol (at default rtol) and rtol (at
    default atol) every case needs, the op that sets each, and the ops above the default."""
    by_route = defaultdict(list)
    for row in tolerance_rows(records):
        if row["verdict"] == PASSING and row[ATOL_MAX] is not None:
            by_route[(row["route"], row["dtype"])].append(row)
    return [_route_row(route, dtype, rows) for (route, dtype), rows in sorted(by_route.items())]


def _route_row(route: str, dtype: str, rows: list) -> dict:
    atol, atol_op = _largest(rows, ATOL_MAX)
    rtol, rtol_op = _largest(rows, RTOL_MAX)
    above = [row["op"] for row in sorted(rows, key=lambda row: -row[ATOL_MAX]) if above_default(row)]
    default = default_tolerance(dtype)
    return {"route": route, "dtype": dtype, "ops": len(rows),
            "default atol, rtol": f"{default[1]:g}, {default[0]:g}" if default else "-",
            "atol needed": atol, "set by (atol)": atol_op, "rtol needed": rtol, "set by (rtol)": rtol_op,
            "ops above default": ", ".join(above) or "none"}


def _largest(rows: list, column: str) -> tuple:
    """(the largest value of `column`, the op of its row)."""
    row = max(rows, key=lambda row: row[column] or 0.0)
    return row[column], row["op"]


# -- PyTorch's override form -------------------------------------------------------------------
OPINFO_HEADER = '''\
# Tolerance overrides from torchsim-diff: per route, each op whose passing cases need more
# than the dtype's default atol (its local error: the op's output against the float64 op on
# the route's own inputs). atol is the largest any case needed at the default rtol, rounded up.
# Op names are torchsim-diff's; paste an entry into the op's DecorateInfo.
import torch
from torch.testing._internal.common_device_type import tol, toleranceOverride
'''


def opinfo_text(rows: list) -> str:
    """Python text: OVERRIDES = {route: {op: toleranceOverride({dtype: tol(...)})}} for the
    passing rows above their dtype's default (above_default), each with its case counts."""
    per_route = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if above_default(row):
            per_route[row["route"]][row["op"]][row["dtype"]] = row
    lines = [OPINFO_HEADER, "OVERRIDES = {"]
    for route, ops in sorted(per_route.items()):
        lines.append(f"    {route!r}: {{")
        for op, by_dtype in sorted(ops.items()):
            lines.append(_override_line(op, by_dtype))
        lines.append("    },")
    lines.append("}")
    if not per_route:
        lines.insert(1, "# No op needs more than its dtype's default tolerance.")
    return "\n".join(lines) + "\n"


def _override_line(op: str, by_dtype: dict) -> str:
    entries, counts = [], []
    for dtype, row in sorted(by_dtype.items()):
        rtol = default_tolerance(dtype)[0]
        entries.append(f"torch.{dtype}: tol(atol={round_up(row[ATOL_MAX])}, rtol={rtol:g})")
        eager = row[EAGER_ATOL_MAX]
        counts.append(f"{row['cases']} {dtype} case{'s' * (row['cases'] != 1)}"
                      + (f" (eager's own needs atol={eager:.2g})" if eager is not None else ""))
    # the route's name comes from a results file: written as a literal, no line break leaves the comment
    return f"        {op!r}: toleranceOverride({{{', '.join(entries)}}}),  # {row['route']!r}: {', '.join(counts)}"


def round_up(x: float) -> str:
    """`x` rounded up to two significant digits, as text that parses to at least `x`."""
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    text = f"{math.ceil(x / step) * step:.2g}"
    return text if float(text) >= x else f"{(math.ceil(x / step) + 1) * step:.2g}"
