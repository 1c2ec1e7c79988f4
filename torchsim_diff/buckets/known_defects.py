"""Known TOGSim defects: a failed timing check that matches one is reported as known, not new.

A defect lives in the known-bug ledger (`corpora/known/`, `buckets.known_ledger`) as a folder
of its own, told apart from the value bugs' cause folders by its `defect.json`:

    corpora/known/togsim-<name>/defect.json   {"title": ..., "project": "TOGSim",
                                              "status": ..., "upstream": URL or "",
                                              "bucket": the bucket key of its minimal TOG,
                                              "also_buckets": [keys of other checks it
                                              fails where it is large enough] (optional)}
    corpora/known/togsim-<name>/note.md       the defect in TOGSim's terms, and its evidence
    corpora/known/togsim-<name>/*             the minimal TOG (tile_graph.onnx and .attr.json),
                                              config.json and command.txt

The case loaders (`buckets.corpus`, `buckets.causes`) skip such folders: they hold no case.
"""
from __future__ import annotations

import dataclasses
import json
import os

DEFECT_FILE = "defect.json"
FIELDS = ("title", "project", "status", "upstream", "bucket")


class BadDefect(ValueError):
    """A defect folder whose defect.json cannot be read; the message names the file."""


@dataclasses.dataclass(frozen=True)
class KnownDefect:
    name: str
    title: str
    project: str
    status: str
    upstream: str
    bucket: str
    also_buckets: tuple = ()


def is_defect_folder(path: str) -> bool:
    return os.path.isfile(os.path.join(path, DEFECT_FILE))


def read_defect(folder: str) -> KnownDefect:
    path = os.path.join(folder, DEFECT_FILE)
    try:
        with open(path) as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as error:
        raise BadDefect(f"{path}: {error}") from None
    if not isinstance(raw, dict) or not all(isinstance(raw.get(key), str) for key in FIELDS):
        raise BadDefect(f"{path}: needs text fields {', '.join(FIELDS)}")
    also = raw.get("also_buckets", [])
    if not isinstance(also, list) or not all(isinstance(key, str) for key in also):
        raise BadDefect(f"{path}: also_buckets must be a list of bucket keys")
    return KnownDefect(os.path.basename(os.path.normpath(folder)), *(raw[key] for key in FIELDS), tuple(also))


def known_defects(ledger: str) -> dict:
    """bucket key -> KnownDefect, for every defect folder in the ledger folder."""
    if not os.path.isdir(ledger):
        return {}
    folders = (os.path.join(ledger, name) for name in sorted(os.listdir(ledger)))
    return {key: defect for defect in map(read_defect, filter(is_defect_folder, folders))
            for key in (defect.bucket, *defect.also_buckets)}
