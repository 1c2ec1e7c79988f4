"""Live progress: one line per route (cases, cases/s, failures, buckets, time left).

The lines are built from the run's results*.jsonl files, which every writer (the CLI
campaign, each pytest-xdist worker) appends and flushes per record: reading them is how
the controller sees its workers between items. xdist reports only reach the controller
when an item ends, and one fuzz item runs for minutes.

On a terminal the lines are redrawn in place; elsewhere (CI logs) they are printed as
plain lines every PLAIN_EVERY_S seconds.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time

from torchsim_diff.results.record import PROGRESS_REQUIRED, Record

PLAIN_EVERY_S = 10.0
TTY_EVERY_S = 1.0


@dataclasses.dataclass
class RouteCounts:
    cases: int = 0
    failing: int = 0
    buckets: set = dataclasses.field(default_factory=set)
    new: set = dataclasses.field(default_factory=set)
    known: set = dataclasses.field(default_factory=set)


class Board:
    """Per-route counts from records, and the lines that show them.

    seen_buckets: buckets of earlier runs (the bucket history), so that a bucket never seen
        before is marked NEW; known: buckets of corpora/known.
    """

    def __init__(self, start: float, end: float | None = None, seen_buckets=(), known=()):
        self.start, self.end = start, end
        self.seen, self.known = set(seen_buckets), set(known)
        self.routes: dict = collections.defaultdict(RouteCounts)

    def add(self, record: Record) -> None:
        counts = self.routes[record.route]
        counts.cases += 1
        bucket = record.bucket
        if not record.failed or not bucket:
            return
        counts.failing += 1
        counts.buckets.add(bucket)
        if bucket in self.known or record.known:
            counts.known.add(bucket)
        elif bucket not in self.seen:
            counts.new.add(bucket)

    def lines(self, now: float | None = None) -> list:
        now = time.time() if now is None else now
        elapsed = max(now - self.start, 1e-9)
        left = f", {_clock(max(0.0, self.end - now))} left" if self.end else ""
        if not self.routes:            # under a budget, a sign of life while route workers start
            return [f"no case finished yet ({_clock(elapsed)} since the start){left}"] if self.end else []
        width = max((len(r) for r in self.routes), default=0)
        out = []
        for route, c in sorted(self.routes.items()):
            marks = ", ".join(f"{len(s)} {label}" for s, label in ((c.new, "NEW"), (c.known, "known")) if s)
            buckets = f"{len(c.buckets)} bucket{'s' * (len(c.buckets) != 1)}" + (f" ({marks})" if marks else "")
            out.append(f"{route:<{width}}  {c.cases:5d} cases  {c.cases / elapsed:5.2f}/s  "
                       f"{c.failing} failing in {buckets}{left}")
        return out


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s"


class ResultsTail:
    """New records of every results*.jsonl under `folder`, read incrementally (a line that is
    no record is passed over: the run's reader counts it at the end)."""

    def __init__(self, folder: str):
        self.folder = folder
        self._offsets: dict = {}

    def new_records(self) -> list:
        if not os.path.isdir(self.folder):
            return []
        records = []
        for name in sorted(os.listdir(self.folder)):
            if name.startswith("results") and name.endswith(".jsonl"):
                records += self._read(os.path.join(self.folder, name))
        return records

    def _read(self, path: str) -> list:
        with open(path, "rb") as handle:
            handle.seek(self._offsets.get(path, 0))
            data = handle.read()
        complete = data[:data.rfind(b"\n") + 1]        # a line still being written waits
        self._offsets[path] = self._offsets.get(path, 0) + len(complete)
        records = []
        for line in complete.splitlines():
            try:
                records.append(Record.from_dict(json.loads(line), required=PROGRESS_REQUIRED))
            except ValueError:          # not JSON, or BadRecord
                continue
        return records


class Display:
    """Writes the board's lines: redrawn in place on a terminal, plain lines elsewhere."""

    def __init__(self, stream, tty: bool | None = None, prefix: str = "progress: "):
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.prefix = "" if self.tty else prefix
        self.every_s = TTY_EVERY_S if self.tty else PLAIN_EVERY_S
        self._drawn = 0
        self._last = 0.0

    def show(self, lines: list, force: bool = False) -> None:
        now = time.monotonic()
        if not lines or (not force and now - self._last < self.every_s):
            return
        self._last = now
        text = "".join(f"{self.prefix}{line}\n" for line in lines)
        if self.tty:
            # Cursor up over the previous block, clear to the end of the screen, redraw.
            text = (f"\x1b[{self._drawn}F\x1b[J" if self._drawn else "\n") + text
            self._drawn = len(lines)
        self.stream.write(text)
        self.stream.flush()

    def detach(self) -> None:
        """Leave the last block on screen; whatever is written next goes below it."""
        self._drawn = 0


class ProgressThread(threading.Thread):
    """Polls a run folder's records and keeps the display current until stop()."""

    def __init__(self, folder: str, board: Board, display: Display):
        super().__init__(name="torchsim-diff-progress", daemon=True)
        self.tail, self.board, self.display = ResultsTail(folder), board, display
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(min(self.display.every_s, 1.0)):
            self.tick()

    def tick(self, force: bool = False) -> None:
        for record in self.tail.new_records():
            self.board.add(record)
        self.display.show(self.board.lines(), force)

    def stop(self) -> None:
        """Stop polling and print the final state once."""
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)
        self.tick(force=True)
        self.display.detach()
