"""The HTML report folder: report.html, a page per bucket, heatmaps, the case graph; every link
resolves on disk, record text is escaped, and headless Chromium renders it."""
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from html.parser import HTMLParser
from urllib.parse import unquote, urlparse

import pytest

from torchsim_diff.report import html_report, tables
from torchsim_diff.results.record import Record

ISSUE_TITLE = "torch.compile (Inductor CPU): relu(x) on a permuted input returns wrong values"


def _case(ops):
    """A case dict: one 2x3 input, then a chain of `ops` (each node reads the one before)."""
    nodes, previous = [], "x0"
    for k, op in enumerate(ops):
        nodes.append({"id": f"v{k}", "op": op, "args": [previous], "attrs": {}})
        previous = f"v{k}"
    inputs = [{"name": "x0", "shape": [2, 3], "dtype": "float32",
               "layout": {"classes": ["contiguous"], "strides": [3, 1], "offset": 0, "storage_size": 6}}]
    return {"schema": 1, "dtype": "float32", "inputs": inputs, "nodes": nodes, "outputs": [previous],
            "values": {"seed": 0}}


def _record(case_id, route, op, *, status="fail", bucket=None, ratio=1.0, message="output 0: values differ", **more):
    return Record(case_id=case_id, route=route, status=status, kind="wrong_values" if status == "fail" else None,
                  bucket=bucket, op=op, ops=[op], dtypes=["float32"], layouts=["contiguous"], n_nodes=1,
                  max_abs_err=1e-3, max_rel_err=1e-2, max_ulp=40.0, err_ratio=ratio, atol_needed=1e-3,
                  rtol_needed=1e-2, message=message, case=_case([op]), **more)


RECORDS = [
    _record("a", "inductor", "relu", bucket="b1", ratio=300.0, first_op="relu", reduced_case=_case(["relu"])),
    _record("b", "inductor", "relu", bucket="b1", ratio=20.0),
    _record("c", "triton", "add", bucket="b2", ratio=5.0),
    _record("d", "triton", "relu", status="pass", ratio=0.5),
]


def _bundle(folder):
    """A bundle folder as report.bundles writes one (ISSUE.md opens with where to file it)."""
    os.makedirs(os.path.join(folder, "artifacts"))
    for name in ("repro.py", "case.json"):
        with open(os.path.join(folder, name), "w") as handle:
            handle.write("x\n")
    with open(os.path.join(folder, "ISSUE.md"), "w") as handle:
        handle.write(f"<!-- File at somewhere -->\n# {ISSUE_TITLE}\n\nbody\n")
    return str(folder)


@pytest.fixture
def report(tmp_path):
    """A report folder: b1 NEW with a bundle, b2 NEW without one."""
    run = tmp_path / "run"
    bundle = _bundle(run / "bundles" / "b1")
    rows = tables.new_bucket_rows(RECORDS, {"b1", "b2"}, {"b1": bundle})
    return html_report.write_report(str(run), RECORDS, new_rows=rows, bundles={"b1": bundle})


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        self.hrefs += [value for name, value in attrs if name == "href" and tag == "a"]


def local_targets(page: str, text: str | None = None) -> list:
    """(href, the path it names) of every link of an HTML page (its own text, or `text`)."""
    parser = _Links()
    parser.feed(text if text is not None else open(page, encoding="utf-8").read())
    folder = os.path.dirname(page)
    return [(href, os.path.normpath(os.path.join(folder, unquote(urlparse(href).path)))) for href in parser.hrefs]


def _pages(report):
    folder = os.path.join(os.path.dirname(report), html_report.PAGES_DIR)
    return [report] + [os.path.join(folder, name) for name in sorted(os.listdir(folder))]


def test_report_links_each_bucket_to_its_page_and_every_link_resolves(report):
    pages = _pages(report)
    assert [os.path.basename(p) for p in pages] == ["report.html", "b1.html", "b2.html"]
    hrefs = [href for href, _target in local_targets(report)]
    assert "buckets/b1.html" in hrefs and "buckets/b2.html" in hrefs and "bundles/b1/" in hrefs
    for page in pages:
        for href, target in local_targets(page):
            assert os.path.exists(target), f"{page}: {href} names nothing"


def test_bucket_page_has_the_issue_title_graph_figures_and_bundle_links(report):
    page_path = _pages(report)[1]
    page = open(page_path, encoding="utf-8").read()
    assert f"<h1>{ISSUE_TITLE}</h1>" in page and "First divergent op: <code>relu</code>" in page
    assert 'id="case-graph"' in page and "max ulp</th><td>40" in page and "1.3e-06, 1e-05" in page
    linked = {os.path.relpath(target, os.path.dirname(report)) for _href, target in local_targets(page_path)}
    assert {"bundles/b1/repro.py", "bundles/b1/case.json", "bundles/b1/ISSUE.md", "bundles/b1/artifacts"} <= linked


def test_a_bucket_without_a_bundle_says_so_instead_of_linking(report):
    page_path = _pages(report)[2]
    assert "<p>no bundle</p>" in open(page_path, encoding="utf-8").read()
    assert [href for href, _t in local_targets(page_path)] == ["../report.html"]


def test_a_bundle_given_relative_to_the_working_directory_is_linked_from_the_page(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _bundle(tmp_path / "elsewhere" / "b1")
    html_report.write_report("out/run", RECORDS[:1], bundles={"b1": "elsewhere/b1"})
    page = str(tmp_path / "out" / "run" / "buckets" / "b1.html")
    targets = {target for _href, target in local_targets(page)}
    assert str(tmp_path / "elsewhere" / "b1" / "repro.py") in targets


def test_record_text_is_escaped_everywhere(tmp_path):
    hostile = "<script>alert(1)</script>"
    records = [_record("a", "inductor", "<img src=x>", bucket="../../<b>", message=hostile,
                       first_op="<img src=x>", trigger=[hostile])]
    report = html_report.write_report(str(tmp_path), records, new_rows=tables.new_bucket_rows(records, {"../../<b>"}))
    pages = _pages(report)
    assert len(pages) == 2 and os.path.dirname(pages[1]) == str(tmp_path / "buckets")   # no path from the bucket
    for page in pages:
        text = open(page, encoding="utf-8").read()
        assert "<script>" not in text and "<img" not in text and "<b>" not in text
        assert "&lt;img src=x&gt;" in text
        for href, target in local_targets(page):
            assert os.path.exists(target), href


def test_togsim_timings_of_the_run_join_the_report_after_the_error_tolerances(tmp_path):
    import json
    run = tmp_path / "run"
    plain = open(html_report.write_report(str(run), RECORDS), encoding="utf-8").read()
    assert "Timing on TOGSim" not in plain
    row = {"case_id": "a", "kernel": "triton_poi_fused_relu_0", "programs": 2, "instret": 1234, "outcome": "ok",
           "cycles": 5678, "verdicts": [{"check": "units_accounted", "passed": False, "known": "a-known-defect"}]}
    (run / "timing.jsonl").write_text(json.dumps(row) + "\n")
    page = open(html_report.write_report(str(run), RECORDS), encoding="utf-8").read()
    section = page[page.index("Error tolerance"):]
    assert "Timing on TOGSim" in section and "triton_poi_fused_relu_0" in section and "5678" in section
    assert "units_accounted (known)" in section


def test_heatmaps_count_failures_and_link_cells_to_bucket_pages():
    section = "".join(html_report.heatmap_sections(RECORDS, {"b1": "buckets/b1.html", "b2": "buckets/b2.html"}))
    failures = ET.fromstring(re.search(r'<svg[^>]*id="heatmap-failures".*?</svg>', section).group(0))
    ns = {"s": "http://www.w3.org/2000/svg"}
    tips = [t.text for t in failures.iterfind(".//s:rect/s:title", ns)]
    assert "relu on inductor: 2; buckets b1 (2)" in tips and "add on triton: 1; buckets b2 (1)" in tips
    links = [a.get("href") for a in failures.iterfind(".//s:a", ns)]
    assert sorted(links) == ["buckets/b1.html", "buckets/b2.html"]
    ratio = ET.fromstring(re.search(r'<svg[^>]*id="heatmap-ratio".*?</svg>', section).group(0))
    assert "relu on inductor: 3e2" in [t.text for t in ratio.iterfind(".//s:rect/s:title", ns)]


def test_shades_darken_with_the_value():
    darkness = [sum(int(html_report.shade(f)[k:k + 2], 16) for k in (1, 3, 5)) for f in (0.0, 0.3, 0.7, 1.0)]
    assert darkness == sorted(darkness, reverse=True) and len(set(darkness)) == 4


def test_case_graph_has_a_box_per_value_and_an_edge_per_argument():
    case = _case(["relu", "neg"])
    case["nodes"].append({"id": "v2", "op": "add", "args": ["v0", "v1"], "attrs": {}})
    case["outputs"] = ["v2"]
    svg = ET.fromstring(html_report.case_graph_svg(case))
    ns = {"s": "http://www.w3.org/2000/svg"}
    assert len(svg.findall("s:g[@class='box']", ns)) == 4 and len(svg.findall("s:line[@class='edge']", ns)) == 4
    assert html_report.graph_levels(case) == {"x0": 0, "v0": 1, "v1": 2, "v2": 3}


def test_a_route_that_died_before_running_anything_gets_its_page_with_an_empty_graph(tmp_path):
    """A crash at start-up is recorded with an empty case; its page once raised instead."""
    empty = {"schema": 1, "dtype": "float32", "inputs": [], "nodes": [], "outputs": [], "values": {"seed": 0}}
    record = Record(case_id="c0", route="double-dies-at-start", status="fail", kind="crash", bucket="b0",
                    n_nodes=0, ops=[], case=empty)
    html_report.write_report(str(tmp_path), [record])
    assert "an empty graph" in (tmp_path / "buckets" / html_report.page_name("b0")).read_text()


# -- in a real browser -------------------------------------------------------------------------------
CHROMIUM = shutil.which("chromium")
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
                 "--allow-file-access-from-files"]


def png_colours(path: str) -> set:
    """The distinct (r, g, b) colours of an 8-bit RGB or RGBA PNG (what Chromium's screenshots are)."""
    data = open(path, "rb").read()
    width, height, depth, colour_type = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    chunks, at = [], 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            chunks.append(data[at + 8:at + 8 + length])
        at += 12 + length
    raw, bpp = zlib.decompress(b"".join(chunks)), 3 if colour_type == 2 else 4
    stride, previous, colours = width * bpp, bytearray(width * bpp), set()
    for y in range(height):
        kind, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left, up = row[i - bpp] if i >= bpp else 0, previous[i]
            corner = previous[i - bpp] if i >= bpp else 0
            row[i] = (row[i] + (0, left, up, (left + up) // 2, _paeth(left, up, corner))[kind]) & 0xFF
        colours.update(tuple(row[i:i + 3]) for i in range(0, stride, bpp))
        previous = row
    return colours


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def _chromium(*args, cwd):
    return subprocess.run([CHROMIUM, *BROWSER_FLAGS, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian package chromium, apt-packages.txt)")
def test_headless_chromium_loads_the_report_and_renders_the_heatmaps(report, tmp_path):
    shot = tmp_path / "report.png"
    dom = _chromium("--dump-dom", f"--screenshot={shot}", "--window-size=800,600", "file://" + report, cwd=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="heatmap-failures"' in dom.stdout and 'id="heatmap-ratio"' in dom.stdout
    hrefs = local_targets(report, dom.stdout)
    assert any(href == "buckets/b1.html" for href, _t in hrefs)
    assert all(os.path.exists(target) for _href, target in hrefs), hrefs
    hues = {c for c in png_colours(str(shot)) if len(set(c)) > 1}     # text and borders are grey
    assert len(hues) > 20, f"{len(hues)} colours other than greys: the pictures did not render"


def test_a_bucket_page_shows_each_op_s_own_figures_beside_the_carried_ones():
    record = RECORDS[0].with_fields(ops=["exp", "relu"], op_local_errors={"relu": {"max_abs_err": 0.25},
                                                                          "exp": {"max_abs_err": 2e-7}},
                                    op_errors={"relu": {"max_abs_err": 0.5}, "exp": {"max_abs_err": 2e-7}})
    page = html_report.bucket_page(record, bundle=None, page_dir=".")
    own, carried = page.index("Per op, its own"), page.index("Per op, carried")
    assert own < page.index("<td>0.25</td>") < carried < page.index("<td>0.5</td>")
