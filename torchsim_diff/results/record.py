"""One results.jsonl record: the `Record` dataclass, the one place that knows its fields by name.

A record is what one (case, route) pair came to: `run.checker.Verdict.record()` makes it, the case
runner (`run.runner`) adds the per-op figures and the triage fields (known bug, reduction), Ray's
driver the node it ran on, and results.jsonl (`results.jsonl`) holds one per line. Every other
module reads and writes records through this class's attributes, properties and methods; only
here are they JSON objects with string keys (`from_dict`, `to_dict`).

    >>> record = Record.from_dict(json.loads(line))     # BadRecord(reason) for a line of the wrong shape
    >>> record.failed, record.bucket, record.case_or_reduced
    >>> line = json.dumps(record.to_dict())

Schema versions (the `schema` field of each line):

    1   lines without a `schema` field (everything written before it existed); they load as they
        are, and a field such a line lacks stays left out when the record is written again
        (`absent`), so `op_errors` or `atol_needed` missing keeps its old meaning for the tables
    2   every field written, with `schema: 2` first

A line of a newer schema is refused with one reason (this torchsim-diff does not know what its
fields mean); keys this schema does not know are kept in `extra` and written back, so reading and
writing a record loses nothing.

Standard library only (with results.kinds), like the rest of results/.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from torchsim_diff.results.kinds import Kind, Status

SCHEMA = 2              # the version this module writes (see the module docstring)
UNVERSIONED = 1         # the version of a line without a `schema` field

# Fields every record has had since the first version and that the tables rely on.
REQUIRED = ("case_id", "route", "status", "kind", "bucket", "ops", "case")
# A bucket history's kept record (buckets.bucket_history) needs only these to give a bundle;
# histories of early versions kept records without the others.
HISTORY_REQUIRED = ("route", "case")
# The live progress lines (campaign.progress) count a line by its route alone.
PROGRESS_REQUIRED = ("route",)
# Fields naming a folder of the route's files, which bundles copy (report.bundles).
ARTIFACT_FIELDS = ("artifacts", "reduced_artifacts")
# The stage of a skipped record whose route was abandoned during the run (worker.client's crash cap).
ABANDONED = "abandoned"
# reduce_error of a failure a campaign's budget left unreduced (triage.refine): its bucket is its
# raw one, which says nothing of the cause, so it is neither NEW nor known
DEFERRED = "not reduced while drawing: a campaign under a budget reduces its failures after the drawing"
NOT_REACHED = "not reduced: the run's budget for reductions ran out first"
# The error figures of a case (and of each op in `op_errors`).
FIGURE_FIELDS = ("max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed")


class BadRecord(ValueError):
    """A JSON value that is no record this module can read; `reason` is the read log's reason
    (results.jsonl.ReadLog counts skipped lines by it)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Record:
    """One results.jsonl record (docs/design.md, "results.jsonl"). Every field has a default; a
    line must have REQUIRED (from_dict). Text fields hold the words of results.kinds (`status` a
    Status value, `kind` a Kind value), as the lines do."""

    schema: int = SCHEMA
    # -- identity (Verdict.record) -----------------------------------------------------------
    case_id: str = ""
    seed: int | None = None
    graph_hash: str | None = None
    route: str = ""
    # -- outcome -----------------------------------------------------------------------------
    status: str = ""                          # results.kinds.Status value
    kind: str | None = None                   # results.kinds.Kind value, null for a pass
    stage: str | None = None
    bucket: str | None = None
    op: str | None = None                     # the failing output's op
    # -- what the case holds -----------------------------------------------------------------
    ops: list = dataclasses.field(default_factory=list)       # op names (sorted, distinct)
    dtypes: list = dataclasses.field(default_factory=list)
    layouts: list = dataclasses.field(default_factory=list)   # layout classes of its inputs
    n_nodes: int | None = None
    # -- error figures (the case's worst output) ------------------------------------------------
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    max_ulp: float | None = None
    unstable: int | None = None
    carried_ulp: float | None = None
    carried_by_op: dict = dataclasses.field(default_factory=dict)   # op -> ulps it carries
    err_ratio: float | None = None
    atol_needed: float | None = None
    rtol_needed: float | None = None
    # -- times (seconds) -----------------------------------------------------------------------
    t_compile: float | None = None
    t_run: float | None = None
    t_case: float | None = None
    t_harness: float | None = None
    t_start: float | None = None
    t_diagnose: float | None = None
    # -- the route's -----------------------------------------------------------------------------
    cost: Any = None                          # a route's own figure (instructions retired, ...)
    divergent_kernel: dict | None = None
    dynamic: bool | None = None
    second_size: dict | None = None
    batch: int | None = None                  # cases compiled as one program with it (run.batch); null: alone
    versions: dict | None = None
    artifacts: str | None = None              # the case's artifact folder
    message: str | None = ""
    case: dict | None = None                  # the case JSON (case.graph.Case.to_dict)
    # -- per-op figures (the case runner; run.op_figures) -----------------------------------
    op_errors: dict | None = None             # op -> {FIGURE_FIELDS...} carried; null: not measured
    op_local_errors: dict | None = None       # op -> {FIGURE_FIELDS...} of the op alone; null: not measured
    # -- triage (the case runner; triage.reduce) ------------------------------------------------
    known: bool = False                       # a failure in a known bug's bucket
    signature: str | None = None              # the refined signature, from the minimal case
    reduced_case: dict | None = None
    first_op: str | None = None
    trigger: list | None = None               # features without which the failure vanishes
    reduce_s: float | None = None
    reduce_runs: int | None = None
    reduced_artifacts: str | None = None
    minimal_bucket: str | None = None         # the minimal case's bucket as checked
    other_failures: list | None = None        # keys of other failures the reduction met, not switched to
    raw_bucket: str | None = None             # the bucket before reduction
    reduce_error: str | None = None           # why a failure could not be reduced
    # -- where it ran (campaign.ray_cluster) ------------------------------------------------------
    node: str | None = None
    # -- known-bug entries given to bundles (report.bundles) ---------------------------------------
    note: str | None = None
    upstream: str | None = None
    project: str | None = None
    found_on: str | None = None               # the route a bundle's script route was met on
    # -- bookkeeping, never written as fields ------------------------------------------------------
    extra: dict = dataclasses.field(default_factory=dict)      # keys this schema does not know
    absent: frozenset = frozenset()           # fields an older line did not have: left out again
    artifacts_tar: bytes | None = dataclasses.field(default=None, repr=False)   # in transit on Ray only

    # -- JSON ------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data, *, required=REQUIRED) -> "Record":
        """The record of a parsed JSON line; BadRecord(reason) when it is none (problem())."""
        why = problem(data, required)
        if why:
            raise BadRecord(why)
        known = {k: v for k, v in data.items() if k in LINE_FIELDS}
        extra = {k: v for k, v in data.items() if k not in LINE_FIELDS}
        absent = frozenset(k for k in LINE_FIELDS if k not in data)
        if "schema" in absent:
            known["schema"] = UNVERSIONED
        return cls(**known, extra=extra, absent=absent)

    def to_dict(self) -> dict:
        """The JSON object of the line: every field (schema first) but those an older line did
        not have, then the keys this schema does not know."""
        out = {name: getattr(self, name) for name in LINE_FIELDS if name not in self.absent}
        out.update((k, v) for k, v in self.extra.items() if k not in out)
        return out

    # -- changes -----------------------------------------------------------------------------------
    def with_fields(self, **changes) -> "Record":
        """A copy with `changes` (field name -> value); a name this schema does not know goes to
        `extra` (a reduction cached by another version, say), as it did when records were dicts."""
        fields = {k: v for k, v in changes.items() if k in _FIELD_NAMES}
        unknown = {k: v for k, v in changes.items() if k not in _FIELD_NAMES}
        extra = {**self.extra, **unknown} if unknown else self.extra
        return dataclasses.replace(self, **fields, extra=extra, absent=self.absent - set(fields))

    def only(self, fields, **changes) -> "Record":
        """A copy holding only `fields` (names) of this record, then `changes`, every other
        field at its default and `absent` as it is: a smaller record for a reader that needs
        no more (report.tables.table_view)."""
        kept = {name: getattr(self, name) for name in fields}
        return Record(**{**kept, **changes}, absent=self.absent)

    def known_by_minimal_case(self, known) -> "Record":
        """A reduced failure marked known when its own minimal case's cause signature is a known
        bug's: its refined bucket is one of the `known` cause buckets (buckets.corpus.known_buckets).
        A failure not reduced (no `signature`) is never known: its raw bucket says nothing of the cause."""
        if self.failed and self.signature and self.bucket in known:
            return self.with_fields(known=True)
        return self

    def artifact_folders(self) -> dict:
        """field -> value of the artifact-folder fields the record has (ARTIFACT_FIELDS)."""
        return {name: getattr(self, name) for name in ARTIFACT_FIELDS if name not in self.absent}

    def refined_by(self, line: dict) -> "Record":
        """This record with the reduction fields of a refined-*.jsonl line (refinement_line)."""
        return self.with_fields(**{k: v for k, v in line.items() if k not in _REFINEMENT_KEY})

    # -- what readers ask ----------------------------------------------------------------------------
    @property
    def failed(self) -> bool:
        return self.status == Status.FAIL.value

    @property
    def is_new_failure(self) -> bool:
        """A failure that goes to the bucket history (known bugs do not, nor unreduced ones)."""
        return self.failed and not self.known and not self.unreduced

    @property
    def unreduced(self) -> bool:
        """A failure the campaign's budget left unreduced (DEFERRED, NOT_REACHED)."""
        return self.failed and self.reduce_error in (DEFERRED, NOT_REACHED)

    @property
    def is_known_failure(self) -> bool:
        return self.failed and self.known

    @property
    def killed_worker(self) -> bool:
        """Skipped because its route worker was killed from outside (not tested, no finding)."""
        return self.status == Status.SKIPPED.value and self.kind == Kind.TOOL_ERROR.value

    @property
    def unavailable_route(self) -> bool:
        """Skipped because its route cannot run here (the message says why)."""
        return self.status == Status.SKIPPED.value and not self.kind and self.stage != ABANDONED

    @property
    def abandoned_route(self) -> bool:
        """Skipped because its route was abandoned during the run (too many crashes in a row)."""
        return self.status == Status.SKIPPED.value and self.stage == ABANDONED

    @property
    def judged(self) -> bool:
        """Passed or failed: the route ran the case to a verdict (not unsupported, not skipped)."""
        return self.status in (Status.PASS.value, Status.FAIL.value)

    @property
    def case_or_reduced(self):
        """The case a bundle is made from: the reduced case when there is one, else the case."""
        return self.reduced_case or self.case

    @property
    def case_dtype(self) -> str | None:
        """The case's dtype (None without a case)."""
        return self.case["dtype"] if self.case else None

    @property
    def case_ops(self) -> list:
        """The op of every node of the case (repeated as often as it occurs); the record's op
        names when it has no case."""
        return [n["op"] for n in self.case["nodes"]] if self.case else self.ops

    @property
    def case_nodes(self) -> list:
        """The case's nodes ({"id", "op", "args", "attrs"}); [] without a case."""
        return list(self.case["nodes"]) if self.case else []

    @property
    def value_tails(self) -> set | None:
        """The value tails the case was drawn with (generate.strategies); None without a case."""
        if not self.case:
            return None
        return set(self.case.get("values", {}).get("tails", []))

    @property
    def second_size_shapes(self):
        """The shapes of the second-size run, when one ran (run.second_size)."""
        return (self.second_size or {}).get("shapes")

    @property
    def first_message_line(self) -> str:
        """The message's first line ('' without one)."""
        return self.message.splitlines()[0] if self.message else ""

    def figures(self) -> "Figures":
        """The case's own error figures."""
        return Figures.from_record(self)

    def per_op_figures(self) -> dict:
        """op -> that op's own Figures (run.op_figures). Records written before per-op figures
        existed charge the case's figures to each op; a record whose per-op run did not complete
        counts only for a single-op case."""
        if "op_errors" in self.absent:
            return {op: self.figures() for op in self.ops}
        if self.op_errors is None:
            ops = set(self.ops)
            return {op: self.figures() for op in ops} if len(ops) == 1 else {}
        return {op: Figures.from_dict(f) for op, f in self.op_errors.items()}

    def local_op_figures(self) -> dict:
        """op -> that op's local Figures (judge.local_error: against the float64 op on the
        route's own values of its inputs). A single-node case's are its case figures (its inputs
        are the case's); otherwise {} where not measured, as in records written before local
        figures existed."""
        if self.op_local_errors is not None:
            return {op: Figures.from_dict(f) for op, f in self.op_local_errors.items()}
        return {self.ops[0]: self.figures()} if self.n_nodes == 1 and len(self.ops) == 1 else {}


@dataclasses.dataclass(frozen=True)
class Figures:
    """One op's (or one case's) error figures. `atol_needed` and `rtol_needed` of figures written
    before those existed are the absolute and relative errors (what they bounded then)."""

    max_abs_err: float | None = None
    max_rel_err: float | None = None
    max_ulp: float | None = None
    err_ratio: float | None = None
    atol_needed: float | None = None
    rtol_needed: float | None = None
    eager_atol_needed: float | None = None     # local figures only: the atol eager's own result needs

    @classmethod
    def from_dict(cls, data: dict) -> "Figures":
        """Figures of an `op_errors` or `op_local_errors` entry."""
        return cls(**_fallbacks(data.get, lambda name: name in data), eager_atol_needed=data.get("eager_atol_needed"))

    @classmethod
    def from_record(cls, record: Record) -> "Figures":
        return cls(**_fallbacks(lambda name: getattr(record, name), lambda name: name not in record.absent))


def _fallbacks(get, has) -> dict:
    values = {name: get(name) for name in FIGURE_FIELDS}
    for name, fallback in (("atol_needed", "max_abs_err"), ("rtol_needed", "max_rel_err")):
        if not has(name):
            values[name] = values[fallback]
    return values


_BOOKKEEPING = ("extra", "absent", "artifacts_tar")
_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Record)) - {"extra", "absent"}
# The fields a line holds, in the order they are written.
LINE_FIELDS = tuple(f.name for f in dataclasses.fields(Record) if f.name not in _BOOKKEEPING)


# -- field types --------------------------------------------------------------------------------
def _text(v) -> bool:
    return isinstance(v, str)


def _maybe(test):
    return lambda v: v is None or test(v)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _texts(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _figures(v) -> bool:
    """An op's own figures (op_errors values): an object whose error figures are numbers."""
    return isinstance(v, dict) and all(_maybe(_number)(v.get(k)) for k in (*NUMBER_FIELDS, "eager_atol_needed")
                                       if k in v)


def _case(v) -> bool:
    """What readers take from a recorded case without validating it: its dtype, its nodes'
    ops, its inputs' shapes (graph.case_size) and its value tails."""
    if not (isinstance(v, dict) and isinstance(v.get("dtype"), str) and isinstance(v.get("nodes"), list)
            and isinstance(v.get("inputs"), list) and isinstance(v.get("values", {}), dict)):
        return False
    return (all(isinstance(n, dict) and isinstance(n.get("op"), str) for n in v["nodes"])
            and all(isinstance(i, dict) and isinstance(i.get("shape"), list)
                    and all(_number(d) and isinstance(d, int) for d in i["shape"]) for i in v["inputs"])
            and _maybe(_texts)(v.get("values", {}).get("tails")))


NUMBER_FIELDS = ("n_nodes", "max_abs_err", "max_rel_err", "max_ulp", "err_ratio", "atol_needed", "rtol_needed",
                 "t_case", "t_harness", "t_start", "t_diagnose")
# field -> (test, what it must be): every field a reader of records takes, checked on read, so
# that a line of the wrong shape is skipped (and counted) instead of crashing a table.
FIELD_TYPES = {
    "case_id": (_text, "text"), "route": (_text, "text"), "status": (_text, "text"),
    "kind": (_maybe(_text), "text or null"), "bucket": (_maybe(_text), "text or null"),
    "op": (_maybe(_text), "text or null"), "first_op": (_maybe(_text), "text or null"),
    "stage": (_maybe(_text), "text or null"), "message": (_maybe(_text), "text or null"),
    "note": (_maybe(_text), "text or null"), "upstream": (_maybe(_text), "text or null"),
    "project": (_maybe(_text), "text or null"),
    "ops": (_texts, "a list of op names"), "layouts": (_texts, "a list of layout classes"),
    "dtypes": (_texts, "a list of dtype names"), "trigger": (_maybe(_texts), "a list of names or null"),
    "case": (_maybe(_case), "a case object or null"), "reduced_case": (_maybe(_case), "a case object or null"),
    "op_errors": (_maybe(lambda v: isinstance(v, dict) and all(_figures(f) for f in v.values())),
                  "an object of per-op figures or null"),
    "op_local_errors": (_maybe(lambda v: isinstance(v, dict) and all(_figures(f) for f in v.values())),
                        "an object of per-op figures or null"),
    "second_size": (_maybe(lambda v: isinstance(v, dict)), "an object or null"),
    "dynamic": (_maybe(lambda v: isinstance(v, bool)), "true, false or null"),
    "batch": (_maybe(lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 1), "a count over 1 or null"),
    "known": (lambda v: isinstance(v, bool), "true or false"),
    "artifacts": (_maybe(_text), "a folder name or null"),
    "reduced_artifacts": (_maybe(_text), "a folder name or null"),
    **{name: (_maybe(_number), "a number or null") for name in NUMBER_FIELDS},
}


def problem(data, required=REQUIRED) -> str | None:
    """Why `data` (parsed JSON) is no record readers can use, or None. The reason names the
    first field of the wrong type, so the skip log counts lines by field; a line of a newer
    schema than SCHEMA has one reason of its own."""
    if not isinstance(data, dict):
        return "not a record (JSON without the record fields)"
    version = data.get("schema", UNVERSIONED)
    if _number(version) and isinstance(version, int) and version > SCHEMA:
        return f"a record of a newer schema than this torchsim-diff reads (schema {SCHEMA})"
    if any(key not in data for key in required):
        return "not a record (JSON without the record fields)"
    if not (isinstance(version, int) and not isinstance(version, bool) and version >= UNVERSIONED):
        return "a record whose schema is not a version number"
    for name, (test, what) in FIELD_TYPES.items():
        if name in data and not test(data[name]):
            return f"a record whose {name} is not {what}"
    return None


# -- side files that carry record fields --------------------------------------------------------
_REFINEMENT_KEY = ("case_id", "route")


def refinement_line(case_id: str, route: str, bucket: str | None, fields: dict) -> dict:
    """A line of a pytest process's refined-*.jsonl (triage.session_refinements.refine_verdicts): which
    record (case id, route), its bucket once reduced, and the record fields the reduction sets."""
    return {"case_id": case_id, "route": route, "bucket": bucket, **fields}


def refinement_key(line: dict) -> tuple:
    """(case id, route) of the record a refined-*.jsonl line refines."""
    return line["case_id"], line["route"]


def record_key(record: Record) -> tuple:
    """(case id, route): what names a record within a run."""
    return record.case_id, record.route


def reduction_entry(signature: str, fields: dict) -> dict:
    """An entry of the reducer's cache (reductions.json, triage.reduce): the refined signature
    and the record fields a reduction sets."""
    return {"signature": signature, "fields": fields}


def reduction_of(entry: dict) -> tuple:
    """(signature, record fields) of an entry of the reducer's cache."""
    return entry["signature"], entry["fields"]


@dataclasses.dataclass(frozen=True)
class EntryFields:
    """What a corpus entry (buckets.corpus: corpora/seed, corpora/known) says beside its case:
    a known bug's entry is a trimmed record, which report.bundles turns into one (`record`)."""

    route: str | None = None
    kind: str | None = None
    bucket: str | None = None
    signature: str | None = None
    note: str | None = ""
    upstream: str | None = ""
    first_op: str | None = None
    project: str | None = None
    message: str | None = ""
    case: Any = None                 # the case JSON, unchecked (corpus.read_entry validates it)

    @classmethod
    def from_dict(cls, raw: dict) -> "EntryFields":
        """The fields of an entry object (their types are corpus.read_entry's to check)."""
        return cls(route=raw.get("route"), kind=raw.get("kind"), bucket=raw.get("bucket"),
                   signature=raw.get("signature"), note=raw.get("note", ""), upstream=raw.get("upstream", ""),
                   first_op=raw.get("first_op"), project=raw.get("project"), message=raw.get("message", ""),
                   case=raw.get("case"))

    def record(self, case) -> Record:
        """The known bug as a record write_bundle takes (case: a case.graph.Case): a failure of
        its route and kind in its bucket, its first op as the failing op, no artifacts."""
        return Record(case_id=case.case_id, route=self.route, status=Status.FAIL.value, kind=self.kind,
                      bucket=self.bucket, op=self.first_op, ops=case.ops, dtypes=case.dtypes,
                      layouts=case.layouts, n_nodes=len(case.nodes), message=self.message, case=case.to_dict(),
                      first_op=self.first_op, note=self.note, upstream=self.upstream, project=self.project,
                      signature=self.signature)
