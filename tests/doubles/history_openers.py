"""A process that opens new bucket histories at the same instant as another (a barrier per
history) and writes one bucket to each: the way two campaigns started together meet a history
neither has made yet. Standard library and history_file only, so that a spawned process starts fast."""
from __future__ import annotations

import os

from torchsim_diff.buckets.history_file import open_history


def open_each(folder: str, count: int, bucket: str, barrier) -> None:
    for k in range(count):
        path = os.path.join(folder, f"history{k}", "buckets.sqlite")
        barrier.wait(timeout=60)
        add_one(path, bucket)


def add_one(path: str, bucket: str) -> None:
    """Open the history at `path` as a writer, add `bucket` and close it."""
    db = open_history(path, read_only=False)
    db.execute("INSERT INTO buckets VALUES (?, 'r', 'wrong_values', 'relu', 'm', 't', 1, '[1, 1, 1]', '{}')",
               (bucket,))
    db.close()
