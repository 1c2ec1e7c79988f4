"""Deleting what passing cases leave behind, off the case's critical path.

A passing case keeps no artifacts, but deleting a Triton kernel capture (a score of files)
took about 50 ms of a 0.8 s case in the harness. `BackgroundDelete.discard` renames the folder aside
at once (one system call, so the next run of the same case may reuse the name) and a
background thread deletes it; `close` waits for the deletions.
"""
from __future__ import annotations

import concurrent.futures
import os
import shutil
import uuid


class BackgroundDelete:
    """Discards folders into `trash` (created on first use) and deletes them in the background."""

    def __init__(self, trash: str):
        self.trash = trash
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def discard(self, folder: str) -> None:
        if not os.path.isdir(folder):
            return
        aside = os.path.join(self.trash, uuid.uuid4().hex)
        try:
            os.makedirs(self.trash, exist_ok=True)
            os.rename(folder, aside)
        except OSError:          # another file system, or gone meanwhile: delete it here
            shutil.rmtree(folder, ignore_errors=True)
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torchsim-diff-sweep")
        self._pool.submit(shutil.rmtree, aside, True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        shutil.rmtree(self.trash, ignore_errors=True)
