"""Tables over results.jsonl records: run summary, error tolerances, buckets, coverage.

Every table is a list of rows (dicts) first and text second, so the same data prints as
plain text, Markdown, CSV, JSON or HTML.
"""
from __future__ import annotations

import csv
import html
import io
import json
import os
import re
from collections import Counter, defaultdict

from tabulate import tabulate

from torchsim_diff.report.standing import Standing
from torchsim_diff.report.tolerance import PASSING, tolerance_rows  # noqa: F401 - the tolerance table is one of these
from torchsim_diff.buckets import signatures

FORMATS = ("plain", "md", "csv", "json", "html")


def render(rows: list, fmt: str = "plain", title: str | None = None) -> str:
    """Rows as text in one of FORMATS. Text from records and ledgers is data: in CSV a cell that
    a spreadsheet would read as a formula is quoted, and in text for a terminal a control
    character (an escape sequence that would retitle or clear it) is written as its escape."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r} is not one of {FORMATS}")
    if fmt == "json":
        return json.dumps(rows, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        if rows:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows([{k: _as_csv_data(v) for k, v in r.items()} for r in rows])
        return out.getvalue()
    if fmt in ("plain", "md"):
        rows = [{k: printable(v) for k, v in r.items()} for r in rows]
        title = printable(title) if title else title
    if not rows:
        return f"{title}: no records" if title else "no records"
    table = tabulate([list(r.values()) for r in rows], headers=list(rows[0]),
                     tablefmt={"plain": "simple", "md": "github", "html": "html"}[fmt],
                     floatfmt=".3g", missingval="-")
    if title and fmt == "md":
        return f"### {title}\n\n{table}"
    if title and fmt == "html":
        return f"<h3>{html.escape(title)}</h3>\n{table}"
    return f"{title}\n{table}" if title else table


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _as_csv_data(value):
    """A text cell a spreadsheet would evaluate (=, +, -, @ first) with a quote in front."""
    return "'" + value if isinstance(value, str) and len(value) > 1 and value.startswith(FORMULA_STARTS) else value


def printable(value):
    """Text with each control character as its escape (\\x1b, \\n): a cell is one line, and
    never a terminal command."""
    if not isinstance(value, str) or value.isprintable():
        return value
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in value)


def _fmt_rate(count: int, seconds: float):
    return round(count / seconds, 2) if seconds > 0 else None


def _worst(values):
    """Largest of `values` that is not None (None when there is none)."""
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _seconds(values) -> float:
    return sum(v or 0.0 for v in values)


# -- what the tables read of a record ------------------------------------------------------------
# `table` streams its results files and keeps each record as table_view makes it, so a large file
# costs a fraction of its size: fields no table reads are left at their defaults, the case keeps
# only what the tables take from it, and names repeated from record to record are held once.
TABLE_FIELDS = ("case_id", "route", "status", "kind", "bucket", "op", "first_op", "ops", "dtypes", "layouts",
                "n_nodes", "max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed",
                "t_case", "t_harness", "t_start", "t_diagnose", "dynamic", "second_size", "message", "case",
                "op_errors", "op_local_errors", "known", "reduced_case", "trigger", "reduce_error", "schema")


def table_view(record, shared: dict):
    """`record` (results.record.Record) with only TABLE_FIELDS, for every table but the HTML page:
    its case cut to its dtype, its nodes' ops and arguments and its value tails, the message of a
    record without a bucket cut to its first line (a bucket's whole message names it:
    signatures.record_signature), and names, name lists and nodes taken from `shared` (one dict
    per reading, filled as it goes) when an earlier record had the same."""
    once = lambda value: _once(value, shared)                                # noqa: E731
    names = lambda values: None if values is None else once(tuple(values))   # noqa: E731
    op_errors = {once(op): {once(name): value for name, value in figures.items()}
                 for op, figures in record.op_errors.items()} if record.op_errors else record.op_errors
    return record.only(
        TABLE_FIELDS, route=once(record.route), status=once(record.status), kind=once(record.kind),
        bucket=once(record.bucket), op=once(record.op), first_op=once(record.first_op), ops=names(record.ops),
        dtypes=names(record.dtypes), layouts=names(record.layouts), trigger=names(record.trigger),
        second_size={"shapes": record.second_size_shapes} if record.second_size else record.second_size,
        case=_case_view(record.case, shared) if record.case else record.case, op_errors=op_errors,
        message=record.message if record.bucket else once(record.first_message_line))


def _case_view(case: dict, shared: dict) -> dict:
    """What the tables take from a case: its dtype, nodes ({"op", "attrs"}) and value tails."""
    nodes = tuple(_once_by((_NODE, n["op"], json.dumps(n.get("attrs", {}), sort_keys=True, default=str)),
                           lambda n=n: {"op": n["op"], "attrs": n.get("attrs", {})}, shared) for n in case["nodes"])
    tails = case.get("values", {}).get("tails")
    values = {} if tails is None else {"tails": _once(tuple(tails), shared)}
    return {"dtype": _once(case["dtype"], shared), "nodes": nodes, "inputs": (), "values": values}


_NODE = object()          # a node's key in `shared`, apart from any tuple of names


def _once(value, shared: dict):
    """`value`, or the equal one an earlier record put in `shared`."""
    return value if value is None else shared.setdefault(value, value)


def _once_by(key, make, shared: dict):
    """The object `shared` holds under `key`, made by `make()` the first time."""
    if key not in shared:
        shared[key] = make()
    return shared[key]


def summary_rows(records) -> list:
    """Per route: case counts by status, buckets, speed, and the harness's share of the time
    cases take once their worker is up, failures' localisation apart (both shown in seconds).
    records: results.record.Record objects (as are every table's)."""
    by_route = defaultdict(list)
    for r in records:
        by_route[r.route].append(r)
    rows = []
    for route, recs in sorted(by_route.items()):
        count = lambda s: sum(1 for r in recs if r.status == s)  # noqa: E731
        total_time = _seconds(r.t_case for r in recs)
        start, diagnosis = _seconds(r.t_start for r in recs), _seconds(r.t_diagnose for r in recs)
        per_case = total_time - start - diagnosis
        rows.append({
            "route": route, "cases": len(recs), "pass": count("pass"), "fail": count("fail"),
            "unsupported": count("unsupported"), "skipped": count("skipped"),
            "buckets": len({r.bucket for r in recs if r.bucket}),
            "cases/s": _fmt_rate(len(recs) - count("skipped"), total_time),   # cases that ran
            "harness %": round(100.0 * _seconds(r.t_harness for r in recs) / per_case, 1) if per_case > 0 else None,
            "start-up s": round(start, 1), "localising s": round(diagnosis, 1),
        })
    return rows


def bucket_rows(records, reproducers: dict | None = None, standing=None) -> list:
    """One row per bucket: where, what, how often, where it stands (report.standing: known with
    its cause, NEW, unconfirmed, seen before; "not reduced" for failures a budget left
    unreduced), when the bucket history first saw it, and its smallest case; distinct bugs
    first (signatures.rank_buckets: the most frequent, then each the farthest from those
    above). A reduced failure is told by its minimal case, as its page and bundle tell it: the
    op is its first divergent op, the size its node count."""
    standing = standing or Standing()
    buckets: dict = {}
    known, reduced = set(), set()
    for r in records:
        if not r.bucket:
            continue
        row = buckets.setdefault(r.bucket, {
            "bucket": r.bucket, "route": r.route, "kind": r.kind, "op": r.first_op or r.op, "count": 0,
            "status": "", "first seen": standing.first_seen.get(r.bucket, "-"), "first case": r.case_id,
            "smallest (nodes)": _nodes(r), "message": r.first_message_line[:80],
            "reproducer": (reproducers or {}).get(r.bucket)})
        row["count"] += 1
        row["smallest (nodes)"] = min(row["smallest (nodes)"], _nodes(r))
        if r.known:
            known.add(r.bucket)
        if not r.unreduced:
            reduced.add(r.bucket)
    for bucket, row in buckets.items():
        row["status"] = standing.status(bucket, bucket in known) if bucket in reduced else "not reduced"
    order = {b: k for k, b in enumerate(signatures.ranked_buckets(records))}
    return sorted(buckets.values(), key=lambda row: order[row["bucket"]])


def _nodes(record) -> int:
    """A failing record's size: its reduced case's nodes when it was reduced."""
    if record.reduced_case:
        return len(record.reduced_case.get("nodes", ()))
    return record.n_nodes or 0


def timing_rows(kernels) -> list:
    """Per kernel timed on TOGSim (timing.kernel_timing's rows): its cycles, how far above its
    DRAM and compute bounds (x 1.0 = on the bound), its units' utilisation, and the checks that
    failed (a known TOGSim defect marked known)."""
    rows = []
    for row in kernels:
        failed = [verdict["check"] + (" (known)" if verdict.get("known") else "")
                  for verdict in row.get("verdicts", ()) if not verdict["passed"]]
        rows.append({"case": row["case_id"], "kernel": row["kernel"], "programs": row["programs"],
                     "instret": row["instret"], "outcome": row["outcome"], "cycles": row.get("cycles"),
                     "cycles/dram bound": row.get("dram_ratio"), "cycles/compute bound": row.get("compute_ratio"),
                     "vector util": row.get("vector_utilisation"), "dma util": row.get("dma_utilisation"),
                     "failed checks": ", ".join(failed) or "-"})
    return rows


def timing_table(kernels, fmt: str = "plain") -> str:
    return render(timing_rows(kernels), fmt, "Timing")


def _distinct_cases(records):
    """The records, one per case (a case runs on several routes)."""
    seen = set()
    for r in records:
        if r.case_id not in seen:
            seen.add(r.case_id)
            yield r


def coverage_rows(records) -> list:
    """op x layout class: how many cases put that op next to an input of that class."""
    from torchsim_diff.case.layout import LAYOUT_CLASSES
    counts = defaultdict(lambda: defaultdict(int))
    for r in _distinct_cases(records):
        for op in r.ops:
            for cls in r.layouts:
                counts[op][cls] += 1
    return [{"op": op, **{cls: counts[op].get(cls, 0) for cls in LAYOUT_CLASSES}} for op in sorted(counts)]


LEFT_OUT = "(left out)"      # an optional argument the node does not set: the op's default
CENSUS_GOAL = 3              # distinct values per argument over a campaign (all of them if fewer)
CENSUS_SHOWN = 5             # values listed per argument, most drawn first


def args_rows(records) -> list:
    """The argument census: per op and argument, how many nodes drew it, its distinct values
    (a value the node leaves out counts as LEFT_OUT) and their shares, and whether it reached
    CENSUS_GOAL distinct values (or every value, for a bool or a closed set of names)."""
    from torchsim_diff.ops import all_ops
    specs = all_ops()
    drawn = defaultdict(Counter)
    for r in _distinct_cases(records):
        for node in r.case_nodes:
            spec = specs.get(node["op"])
            for name in (spec.signature if spec else {}):
                value = node["attrs"].get(name, LEFT_OUT)
                drawn[(node["op"], name)][value if value == LEFT_OUT else json.dumps(value)] += 1
    rows = []
    for (op, name), counts in sorted(drawn.items()):
        attr = specs[op].signature[name]
        goal = min(CENSUS_GOAL, len(attr.choices)) if attr.choices else CENSUS_GOAL
        total = sum(counts.values())
        shares = ", ".join(f"{v} {round(100.0 * n / total)}%" for v, n in counts.most_common(CENSUS_SHOWN))
        rows.append({"op": op, "argument": name, "nodes": total, "distinct": len(counts), "goal": goal,
                     "met": "yes" if len(counts) >= goal else "NO",
                     "values (share)": shares + (", ..." if len(counts) > CENSUS_SHOWN else "")})
    return rows


NON_CONTIGUOUS = {"transposed", "sliced", "broadcast", "channels_last", "overlapping"}


def mix_rows(records) -> list:
    """What the generated cases covered, per dtype: layout shares and ops seen."""
    from torchsim_diff.ops import all_ops
    cases_by_dtype = defaultdict(dict)
    for r in records:
        dtype = r.case_dtype if r.case else "?"
        cases_by_dtype[dtype][r.case_id] = r
    rows = []
    for dtype, cases in sorted(cases_by_dtype.items()):
        recs = list(cases.values())
        share = lambda pred: round(100.0 * sum(1 for r in recs if pred(set(r.layouts))) / len(recs), 1)  # noqa: E731
        seen = {op for r in recs for op in r.ops}
        registered = {n for n, s in all_ops().items() if s.supports(dtype)}
        rows.append({
            "dtype": dtype, "cases": len(recs),
            "non-contiguous %": share(lambda c: bool(c & NON_CONTIGUOUS)),
            "broadcast %": share(lambda c: "broadcast" in c), "inout %": share(lambda c: "inout" in c),
            "offset %": share(lambda c: "offset" in c), "transposed %": share(lambda c: "transposed" in c),
            "sliced %": share(lambda c: "sliced" in c), "channels_last %": share(lambda c: "channels_last" in c),
            "overlapping %": share(lambda c: "overlapping" in c),
            "ops seen": f"{len(seen & registered)}/{len(registered)}",
            "ops never seen": ",".join(sorted(registered - seen)) or "-",
            **_op_balance(recs, registered), **_tail_shares(recs), **_dynamic_shares(records, dtype),
        })
    return rows


def _op_counts(recs, registered) -> list:
    """Nodes per registered op over the cases (ops alone where a record has no case)."""
    counts = dict.fromkeys(registered, 0)
    for r in recs:
        for op in r.case_ops:
            if op in counts:
                counts[op] += 1
    return sorted(counts.values())


def gini(values: list) -> float:
    """Gini coefficient of non-negative counts: 0 when every op is drawn equally often,
    towards 1 when a few ops take every node."""
    values, total = sorted(values), sum(values)
    if not values or total == 0:
        return 0.0
    weighted = sum((i + 1) * v for i, v in enumerate(values))
    return 2 * weighted / (len(values) * total) - (len(values) + 1) / len(values)


def _op_balance(recs, registered) -> dict:
    counts = _op_counts(recs, registered)
    if not counts:
        return {}
    return {"op nodes min/median/max": f"{counts[0]}/{counts[len(counts) // 2]}/{counts[-1]}",
            "op Gini": round(gini(counts), 3)}


def _tail_shares(recs) -> dict:
    """Share of cases in a value tail and in the odd-size tail (strategies' per-case switches)."""
    tails = [r.value_tails for r in recs if r.case]
    if not tails:
        return {}
    return {"value tail %": round(100.0 * sum(1 for t in tails if t - {"odd_sizes"}) / len(tails), 1),
            "odd sizes %": round(100.0 * sum(1 for t in tails if "odd_sizes" in t) / len(tails), 1)}


def _dynamic_shares(records, dtype) -> dict:
    """Share of the torch.compile routes' records compiled with dynamic shapes, and of
    those, the share that also ran at a second size (routes/compile_options.py)."""
    compiled = [r for r in records if r.dynamic is not None and (r.case_dtype if r.case else "?") == dtype]
    if not compiled:
        return {}
    dynamic = [r for r in compiled if r.dynamic]
    second = [r for r in dynamic if r.second_size_shapes]
    return {"dynamic %": round(100.0 * len(dynamic) / len(compiled), 1),
            "second size % of dynamic": round(100.0 * len(second) / len(dynamic), 1) if dynamic else "-"}


# -- the end of a run ---------------------------------------------------------------------------
TERMINAL_TOLERANCE_ROWS = 12


PREVIEW_COLUMNS = ("route", "op", "dtype", "cases", "err/eager p99", "err/eager max", "atol needed max",
                   "eager's atol needed max", "max ulp", "carried err/eager max", "note")


def tolerance_preview(records) -> list:
    """The worst TERMINAL_TOLERANCE_ROWS passing rows of the tolerance table (by each op's own
    error / eager's error), in fewer columns, as lines."""
    passing = [row for row in tolerance_rows(records) if row["verdict"] == PASSING]
    worst = [{name: row[name] for name in PREVIEW_COLUMNS} for row in passing[:TERMINAL_TOLERANCE_ROWS]]
    if not worst:
        return []
    title = (f"Error tolerance (the {len(worst)} of {len(passing)} route x op x dtype rows of passing cases "
             f"with the largest error / eager's error, each op's own; all of them in the HTML report)")
    return render(worst, "plain", title).splitlines() + [""]


def new_bucket_rows(records, new_buckets, bundles: dict | None = None) -> list:
    """The buckets never seen before, distinct bugs first, each with its title, reduced size
    and bundle folder."""
    from torchsim_diff.buckets.bucket_history import smallest_per_bucket
    from torchsim_diff.case.graph import case_size
    smallest = smallest_per_bucket(records)
    rows = []
    order = {b: k for k, b in enumerate(signatures.ranked_buckets(records))}
    for bucket in sorted((b for b in new_buckets if b in smallest), key=lambda b: (order.get(b, len(order)), b)):
        record = smallest[bucket]
        nodes, inputs, elements = case_size(record.case_or_reduced)     # the case its bundle holds
        bundle = (bundles or {}).get(bucket)
        rows.append({"bucket": bucket, "title": issue_title(record, bundle),
                     "reduced": f"{nodes} node{'s' * (nodes != 1)}, {inputs} input{'s' * (inputs != 1)}, "
                                f"{elements} element{'s' * (elements != 1)}",
                     "bundle": bundle or "-"})
    return rows


def unconfirmed_lines(unconfirmed: dict) -> list:
    """Buckets whose self-check failed (bucket -> why): listed apart from NEW, never filed."""
    if not unconfirmed:
        return []
    lines = [f"Unconfirmed buckets ({len(unconfirmed)}), not NEW: their failure did not reproduce "
             f"when checked"]
    return lines + [f"  {bucket}  {reason}" for bucket, reason in sorted(unconfirmed.items())]


UNREDUCED_DIR = "unreduced"          # in the run folder: the cases of failures left unreduced


def unreduced_lines(records, run_dir: str) -> list:
    """The failures the budget left unreduced (Record.unreduced), listed apart from the
    buckets (their raw bucket says nothing of the cause), each case written to
    RUN/unreduced/. One line per raw bucket (route, kind, op and message shape alike), with
    the command that reduces its first case: a long run leaves many failures of a few kinds."""
    unreduced = [r for r in records if r.unreduced and r.case]
    if not unreduced:
        return []
    folder = os.path.join(run_dir, UNREDUCED_DIR)
    os.makedirs(folder, exist_ok=True)
    kinds: dict = {}
    for record in unreduced:
        path = os.path.join(folder, re.sub(r"[^\w.-]+", "_", f"{record.route}-{record.case_id}") + ".json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(record.case, handle, indent=1)
        kinds.setdefault((record.route, record.bucket or (record.kind, record.op)), []).append((record, path))
    lines = [f"Not reduced by the budget's end ({len(unreduced)} in {len(kinds)} raw bucket(s), cases in {folder}), "
             f"so neither NEW nor known; a longer --fuzz-budget reduces them, or the first of each kind:"]
    for found in kinds.values():
        record, path = found[0]
        what = f"{record.kind} in {record.op}" if record.op else record.kind
        times = f" ({len(found)} cases)" if len(found) > 1 else ""
        lines.append(f"  {record.route}: {what}{times}: torchsim-diff reduce {path} --route {record.route}")
    return lines


def issue_title(record, bundle: str | None) -> str:
    """The bundle's ISSUE.md title (its first heading: the file may open with a comment saying
    where to file it), else one made the same way from the record."""
    issue = os.path.join(bundle, "ISSUE.md") if bundle else None
    if issue and os.path.exists(issue):
        with open(issue, encoding="utf-8") as handle:
            heading = next((line for line in handle if line.startswith("# ")), None)
        if heading:
            return heading[2:].strip()
    message = (record.message or "").strip().splitlines()
    return f"[{record.route}] {record.kind} in `{record.op}`" + (f": {message[0][:100]}" if message else "")


def end_report(records, new_buckets, bundles: dict, run_dir: str, unavailable: dict | None = None,
               unconfirmed: dict | None = None, standing=None) -> list:
    """The lines a run ends with: NEW buckets first, then the unconfirmed ones (their
    self-check failed: bucket -> why) and the failures left unreduced, the summary, then the
    worst rows of the tolerance table; the full report goes to RUN/report.html, with a page per
    bucket (report.html_report; its path is the last line but one), each bucket's status as
    `standing` (report.standing) gives it."""
    lines = []
    new_rows = new_bucket_rows(records, new_buckets, bundles)
    if new_rows:
        lines.append(f"NEW buckets ({len(new_rows)}):")
        for row in new_rows:
            lines += [f"  {row['bucket']}  {row['title']}", f"      reduced to {row['reduced']}; bundle: {row['bundle']}"]
    else:
        lines.append("NEW buckets: none")
    lines += unconfirmed_lines(unconfirmed or {})
    lines += unreduced_lines(records, run_dir)
    seen = {r.bucket for r in records if r.bucket and not r.unreduced} - set(new_buckets) - set(unconfirmed or {})
    if seen:
        lines.append(f"({len(seen)} more bucket{'s' * (len(seen) != 1)} seen before or known: see the HTML report)")
    lines += ["", *render(summary_rows(records), "plain", "Summary").splitlines(), ""]
    lines += tolerance_preview(records)
    for route, reason in (unavailable or {}).items():
        lines.append(f"route {route} was not fuzzed: {reason}")
    from torchsim_diff.report.html_report import write_report
    page = write_report(run_dir, records, new_rows=new_rows, bundles=bundles, standing=standing)
    lines += [f"HTML report: {page}", f"records: {run_dir}"]
    return lines
