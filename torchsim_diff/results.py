"""results.jsonl: one record per (case, route), appended and flushed as it is made,
so a killed run loses nothing already written."""
from __future__ import annotations

import json
import os


class ResultsWriter:
    """Appends records to `path` (created with its folder), one JSON object per line."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, sort_keys=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_records(path: str):
    """Records of a results.jsonl; a truncated last line (killed writer) is skipped."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def find_results(paths) -> list:
    """Every results*.jsonl under the given files or folders."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            for root, _dirs, files in os.walk(path):
                found += [os.path.join(root, f) for f in sorted(files)
                          if f.startswith("results") and f.endswith(".jsonl")]
        elif os.path.exists(path):
            found.append(path)
    return sorted(found)
