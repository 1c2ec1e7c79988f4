"""Live progress per route: cases, cases/s, failing cases, buckets (NEW/known) and time left.

The counts come from the run's results*.jsonl files, which every writer (the CLI campaign,
each pytest-xdist worker) appends and flushes per record: reading them is how the controller
sees its workers between items. xdist reports only reach the controller when an item ends,
and one fuzz item runs for minutes.

A route's rate is its cases over the time from the start of its first case (its first
record's arrival less that case's `t_case`, its worker's start-up `t_start` left out) to its
latest record, so a route whose items start late, or ended early, is not measured against
the whole session.

Two displays (`make_display`), both kept up by a thread: tqdm bars on a terminal (a budget
bar, then one counter per route); whole plain lines elsewhere, one block per PLAIN_EVERY_S. Either ends with one plain block of the final counts. Which one a run gets,
if any, is `choose_mode`'s decision.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import threading
import time

from tqdm import tqdm

from torchsim_diff.results.record import DEFERRED, PROGRESS_REQUIRED, Record

MODES = ("auto", "bar", "lines", "off")
PLAIN_EVERY_S = 10.0
POLL_S = 1.0
PREFIX = "progress: "


def choose_mode(requested: str, *, tty: bool, campaign: bool, asked: bool = False) -> str:
    """'bar', 'lines' or 'off'. `auto` shows progress for a campaign (a budget, or the CLI's
    fuzz) or when asked (-v), as bars on a terminal and lines elsewhere; a plain test run
    shows none, so nothing comes between pytest's dots."""
    if requested != "auto":
        return requested
    if not (campaign or asked):
        return "off"
    return "bar" if tty else "lines"


@dataclasses.dataclass
class RouteCounts:
    cases: int = 0
    failing: int = 0
    buckets: set = dataclasses.field(default_factory=set)
    new: set = dataclasses.field(default_factory=set)
    known: set = dataclasses.field(default_factory=set)
    unreduced: int = 0                    # failures left to reduce after the drawing: no bucket yet
    first_start: float | None = None      # when its first case started (wall clock)
    last_seen: float | None = None        # when its latest record was read

    def rate(self) -> float | None:
        """Cases per second since its first case started; None before a span can be measured."""
        if self.first_start is None or self.last_seen <= self.first_start:
            return None
        return self.cases / (self.last_seen - self.first_start)

    def rate_text(self) -> str:
        rate = self.rate()
        return "    -/s" if rate is None else f"{rate:5.2f}/s"

    def failing_text(self) -> str:
        marks = [f"{len(s)} {label}" for s, label in ((self.new, "NEW"), (self.known, "known")) if s]
        if self.unreduced:
            marks.append(f"{self.unreduced} to reduce after the drawing")
        n = len(self.buckets)
        return f"{self.failing} failing in {n} bucket{'s' * (n != 1)}" + (f" ({', '.join(marks)})" if marks else "")


class Board:
    """Per-route counts from records, and the plain lines that show them.

    start, end: the run's start and, under a budget, its end (wall clock); seen_buckets:
    buckets of earlier runs (the bucket history), so that a bucket never seen before is
    marked NEW; known: buckets of corpora/known.
    """

    def __init__(self, start: float, end: float | None = None, seen_buckets=(), known=()):
        self.start, self.end = start, end
        self.seen, self.known = set(seen_buckets), set(known)
        self.routes: dict = collections.defaultdict(RouteCounts)

    def add(self, record: Record, now: float | None = None) -> None:
        """Count `record`, read at `now` (default: the time now)."""
        now = time.time() if now is None else now
        counts = self.routes[record.route]
        if counts.first_start is None:         # its worker's start-up (t_start) is no case's time
            counts.first_start = now - max((record.t_case or 0.0) - (record.t_start or 0.0), 0.0)
        counts.cases += 1
        counts.last_seen = now
        bucket = record.bucket
        if not record.failed or not bucket:
            return
        counts.failing += 1
        if record.reduce_error == DEFERRED:
            counts.unreduced += 1              # its raw bucket says nothing of the cause yet
            return
        counts.buckets.add(bucket)
        if bucket in self.known or record.known:
            counts.known.add(bucket)
        elif bucket not in self.seen:
            counts.new.add(bucket)

    def left_text(self, now: float) -> str:
        return f"{_clock(max(0.0, self.end - now))} left" if self.end else ""

    def lines(self, now: float | None = None) -> list:
        now = time.time() if now is None else now
        left = f", {self.left_text(now)}" if self.end else ""
        if not self.routes:            # under a budget, a sign of life while route workers start
            return [f"no case finished yet ({_clock(now - self.start)} since the start){left}"] if self.end else []
        width = max(len(route) for route in self.routes)
        return [f"{route:<{width}}  {c.cases:5d} cases  {c.rate_text()}  {c.failing_text()}{left}"
                for route, c in sorted(self.routes.items())]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(max(seconds, 0.0))), 60)
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


class LineDisplay:
    """Whole plain lines through `write_line` (one line, no newline), at most one block per
    `every_s` seconds. The progress thread shows them too, so a block comes every `every_s`
    however long an item runs; paused() keeps it from writing while pytest writes a line."""

    live = True       # shown by the progress thread as well as between pytest's lines

    def __init__(self, write_line, every_s: float = PLAIN_EVERY_S):
        self.write_line, self.every_s = write_line, every_s
        self._last: float | None = None
        self._writing = threading.Lock()

    def show(self, board: Board, now: float, force: bool = False) -> None:
        lines = board.lines(now)
        clock = time.monotonic()
        if not lines or (not force and self._last is not None and clock - self._last < self.every_s):
            return
        self._last = clock
        with self._writing:
            for line in lines:
                self.write_line(PREFIX + line)

    def paused(self):
        return self._writing

    def close(self, board: Board, now: float) -> None:
        self.show(board, now, force=True)


class BarDisplay:
    """tqdm bars on `stream`: the budget's share spent (when there is one), then one counter
    per route in the order routes first finish a case, with its rate and failures. close()
    clears them and writes the final counts as plain lines through `write_line`."""

    live = True       # redrawn in place: other writes to the terminal go through paused()

    def __init__(self, stream, write_line):
        self.stream, self.write_line = stream, write_line
        self._bars: dict = {}
        self._budget_bar = None

    def show(self, board: Board, now: float, force: bool = False) -> None:
        if board.end is not None:
            self._show_budget(board, now)
        width = max((len(route) for route in board.routes), default=0)
        for route, counts in board.routes.items():
            bar = self._bars[route] if route in self._bars else self._new_bar(route)
            bar.n = counts.cases
            bar.set_description_str(f"{route:<{width}}", refresh=False)
            bar.set_postfix_str(f"{counts.rate_text().strip()}, {counts.failing_text()}", refresh=False)
            bar.refresh()

    def _show_budget(self, board: Board, now: float) -> None:
        if self._budget_bar is None:
            self._budget_bar = self._bar(position=0, total=board.end - board.start,
                                         bar_format="budget {percentage:3.0f}%|{bar:30}| {desc}")
        self._budget_bar.n = min(max(now - board.start, 0.0), self._budget_bar.total)
        self._budget_bar.set_description_str(f"{_clock(now - board.start)} spent, {board.left_text(now)}",
                                             refresh=False)
        self._budget_bar.refresh()

    def _new_bar(self, route: str):
        first = 0 if self._budget_bar is None else 1
        bar = self._bar(position=first + len(self._bars), total=None, desc=route,
                        bar_format="{desc} {n_fmt:>5} cases{postfix}")
        self._bars[route] = bar
        return bar

    def _bar(self, **kwargs):
        return tqdm(file=self.stream, leave=False, disable=False, dynamic_ncols=True, mininterval=0, **kwargs)

    def paused(self):
        """Bars cleared while something else writes to the terminal, redrawn after."""
        return tqdm.external_write_mode(file=self.stream)

    def close(self, board: Board, now: float) -> None:
        bars = ([self._budget_bar] if self._budget_bar else []) + list(self._bars.values())
        for bar in reversed(bars):
            bar.close()
        self._bars, self._budget_bar = {}, None
        for line in board.lines(now):
            self.write_line(PREFIX + line)


def make_display(mode: str, stream, write_line):
    """The display for a mode of choose_mode ('bar' or 'lines'; 'off' has none)."""
    return BarDisplay(stream, write_line) if mode == "bar" else LineDisplay(write_line)


class Progress:
    """A run folder's records counted on a board and shown on a display; tick() is safe to
    call from a hook and a thread at once."""

    def __init__(self, folder: str, board: Board, display):
        self.tail, self.board, self.display = ResultsTail(folder), board, display
        self._lock = threading.Lock()

    def tick(self, force: bool = False) -> None:
        with self._lock:
            now = time.time()
            for record in self.tail.new_records():
                self.board.add(record, now)
            self.display.show(self.board, now, force)

    def close(self) -> None:
        """The records so far, shown once more as plain lines; a bar display is taken down."""
        with self._lock:
            now = time.time()
            for record in self.tail.new_records():
                self.board.add(record, now)
            self.display.close(self.board, now)


class ProgressThread(threading.Thread):
    """Ticks a Progress every POLL_S seconds until stop(), which closes it."""

    def __init__(self, progress: Progress):
        super().__init__(name="torchsim-diff-progress", daemon=True)
        self.progress = progress
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(POLL_S):
            self.progress.tick()

    def stop(self) -> None:
        """Stop ticking and close the progress; again, nothing."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.is_alive():
            self.join(timeout=5)
        self.progress.close()
