"""The known-bug ledger by root cause: one folder per defect in an upstream project.

    corpora/known/<cause>/cause.json   {"title": ..., "project": ..., "component": ...,
                                        "status": "new" | "reported" | "fixed",
                                        "upstream": URL or "", "fixed_in": version or "",
                                        "summary": what is known of the defect, for maintainers,
                                        "shown": the case its report shows (optional),
                                        "wrong_side": "eager" for a defect of eager PyTorch
                                          that a compiler gets right (optional),
                                        "also_checked": what the repro gave on another device
                                          or version, with its date (optional),
                                        "mlir_opt": a .mlir beside it and the mlir-opt
                                          pipeline that shows the bug (optional;
                                          report.mlir_opt_bundle),
                                        "search": the last upstream search (optional):
                                          {"date": ..., "queries": [...], "nearest":
                                           [{"url", "title", "state", "relation"}, ...]}}
    corpora/known/<cause>/<name>.json  its cases: known-bug entries (buckets.corpus), one per
                                       route or op where the defect shows

`title` names the mis-compiled construct in the upstream's terms; `project` is the upstream
the issue is filed with (buckets.projects.PROJECTS). A cause is exported as the bundle of the
case it shows (`representative`: `shown`, else its plainest case), with its title and summary.
"""
from __future__ import annotations

import dataclasses
import os
import re

from torchsim_diff import files
from torchsim_diff.buckets.projects import PROJECTS, route_facts
from torchsim_diff.buckets.known_defects import is_defect_folder
from torchsim_diff.buckets.corpus import CAUSE_FILE, KNOWN, CorruptEntry, iter_entries

STATUSES = ("new", "reported", "fixed")
FIELDS = ("title", "project", "component", "status", "upstream", "fixed_in", "summary", "shown", "wrong_side",
          "also_checked")
WRONG_SIDES = ("compiled", "eager")


@dataclasses.dataclass
class Cause:
    folder: str
    title: str
    project: str
    component: str = ""
    status: str = "new"
    upstream: str = ""
    fixed_in: str = ""
    summary: str = ""
    shown: str = ""
    wrong_side: str = "compiled"
    also_checked: str = ""          # what a run elsewhere showed (another device or version), with when
    search: "Search | None" = None
    mlir_opt: object = None         # report.mlir_opt_bundle.MlirRepro: the bug in MLIR's own terms
    entries: list = dataclasses.field(default_factory=list)

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.folder))

    @property
    def eager_bug(self) -> bool:
        """A defect of eager PyTorch itself, met where a compiler was right."""
        return self.wrong_side == "eager"

    @property
    def routes(self) -> list:
        return sorted({e.route for e in self.entries})

    def representative(self):
        """The case its report shows: the one `shown` names, else the one a maintainer
        reproduces most easily (the plainest route, then the smallest case)."""
        if not self.entries:
            raise CorruptEntry(f"{self.folder}: a cause with no cases")
        named = [e for e in self.entries if e.name == self.shown]
        return named[0] if named else min(self.entries, key=lambda e: (_rank(e.route), e.case.size(), e.name))


def _rank(route: str) -> int:
    """The route whose repro.py is plainest first (ReportFacts.plainest): torch alone, then
    torch-mlir, then the adapter."""
    return route_facts(route).plainest


# -- the `mlir_opt` field: an MLIR bug's reproducer kept as data (report.mlir_opt_bundle writes it)
SAFE_PIPELINE = re.compile(r"^[\w.(){}=,\- ]+$")     # pass names and options: no shell or path syntax
SAFE_FILE = re.compile(r"^[\w.-]+\.mlir$")


class BadMlirRepro(ValueError):
    """A cause's `mlir_opt` field that does not say a usable reproducer (message names the field)."""


@dataclasses.dataclass(frozen=True)
class MlirRepro:
    file: str
    pipeline: str
    run: bool
    shows: str
    expected: str


def read_mlir_repro(raw, path: str) -> MlirRepro | None:
    """A cause's `mlir_opt` field (None where it has none); BadMlirRepro naming what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("file", "pipeline", "shows")):
        raise BadMlirRepro(f"{path}: mlir_opt is {{\"file\", \"pipeline\", \"shows\": text, \"run\": bool}}")
    if not SAFE_FILE.match(raw["file"]) or not SAFE_PIPELINE.match(raw["pipeline"]) or not raw["shows"]:
        raise BadMlirRepro(f"{path}: mlir_opt names a .mlir file beside cause.json, a pass pipeline and the text "
                           "its output shows")
    if not isinstance(raw.get("run", False), bool) or not isinstance(raw.get("expected", ""), str):
        raise BadMlirRepro(f"{path}: mlir_opt.run is true or false, mlir_opt.expected text")
    return MlirRepro(raw["file"], raw["pipeline"], raw.get("run", False), raw["shows"], raw.get("expected", ""))


def is_cause_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, CAUSE_FILE))


def read_cause(folder: str) -> Cause:
    """The cause in `folder` with its known entries; CorruptEntry naming the file and field."""
    path = os.path.join(folder, CAUSE_FILE)
    try:
        raw = files.read_json(path, files.CASE_FILE)
    except files.UnreadableFile as exc:
        raise CorruptEntry(f"{path}: {exc.reason}") from None
    if not isinstance(raw, dict):
        raise CorruptEntry(f"{path}: a cause is a JSON object")
    for key in FIELDS:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise CorruptEntry(f"{path}: {key} must be text (a JSON string)")
    cause = Cause(folder, **{key: raw.get(key) or "" for key in FIELDS})
    cause.search = read_search(raw.get("search"), path)
    try:
        cause.mlir_opt = read_mlir_repro(raw.get("mlir_opt"), path)
    except BadMlirRepro as exc:
        raise CorruptEntry(str(exc)) from None
    cause.status = cause.status or "new"
    cause.wrong_side = cause.wrong_side or "compiled"
    if cause.wrong_side not in WRONG_SIDES:
        raise CorruptEntry(f"{path}: wrong_side={cause.wrong_side!r} is not one of {', '.join(WRONG_SIDES)}")
    if not cause.title:
        raise CorruptEntry(f"{path}: a cause needs a title")
    if cause.project not in PROJECTS:
        raise CorruptEntry(f"{path}: project={cause.project!r} is not one of {', '.join(PROJECTS)}")
    if cause.status not in STATUSES:
        raise CorruptEntry(f"{path}: status={cause.status!r} is not one of {', '.join(STATUSES)}")
    if cause.upstream and not cause.upstream.startswith("https://"):
        raise CorruptEntry(f"{path}: upstream must be an https:// URL or empty")
    if cause.status in ("reported", "fixed") and not cause.upstream:
        raise CorruptEntry(f"{path}: a {cause.status} cause names its upstream URL")
    for entry, error in iter_entries([folder]):
        if error is not None:
            raise error
        if entry.kind != KNOWN:
            raise CorruptEntry(f"{entry.path}: a cause's case is a known-bug entry (with route and bucket)")
        cause.entries.append(entry)
    if cause.shown and cause.shown not in {e.name for e in cause.entries}:
        raise CorruptEntry(f"{path}: shown={cause.shown!r} is none of its cases")
    return cause


@dataclasses.dataclass(frozen=True)
class Thread:
    url: str
    title: str
    state: str
    relation: str


@dataclasses.dataclass(frozen=True)
class Search:
    """The last search of the upstream trackers for a cause: when, with which queries, and
    the nearest threads found (each with how it relates)."""
    date: str
    queries: tuple
    nearest: tuple


def read_search(raw, path: str) -> Search | None:
    """A cause's `search` field as a Search; CorruptEntry naming what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("date"), str) \
            or not isinstance(raw.get("queries"), list) or not isinstance(raw.get("nearest"), list):
        raise CorruptEntry(f"{path}: search is {{\"date\": text, \"queries\": [text], \"nearest\": [thread]}}")
    if not all(isinstance(q, str) for q in raw["queries"]):
        raise CorruptEntry(f"{path}: search.queries holds text only")
    threads = []
    for item in raw["nearest"]:
        fields = {key: item.get(key) for key in ("url", "title", "state", "relation")} if isinstance(item, dict) else {}
        if not fields or not all(isinstance(v, str) for v in fields.values()) or not fields["url"].startswith("https://"):
            raise CorruptEntry(f"{path}: each of search.nearest has url (https://), title, state and relation as text")
        threads.append(Thread(**fields))
    return Search(raw["date"], tuple(raw["queries"]), tuple(threads))


def read_causes(known: str) -> tuple:
    """(causes, problems) under the known-bug folder: each cause folder read whole, a corrupt
    one reported as a line of `problems` and skipped; an entry outside any cause folder is a
    problem too (every known bug belongs to a cause)."""
    causes, problems = [], []
    if not os.path.isdir(known):
        return causes, [f"{known}: no such folder"]
    for name in sorted(os.listdir(known)):
        path = os.path.join(known, name)
        if os.path.isdir(path) and is_cause_folder(path):
            try:
                causes.append(read_cause(path))
            except CorruptEntry as exc:
                problems.append(str(exc))
        elif is_defect_folder(path):    # a known TOGSim defect (buckets.known_defects)
            continue
        elif name.endswith(".json") or os.path.isdir(path):
            problems.append(f"{path}: not in a cause folder (corpora/known/<cause>/{CAUSE_FILE})")
    return causes, problems


def searched(search: Search) -> str:
    """The paragraph a new cause's draft gives its duplicate search."""
    nearest = "; ".join(f"{t.url} ({t.relation})" for t in search.nearest) or "none"
    return f"Searched for an existing report on {search.date} ({len(search.queries)} queries); nearest: {nearest}."
