"""Buckets that persist across runs: each keeps its smallest case, first sighting and count,
so a second campaign can say which of its findings are new.

The store is one JSON file (default reports/buckets.json), rewritten atomically.
"""
from __future__ import annotations

import json
import os
import time

from torchsim_diff.corpus import write_atomic
from torchsim_diff.graph import case_size

DEFAULT_PATH = os.path.join("reports", "buckets.json")


class BucketStore:
    def __init__(self, path: str = DEFAULT_PATH):
        self.path = path
        self.buckets: dict = {}
        self.new: set = set()
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as handle:
                    self.buckets = json.load(handle).get("buckets", {})
            except (OSError, ValueError, AttributeError):
                self.buckets = {}          # a damaged store only costs the history, never the run

    def add(self, record: dict) -> bool:
        """Account for one failing record; True when its bucket was never seen before."""
        bucket = record.get("bucket")
        if not bucket:
            return False
        size = case_size(record["case"])
        entry = self.buckets.get(bucket)
        is_new = entry is None
        if is_new:
            self.new.add(bucket)
            entry = self.buckets[bucket] = {
                "route": record["route"], "kind": record["kind"], "op": record.get("op"),
                "message": (record.get("message") or "").splitlines()[0][:200] if record.get("message") else "",
                "first_seen": time.strftime("%Y-%m-%d %H:%M:%S"), "count": 0, "size": None, "case": None}
        entry["count"] += 1
        if entry["size"] is None or size < tuple(entry["size"]):
            entry["size"], entry["case"] = list(size), record["case"]
            entry["artifacts"] = record.get("artifacts")
            entry["record"] = record
        return is_new

    def smallest_record(self, bucket: str) -> dict | None:
        entry = self.buckets.get(bucket)
        return entry.get("record") if entry else None

    def save(self) -> None:
        write_atomic(self.path, {"schema": 1, "buckets": self.buckets})


def smallest_per_bucket(records) -> dict:
    """bucket -> its smallest failing record among `records`."""
    best: dict = {}
    for record in records:
        bucket = record.get("bucket")
        if bucket and record.get("status") == "fail":
            if bucket not in best or case_size(record["case"]) < case_size(best[bucket]["case"]):
                best[bucket] = record
    return best
