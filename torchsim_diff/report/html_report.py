"""The HTML report: a folder that opens from disk, with no server and nothing fetched.

    RUN/report.html             tables, ops x routes heatmaps, error histograms; links to
    RUN/buckets/<bucket>.html   one page per bucket: its title, the reduced case as a graph,
                                the first divergent op, the error figures and its bundle's files

    >>> write_report(run_dir, records, new_rows=new_rows, bundles=bundles)   # -> RUN/report.html

Every link is relative, so the folder can be moved or zipped with its bundles; pictures are
inline SVG and the style sheet is inline. Records are data from outside: every text taken from
one is HTML-escaped, and page names are made from bucket names, never taken as paths.
"""
from __future__ import annotations

import dataclasses
import hashlib
import html
import json
import math
import os
import re
from collections import Counter, defaultdict
from typing import Callable
from urllib.parse import quote

from torchsim_diff.report import tables
from torchsim_diff.report.standing import Standing

REPORT_FILE = "report.html"
PAGES_DIR = "buckets"
BUNDLE_FILES = ("repro.py", "case.json", "ISSUE.md")
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:75em} table{border-collapse:collapse} "
         "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left} pre{background:#f6f6f6;padding:.5em;"
         "overflow-x:auto} figure{display:inline-block;margin:0 2em 1em 0}")
HEATMAP_OPS = 40            # rows of a heatmap at most: the ops with the largest values
MESSAGE_LINES = 40          # lines of a record's message shown on its bucket page
FIGURE_NAMES = {"max_abs_err": "max abs error", "max_rel_err": "max rel error", "max_ulp": "max ulp",
                "err_ratio": "error / eager's error", "atol_needed": "atol needed (at the dtype's rtol)",
                "rtol_needed": "rtol needed (at the dtype's atol)"}


# -- the folder --------------------------------------------------------------------------------
def write_report(run_dir: str, records, *, new_rows: list | None = None, bundles: dict | None = None,
                 title: str = "torchsim-diff report", standing=None) -> str:
    """Write RUN/report.html and a page per bucket under RUN/buckets/; returns report.html's
    path. new_rows: tables.new_bucket_rows (the NEW buckets, first on the page); bundles:
    bucket -> bundle folder (absolute, or relative to the working directory); standing:
    report.standing.Standing, each bucket's status (default: NEW for new_rows' buckets)."""
    from torchsim_diff.buckets.bucket_history import smallest_per_bucket
    bundles = bundles or {}
    standing = standing or Standing(new={row["bucket"] for row in new_rows or []})
    pages_dir = os.path.join(run_dir, PAGES_DIR)
    os.makedirs(pages_dir, exist_ok=True)
    pages = {}
    counts = Counter(r.bucket for r in records if r.failed)
    for bucket, record in smallest_per_bucket(records).items():
        pages[bucket] = f"{PAGES_DIR}/{quote(page_name(bucket))}"
        _write(os.path.join(pages_dir, page_name(bucket)),
               bucket_page(record, bundle=bundles.get(bucket), page_dir=pages_dir, count=counts[bucket],
                           status=standing.of_record(record)))
    report = os.path.join(run_dir, REPORT_FILE)
    _write(report, html_page(records, title, new_rows=new_rows, pages=pages, page_dir=run_dir,
                             timings=_timings(run_dir), standing=standing, bundles=bundles))
    return report


def _timings(run_dir: str) -> list:
    """TOGSim's per-kernel rows of the run (timing.jsonl, timing.kernel_timing), if it has any."""
    from torchsim_diff.timing.kernel_timing import read_timings
    rows, _bad = read_timings([run_dir])      # the rows before a bad line; `table` names the line
    return rows


def _write(path: str, text: str) -> None:
    from torchsim_diff.files import replace_text
    replace_text(path, text)


def page_name(bucket: str) -> str:
    """The file name of a bucket's page: the bucket itself when it is a plain name, else its
    plain characters and a digest (a record's bucket is text from outside, not a path)."""
    if re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}", bucket):
        return f"{bucket}.html"
    plain = re.sub(r"[^A-Za-z0-9_-]+", "_", bucket)[:40]
    return f"{plain}-{hashlib.sha256(bucket.encode()).hexdigest()[:10]}.html"


def relative_href(target: str, page_dir: str) -> str:
    """A link from a page in `page_dir` to `target` (absolute or relative to the working
    directory), as a URL path."""
    rel = os.path.relpath(os.path.abspath(target), os.path.abspath(page_dir))
    return quote(rel.replace(os.sep, "/"))


def _document(title: str, body: list) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>")


def _link(text, href: str | None) -> str:
    label = html.escape(str(text))
    return f'<a href="{html.escape(href)}">{label}</a>' if href else label


def _table(rows: list, title: str, links: dict | None = None) -> str:
    """Rows (dicts) as an HTML table; links: column -> (row -> href or None)."""
    if not rows:
        return ""
    links = links or {}
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{_link(_cell(v), links[k](row) if k in links else None)}</td>"
                                    for k, v in row.items()) + "</tr>" for row in rows)
    return f"<h3>{html.escape(title)}</h3><table><tr>{head}</tr>{body}</table>"


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


# -- report.html -------------------------------------------------------------------------------
def html_page(records, title: str = "torchsim-diff report", new_rows: list | None = None,
              pages: dict | None = None, page_dir: str = ".", timings: list | None = None, standing=None,
              bundles: dict | None = None) -> str:
    """The report page: NEW buckets, heatmaps, summary, error histograms, the other tables.
    pages: bucket -> its page's href (none: buckets are not linked, as when the page is
    printed alone); page_dir: the folder the page is written to (bundle links start there);
    timings: TOGSim's per-kernel rows, shown after the error tolerances; standing: the
    buckets' status (report.standing), a known one's linked to its cause's upstream thread;
    bundles: bucket -> its bundle folder, linked from the Buckets table as from the NEW one."""
    pages = pages or {}
    page_of = lambda row: pages.get(row["bucket"])          # noqa: E731
    sections = [f"<h1>{html.escape(title)}</h1>"]
    if new_rows:
        shown = [{**row, "bundle": _bundle_href(row["bundle"], page_dir) or "no bundle"} for row in new_rows]
        bundle_of = lambda row: None if row["bundle"] == "no bundle" else row["bundle"]   # noqa: E731
        sections.append(_table(shown, "NEW buckets", {"bucket": page_of, "bundle": bundle_of}))
    sections += heatmap_sections(records, pages)
    sections.append(tables.render(tables.summary_rows(records), "html", "Summary"))
    sections.append("<h3>Max abs error per case (decades), by route</h3>")
    for route in sorted({r.route for r in records}):
        svg = error_histogram_svg(records, route)
        if svg:
            sections.append(f"<figure><figcaption>{html.escape(route)}</figcaption>{svg}</figure>")
    sections += tolerance_sections(records)
    if timings:
        sections.append(tables.render(tables.timing_rows(timings), "html", "Timing on TOGSim, per kernel"))
    upstream = (lambda row: standing.upstream(row["bucket"])) if standing else (lambda row: None)   # noqa: E731
    rows = [{**row, "reproducer": _bundle_href(row["reproducer"], page_dir)}
            for row in tables.bucket_rows(records, bundles, standing)]
    sections.append(_table(rows, "Buckets", {"bucket": page_of, "status": upstream,
                                             "reproducer": lambda row: row["reproducer"]}))
    sections.append(tables.render(tables.coverage_rows(records), "html", "Coverage"))
    return _document(title, sections)


def _bundle_href(bundle, page_dir: str) -> str | None:
    """The link to a bundle folder from a page in `page_dir`; None when there is none on disk."""
    if bundle in (None, "-") or not os.path.isdir(bundle):
        return None
    return relative_href(bundle, page_dir) + "/"


def error_histogram_svg(records, route: str, width: int = 420, height: int = 140) -> str:
    """Inline SVG: how many cases of `route` had their max abs error in each decade."""
    decades = defaultdict(int)
    for r in records:
        if r.route == route and r.judged and r.max_abs_err is not None:
            e = r.max_abs_err
            decades[-12 if e <= 0 else max(-12, min(2, math.floor(math.log10(e))))] += 1
    if not decades:
        return ""
    keys = list(range(-12, 3))
    top = max(decades.values())
    bar = width / len(keys)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" role="img" '
             f'aria-label="max abs error distribution for {html.escape(route)}">']
    for i, k in enumerate(keys):
        h = (height - 10) * decades.get(k, 0) / top
        parts.append(f'<rect x="{i * bar + 1:.1f}" y="{height - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                     f'fill="#4a78b5"><title>1e{k}: {decades.get(k, 0)} cases</title></rect>')
        label = "0" if k == -12 else f"1e{k}"
        parts.append(f'<text x="{i * bar + bar / 2:.1f}" y="{height + 14}" font-size="9" '
                     f'text-anchor="middle">{label}</text>')
    parts.append("</svg>")
    return "".join(parts)


# -- heatmaps ------------------------------------------------------------------------------------
WHOLE_PROGRAM = "(whole program)"     # a failure no op is charged with (the case fails to compile)


def failing_op(record) -> str:
    """The op a failure is charged with: the first divergent op the reducer found, else the
    failing output's op."""
    return record.first_op or record.op or WHOLE_PROGRAM


def failure_cells(records) -> dict:
    """(op, route) -> Counter of buckets over the failing cases (a case without a bucket counts
    under None)."""
    cells = defaultdict(Counter)
    for r in records:
        if r.failed:
            cells[(failing_op(r), r.route)][r.bucket] += 1
    return cells


def ratio_cells(records) -> dict:
    """(op, route) -> (worst error / eager's error over the judged cases, the bucket of the
    case it came from): each op by its local figures (Record.local_op_figures), so an error
    upstream is not charged to it."""
    cells = {}
    for r in records:
        if not r.judged:
            continue
        for op, figures in r.local_op_figures().items():
            ratio = figures.err_ratio
            if ratio is not None and math.isfinite(ratio) and ratio > cells.get((op, r.route), (-1.0, None))[0]:
                cells[(op, r.route)] = (ratio, r.bucket)
    return cells


def heatmap_sections(records, pages: dict) -> list:
    """The two heatmaps of report.html, each under its heading (none without data)."""
    sections = []
    failures = failure_cells(records)
    if failures:
        counts = {cell: sum(c.values()) for cell, c in failures.items()}
        links = {cell: next((pages[b] for b, _n in c.most_common() if b in pages), None)    # its largest bucket
                 for cell, c in failures.items()}
        notes = {cell: ", ".join(f"{b} ({n})" for b, n in c.most_common() if b) for cell, c in failures.items()}
        sections += ["<h3>Failing cases, op x route</h3>",
                     heatmap_svg(counts, links, notes, label="failing cases", text=str, scale=_count_scale(counts),
                                 element_id="heatmap-failures")]
    ratios = ratio_cells(records)
    if ratios:
        values = {cell: ratio for cell, (ratio, _b) in ratios.items()}
        links = {cell: pages.get(bucket) for cell, (_r, bucket) in ratios.items()}
        sections += ["<h3>Worst error / eager's error, op x route</h3>",
                     "<p>Each op by its own output against the float64 op on the route's own inputs; "
                     "the judge allows about twice eager's error (three times "
                     "for float16 and bfloat16) on top of the dtype's atol and rtol.</p>",
                     heatmap_svg(values, links, {}, label="error / eager's error", text=ratio_text,
                                 scale=RATIO_SCALE, element_id="heatmap-ratio")]
    return sections


def tolerance_sections(records) -> list:
    """The tolerance tables (report.tolerance): per route x op x dtype, and per route."""
    from torchsim_diff.report import tolerance
    note = ("<p>Each op's own error (its output against the float64 op on the route's own values of its "
            "inputs) over the passing cases; failing cases are counted apart, in rows marked FAILING. "
            f"Rows of fewer than {tolerance.FEW_CASES} cases are marked. The carried columns compare the op "
            "with the whole program's float64 value.</p>")
    return [tables.render(tolerance.tolerance_rows(records), "html", "Error tolerance"), note,
            tables.render(tolerance.route_tolerance_rows(records), "html", "Tolerance each route needs")]


def ratio_text(value: float) -> str:
    """A ratio in at most about five characters: 0.95, 2.7, 3e2, 1.4e16."""
    return f"{value:.2g}".replace("e+0", "e").replace("e+", "e")


@dataclasses.dataclass(frozen=True)
class Scale:
    """A colour scale: value -> fraction of the way along SHADES, and the values its legend names."""
    fraction: Callable
    legend: list


def _count_scale(counts: dict) -> Scale:
    top = max(counts.values())
    ticks = sorted({1, max(1, round(math.sqrt(top))), top})
    return Scale(lambda n: math.log1p(n) / math.log1p(top), ticks)


RATIO_TOP = 1e4     # ratios from 1 (no worse than eager) to this are shaded on a log scale
RATIO_SCALE = Scale(lambda v: min(1.0, max(0.0, math.log10(v) / math.log10(RATIO_TOP))) if v > 0 else 0.0,
                    [1, 10, 100, 1000, RATIO_TOP])
SHADES = ((255, 247, 236), (253, 187, 132), (239, 101, 72), (127, 0, 0))   # light to dark


def shade(fraction: float) -> str:
    """The colour at `fraction` of the way along SHADES."""
    position = min(1.0, max(0.0, fraction)) * (len(SHADES) - 1)
    low = min(int(position), len(SHADES) - 2)
    t = position - low
    rgb = (round(a + (b - a) * t) for a, b in zip(SHADES[low], SHADES[low + 1]))
    return "#" + "".join(f"{c:02x}" for c in rgb)


CELL_W, CELL_H, LABEL_CHAR_W = 52, 18, 6     # LABEL_CHAR_W: about one character at 11px


def heatmap_svg(values: dict, links: dict, notes: dict, *, label: str, text, scale: Scale,
                element_id: str) -> str:
    """Inline SVG of (op, route) -> value: ops down, routes across, each cell shaded by
    `scale`, showing text(value), linking to links[cell] where there is one; the HEATMAP_OPS
    ops with the largest values, and a legend."""
    routes = sorted({route for _op, route in values})
    worst = defaultdict(float)
    for (op, _route), value in values.items():
        worst[op] = max(worst[op], value)
    ops = sorted(sorted(worst), key=lambda op: -worst[op])[:HEATMAP_OPS]
    left = LABEL_CHAR_W * max(len(op) for op in ops) + 10
    label_w = LABEL_CHAR_W * max(len(route) for route in routes)      # route labels slant up-right
    top = label_w * 0.65 + 14
    legend_w = CELL_W * 6 + LABEL_CHAR_W * len(label)
    width = left + max(CELL_W * (len(routes) - 0.5) + label_w * 0.77, legend_w) + 20
    height = top + CELL_H * len(ops) + 56
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{element_id}" width="{width:.0f}" height="{height:.0f}" '
             f'role="img" aria-label="{html.escape(label)} by op and route" font-size="11">']
    for j, route in enumerate(routes):
        x = left + CELL_W * (j + 0.5)
        parts.append(f'<text x="{x:.0f}" y="{top - 6:.0f}" transform="rotate(-40 {x:.0f} {top - 6:.0f})">'
                     f'{html.escape(route)}</text>')
    for i, op in enumerate(ops):
        y = top + CELL_H * i
        parts.append(f'<text x="{left - 6}" y="{y + 13:.0f}" text-anchor="end">{html.escape(op)}</text>')
        for j, route in enumerate(routes):
            if (op, route) in values:
                parts.append(_heat_cell(left + CELL_W * j, y, values[(op, route)], links.get((op, route)),
                                        notes.get((op, route)), f"{op} on {route}", text, scale))
    parts.append(_legend(left, top + CELL_H * len(ops) + 14, label, text, scale))
    if len(worst) > len(ops):
        parts.append(f'<text x="{left}" y="{height - 2:.0f}">the {len(ops)} of {len(worst)} ops with the '
                     f'largest values</text>')
    parts.append("</svg>")
    return "".join(parts)


def _heat_cell(x, y, value, href, note, where, text, scale) -> str:
    fill = shade(scale.fraction(value))
    ink = "#fff" if scale.fraction(value) > 0.6 else "#000"
    tip = f"{where}: {text(value)}" + (f"; buckets {note}" if note else "")
    cell = (f'<rect x="{x}" y="{y:.0f}" width="{CELL_W - 1}" height="{CELL_H - 1}" fill="{fill}">'
            f'<title>{html.escape(tip)}</title></rect>'
            f'<text x="{x + CELL_W / 2:.0f}" y="{y + 13:.0f}" text-anchor="middle" fill="{ink}">'
            f'{html.escape(text(value))}</text>')
    return f'<a href="{html.escape(href)}">{cell}</a>' if href else cell


def _legend(x, y, label, text, scale) -> str:
    parts = [f'<text x="{x}" y="{y + 12}">{html.escape(label)}:</text>']
    start = x + LABEL_CHAR_W * len(label) + 14
    for k, tick in enumerate(scale.legend):
        parts.append(f'<rect x="{start + k * CELL_W}" y="{y}" width="{CELL_W - 1}" height="{CELL_H - 1}" '
                     f'fill="{shade(scale.fraction(tick))}" stroke="#999"/>'
                     f'<text x="{start + k * CELL_W + CELL_W / 2:.0f}" y="{y + 30}" text-anchor="middle">'
                     f'{html.escape(text(tick))}</text>')
    return "".join(parts)


# -- a bucket's page -------------------------------------------------------------------------------
def bucket_page(record, *, bundle: str | None, page_dir: str, count: int = 1, status: str = "-") -> str:
    """The page of `record`'s bucket (record: its smallest failing case): title, where it
    failed, the reduced case as a graph, the first divergent op, error figures, message and
    links to the bundle (bundle: its folder, or None)."""
    heading = tables.issue_title(record, bundle)
    facts = {"bucket": record.bucket, "status": status, "kind": record.kind,
             "route": record.route, "failing output's op (case as found)": record.op, "stage": record.stage,
             "failing cases in this run": count, "smallest case": record.case_id}
    body = [f'<p><a href="../{REPORT_FILE}">back to the report</a></p>', f"<h1>{html.escape(heading)}</h1>",
            _facts(facts), *_case_section(record), *_divergence_section(record), *_figures_section(record),
            *_bundle_section(bundle, page_dir), *_artifact_section(record, page_dir)]
    if record.message:
        lines = record.message.splitlines()
        shown = "\n".join(lines[:MESSAGE_LINES]) + ("\n..." if len(lines) > MESSAGE_LINES else "")
        body += ["<h3>Message (the case as found)</h3>", f"<pre>{html.escape(shown)}</pre>"]
    return _document(heading, body)


def _facts(facts: dict) -> str:
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(_cell(v))}</td></tr>"
                   for k, v in facts.items() if v is not None)
    return f"<table>{rows}</table>"


def _case_section(record) -> list:
    case = record.case_or_reduced
    if not case:
        return []
    from torchsim_diff.case.graph import case_size
    nodes, inputs, elements = case_size(case)
    which = "Reduced case" if record.reduced_case else "Case (not reduced)"
    size = ", ".join(f"{n} {word}{'s' * (n != 1)}"
                     for n, word in ((nodes, "node"), (inputs, "input"), (elements, "element")))
    key = "outputs framed bold" + ("; nodes of the first divergent op in red" if record.first_op else "")
    return [f"<h3>{which}: {size}, {html.escape(str(case['dtype']))}</h3>",
            case_graph_svg(case, highlight=record.first_op), f"<p><small>{key}</small></p>"]


def _divergence_section(record) -> list:
    parts = []
    if record.first_op:
        parts.append(f"<p>First divergent op: <code>{html.escape(record.first_op)}</code></p>")
    if record.trigger:
        trigger = ", ".join(map(str, record.trigger))
        parts.append(f"<p>Trigger (the failure vanishes without): {html.escape(trigger)}</p>")
    kernel = record.divergent_kernel or {}
    if kernel.get("kernel_name") or kernel.get("summary"):
        parts.append(f"<p>First divergent kernel launch: <code>{html.escape(str(kernel.get('kernel_name') or '?'))}"
                     f"</code> (launch {html.escape(str(kernel.get('launch')))}): "
                     f"{html.escape(str(kernel.get('summary') or ''))}</p>")
    return (["<h3>Where it diverges</h3>"] + parts) if parts else []


def _figures_section(record) -> list:
    rows = _named_figures(record.figures())
    if all(v is None for v in rows.values()):
        return ["<h3>Error figures</h3><p>none: the case has no values to compare (it did not run to the end)</p>"]
    rtol_atol = default_tolerance(record.case_dtype)
    if rtol_atol:
        rows["tolerance of the dtype (rtol, atol)"] = f"{rtol_atol[0]:g}, {rtol_atol[1]:g}"
    parts = ["<h3>Error figures (the case as found: its worst output)</h3>", _facts(rows)]
    if record.op_local_errors:
        op_rows = [{"op": op, **_named_figures(f)} for op, f in sorted(record.local_op_figures().items())]
        parts.append(_table(op_rows, "Per op, its own (against the float64 op on the route's values of its inputs)"))
    if record.op_errors:
        op_rows = [{"op": op, **_named_figures(f)} for op, f in sorted(record.per_op_figures().items())]
        parts.append(_table(op_rows, "Per op, carried (against the whole program's float64 value)"))
    return parts


def _named_figures(figures) -> dict:
    return {FIGURE_NAMES[name]: getattr(figures, name) for name in FIGURE_NAMES}


def default_tolerance(dtype: str | None):
    """(rtol, atol) of the judge's tolerance table for a dtype's name, or None."""
    if not dtype:
        return None
    import torch
    from torchsim_diff.judge.comparison import TOLERANCES
    return TOLERANCES.get(getattr(torch, dtype, None))


def _bundle_section(bundle: str | None, page_dir: str) -> list:
    folder = _bundle_href(bundle, page_dir)
    if folder is None:
        return ["<h3>Bundle</h3><p>no bundle</p>"]
    links = [_link(name, relative_href(os.path.join(bundle, name), page_dir))
             for name in (*BUNDLE_FILES, "artifacts") if os.path.exists(os.path.join(bundle, name))]
    folder = _link("the whole folder", folder)
    return ["<h3>Bundle</h3>", f"<p>{' &middot; '.join(links + [folder])}</p>"]


def _artifact_section(record, page_dir: str) -> list:
    folders = [(name, path) for name, path in record.artifact_folders().items() if path and os.path.isdir(path)]
    if not folders:
        return []
    links = [_link(name.replace("_", " "), relative_href(path, page_dir) + "/") for name, path in folders]
    return ["<h3>The route's files</h3>", f"<p>{' &middot; '.join(links)}</p>"]


# -- the case as a graph ---------------------------------------------------------------------------
BOX_W, BOX_H, GAP_X, GAP_Y = 150, 38, 40, 14


def graph_levels(case: dict) -> dict:
    """name -> column: inputs at 0, each node one right of its deepest argument (the nodes
    are in topological order, so one pass suffices)."""
    levels = {spec["name"]: 0 for spec in case["inputs"]}
    for node in case["nodes"]:
        args = [a for a in node.get("args", []) if isinstance(a, str) and a in levels]
        levels[node["id"]] = 1 + max((levels[a] for a in args), default=0)
    return levels


def case_graph_svg(case: dict, highlight: str | None = None) -> str:
    """Inline SVG of a case dict (case.graph's JSON): inputs and nodes as boxes, in columns by
    depth, with an edge from each argument; outputs drawn bold, nodes of op `highlight` red."""
    levels = graph_levels(case)
    if not levels:        # a record of a route that died before it ran anything holds an empty case
        return "<p>(an empty graph: no inputs, no nodes)</p>"
    columns = defaultdict(list)
    for name, level in levels.items():
        columns[level].append(name)
    at = {name: (10 + level * (BOX_W + GAP_X), 10 + row * (BOX_H + GAP_Y))
          for level, names in columns.items() for row, name in enumerate(names)}
    width = 20 + (max(columns) + 1) * (BOX_W + GAP_X) - GAP_X
    height = 20 + max(len(names) for names in columns.values()) * (BOX_H + GAP_Y) - GAP_Y
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" id="case-graph" width="{width}" height="{height}" '
             f'role="img" aria-label="the case as a graph" font-size="11">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    for node in case["nodes"]:
        for arg in node.get("args", []):
            if isinstance(arg, str) and arg in at and arg != node["id"]:
                (x1, y1), (x2, y2) = at[arg], at[node["id"]]
                parts.append(f'<line class="edge" x1="{x1 + BOX_W}" y1="{y1 + BOX_H / 2:.0f}" x2="{x2}" '
                             f'y2="{y2 + BOX_H / 2:.0f}" stroke="#555" marker-end="url(#arrow)"/>')
    outputs = set(case.get("outputs", []))
    for spec in case["inputs"]:
        shape = "x".join(map(str, spec["shape"])) or "scalar"
        parts.append(_box(at[spec["name"]], spec["name"], f"{shape} {spec.get('dtype', '')}", "#e8f0fa",
                          spec["name"] in outputs))
    for node in case["nodes"]:
        fill = "#f8d0cc" if highlight and node["op"] == highlight else "#f4f4f4"
        parts.append(_box(at[node["id"]], f"{node['id']} = {node['op']}", _attrs_text(node), fill,
                          node["id"] in outputs))
    parts.append("</svg>")
    return "".join(parts)


def _attrs_text(node: dict) -> str:
    attrs = node.get("attrs") or {}
    text = ", ".join(f"{k}={json.dumps(v)}" for k, v in attrs.items())
    return text if len(text) <= 24 else text[:23] + "…"


def _box(position, top_line: str, bottom_line: str, fill: str, bold: bool) -> str:
    x, y = position
    stroke = 'stroke="#000" stroke-width="2.5"' if bold else 'stroke="#777"'
    return (f'<g class="box"><rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="4" fill="{fill}" {stroke}/>'
            f'<title>{html.escape(top_line)}\n{html.escape(bottom_line)}</title>'
            f'<text x="{x + 6}" y="{y + 15}">{html.escape(_clip(top_line))}</text>'
            f'<text x="{x + 6}" y="{y + 30}" fill="#555">{html.escape(_clip(bottom_line))}</text></g>')


def _clip(text: str, chars: int = 22) -> str:
    return text if len(text) <= chars else text[:chars - 1] + "…"
