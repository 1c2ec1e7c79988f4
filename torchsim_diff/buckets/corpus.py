"""Corpora: seed cases that must pass, and known bugs that must keep failing.

    corpora/seed/<name>.json    {"case": {...}, "note": "..."}
    corpora/known/<name>.json   {"route": R, "kind": K, "bucket": B, "signature": S,
                                 "cause": C, "case": {...}, "note": "...", "upstream": "...",
                                 "first_op": "...", "project": "..."}

`bucket` and `signature` are the raw ones of the case as checked (what replay holds it to);
`cause` the signature of its minimal case (buckets.signatures, "cause signatures"), which a
failure must have once reduced to be this known bug (corpus_replay.resign computes it).
`upstream` is the URL of the upstream issue when the project already knows the bug ("not
yet filed" otherwise); `first_op` the first divergent op of a value failure; `project` (optional)
the upstream project a bundle is written for when not the route's own (see repro.PROJECTS).

A seed entry passes (or is `unsupported`) on every available route. A known entry fails
on its route in its bucket, strictly: if it stops reproducing, replay says so. A corrupt
entry is reported with its path and reason and skipped, never fatal. Writes are atomic
(temporary file, then rename), so an interrupted write never leaves half an entry.
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile

from torchsim_diff import files
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.case.validate import validate_case
from torchsim_diff.results.record import EntryFields
from torchsim_diff.buckets.known_defects import is_defect_folder
from torchsim_diff.buckets.signatures import bucket_of, on_route

SEED, KNOWN = "seed", "known"
# Entry fields besides the case; each is text when present.
CAUSE_FILE = "cause.json"     # a known bug's root cause (buckets.causes), beside its entries
TEXT_FIELDS = ("route", "kind", "bucket", "signature", "cause", "note", "upstream", "first_op", "project", "message")


class CorruptEntry(ValueError):
    """A corpus file that cannot be read as an entry (message starts with its path)."""


@dataclasses.dataclass
class Entry:
    path: str
    kind: str                  # SEED or KNOWN
    case: Case
    route: str | None = None
    bucket: str | None = None
    failure_kind: str | None = None
    note: str = ""
    raw: dict = dataclasses.field(default_factory=dict)
    fields: EntryFields = dataclasses.field(default_factory=EntryFields)   # the entry's record fields

    @property
    def upstream(self) -> str:
        return self.fields.upstream

    @property
    def cause(self) -> str | None:
        """The cause signature of a known bug (None for a seed, or an entry not yet re-signed)."""
        return self.raw.get("cause")

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]


def read_entry(path: str) -> Entry:
    """The entry (or bare case file) at `path`: a regular file within files.CASE_FILE's cap."""
    try:
        raw = files.read_json(path, files.CASE_FILE)
    except files.UnreadableFile as exc:
        reason = exc.reason if exc.reason.startswith("not valid JSON") else f"cannot read: {exc.reason}"
        raise CorruptEntry(f"{path}: {reason}") from None
    if isinstance(raw, dict) and "nodes" in raw and "case" not in raw:
        raw = {"case": raw}                      # a bare case file replays like a seed entry
    if not isinstance(raw, dict) or "case" not in raw:
        raise CorruptEntry(f"{path}: an entry is an object with a 'case' field")
    for key in TEXT_FIELDS:
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise CorruptEntry(f"{path}: {key}={_short(raw[key])} must be text (a JSON string)")
    fields = EntryFields.from_dict(raw)
    try:
        case = validate_case(fields.case)
    except CaseError as exc:
        raise CorruptEntry(f"{path}: {exc}") from None
    kind = KNOWN if fields.route and fields.bucket else SEED
    return Entry(path, kind, case, fields.route, fields.bucket, fields.kind, fields.note, raw, fields)


def _short(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def iter_entries(paths):
    """(entry, None) or (None, CorruptEntry) for every *.json under the given paths."""
    for path in _json_files(paths):
        try:
            yield read_entry(path), None
        except CorruptEntry as exc:
            yield None, exc


def _json_files(paths) -> list:
    files = []
    for path in paths:
        if os.path.isdir(path):
            for root, dirs, names in os.walk(path):
                if is_defect_folder(root):   # a known TOGSim defect: a TOG, no case
                    dirs[:] = []
                    continue
                files += [os.path.join(root, n) for n in names if n.endswith(".json") and n != CAUSE_FILE]
        elif path.endswith(".json"):
            files.append(path)
    return sorted(files)


def known_causes(folder: str) -> dict:
    """cause signature -> entry name, of the readable known-bug entries under `folder` that
    have one (empty when absent)."""
    if not os.path.isdir(folder):
        return {}
    return {e.cause: e.name for e, err in iter_entries([folder]) if e is not None and e.kind == KNOWN and e.cause}


def known_buckets(folder: str) -> set:
    """The cause buckets of the known bugs under `folder`: a failure is a known bug when its own
    minimal case's signature is one of theirs (never by its raw bucket). An entry without a
    cause (not re-signed: its route could not run) matches nothing."""
    return cause_buckets(known_causes(folder))


def cause_buckets(causes, route: str | None = None) -> set:
    """The buckets of cause signatures, on `route` when given (a planted route compared with the
    known bugs of the real route whose ops it shares)."""
    return {bucket_of(on_route(c, route) if route else c) for c in causes}


def write_atomic(path: str, data: dict) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def known_entry(verdict, *, note: str, upstream: str = "") -> dict:
    """A known-bug entry for a failing verdict (its smallest case, route, kind and bucket)."""
    return {"route": verdict.route, "kind": verdict.kind.value, "bucket": verdict.bucket,
            "signature": verdict.signature, "note": note, "upstream": upstream,
            "message": verdict.message.splitlines()[0] if verdict.message else "",
            "case": verdict.case.to_dict()}
