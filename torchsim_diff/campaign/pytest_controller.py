"""The pytest plugin's controller side, as pytest-xdist's dsession.py is: the session header
with each unavailable route and why, the live progress between pytest's report lines, and at
the end the merged tables of every worker's results, the bucket history updated and the new
buckets self-checked. In an xdist worker these hooks return at once; the controller hands each
worker its report folder, seed, budget and runnable routes (XdistHooks).
"""
from __future__ import annotations

import os
import sys
import time

import pytest

from torchsim_diff.campaign.interrupts import sigterm_as_interrupt
from torchsim_diff.campaign.progress import Board, Progress, ProgressThread, make_display
from torchsim_diff.campaign.pytest_worker import WorkerSession


class XdistHooks:
    """Registered in the controller when xdist runs: what each worker starts from."""

    def __init__(self, session):
        self.session = session

    def pytest_configure_node(self, node):
        """Hand the controller's report folder, seed, budget and runnable routes to each worker."""
        node.workerinput["torchsim_report_dir"] = self.session.report_dir
        node.workerinput["torchsim_seed"] = self.session.base_seed
        node.workerinput["torchsim_budget"] = self.session.budget.to_dict() if self.session.budget else None
        node.workerinput["torchsim_routes"] = self.session.runnable_routes() if self.session.explicit_routes else None
        self.session.release_probe()


class _ProgressHooks:
    """The controller's live progress around pytest's report lines: bars cleared while pytest
    writes and redrawn below its (closed) line; plain lines written after pytest's, through
    the terminal reporter, which ends pytest's line first. Bars start with the first item, after
    xdist's start-up lines (which redraw their own line)."""

    def __init__(self, thread, reporter):
        self.thread, self.reporter = thread, reporter

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logstart(self):
        return (yield from self._between_pytest_lines())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self):
        return (yield from self._between_pytest_lines())

    def _between_pytest_lines(self):
        progress = self.thread.progress
        with progress.display.paused():
            result = yield
            if progress.display.live:
                self.reporter.ensure_newline()
                self.reporter.flush()
        if progress.display.live and self.thread.ident is None:
            self.thread.start()
        progress.tick()
        return result


class FuzzSession(WorkerSession):
    """The session pytest registers: a WorkerSession, with the controller's hooks."""

    def pytest_report_header(self, config):
        budget = f" budget={self.budget.total_s:g}s" if self.budget else ""
        # Probing starts a worker per route: done here only when routes were asked for.
        routes = self.runnable_routes() if self.explicit_routes else self.routes
        lines = [f"torchsim-diff: routes={','.join(routes)} dtypes={','.join(self.dtypes)} "
                 f"seed={self.base_seed}{budget} report-dir={self.report_dir}"]
        from torchsim_diff.generate.policy import active_policy
        nodes = "" if self.max_nodes is None else f" (fuzz items: graph_nodes={self.max_nodes}, --fuzz-max-nodes)"
        lines.append(f"torchsim-diff: {active_policy().describe()}{nodes}")
        for route, reason in self.unavailable().items():
            lines.append(f"torchsim-diff: route {route} unavailable, not fuzzed: {reason}")
        return lines

    def pytest_sessionstart(self, session):
        if getattr(self.config, "workerinput", None) is not None:
            return
        if self.explicit_routes:
            self._sigterm.enter_context(sigterm_as_interrupt(only_over_default=True))
        self._start_progress()

    def _start_progress(self) -> None:
        """In the controller, when pytest_worker._progress_mode says so: bars redrawn by a thread
        from the first item on, or lines written from the report hooks (_ProgressHooks)."""
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.progress_mode == "off" or reporter is None:
            return
        start = self.budget.start if self.budget else time.time()
        board = Board(start, self.budget.end if self.budget else None, self._history_buckets(), self.known)
        stream = _terminal_stream() if self.progress_mode == "bar" else None
        progress = Progress(self.report_dir, board, make_display(self.progress_mode, stream, _flushed_lines(reporter)))
        self._progress = ProgressThread(progress)
        self.config.pluginmanager.register(_ProgressHooks(self._progress, reporter), "torchsim-diff-progress")

    def pytest_unconfigure(self, config):
        self._sigterm.close()

    def pytest_terminal_summary(self, terminalreporter):
        if getattr(self.config, "workerinput", None):
            return
        if self._progress is not None:
            self._progress.stop()
        from torchsim_diff.report import tables
        from torchsim_diff.results.jsonl import find_results, read_records
        if not os.path.isdir(self.report_dir):
            return
        records = [r for f in find_results([self.report_dir]) for r in read_records(f)]
        if not records:
            return
        from torchsim_diff.triage.session_refinements import apply_refinements
        records = [r.known_by_minimal_case(self.known) for r in apply_refinements(records, self.report_dir)]
        terminalreporter.section("torchsim-diff")
        for line in self._share_lines(records):
            terminalreporter.write_line(line)
        settled = self._settle_new_buckets(records)
        undecided = _undecided(records, settled)
        self._findings_fail_run = bool(settled.new or undecided)
        from torchsim_diff.report.standing import Standing
        standing = Standing.of_run(settled.new, settled.unconfirmed, known_folder=self.known_folder,
                                   history=self._history_rows())
        for line in tables.end_report(records, settled.new, settled.bundles, self.report_dir, self.unavailable(),
                                      settled.unconfirmed, standing):
            terminalreporter.write_line(line)
        if self.budget is not None and undecided and not settled.new:
            terminalreporter.write_line(f"The run fails: {undecided} failure(s) the budget left undecided "
                                        f"(not reduced or not self-checked) may be new")

    def _share_lines(self, records) -> list:
        """Under a budget: what each fuzzed route got of the drawing time and of the cases, and
        a line for each route that ran few of them."""
        if self.budget is None:
            return []
        from torchsim_diff.campaign.route_shares import share_rows, spent_by_route, starved_lines
        from torchsim_diff.report.tables import render
        rows = share_rows(self.runnable_routes(), records, spent_by_route(os.path.join(self.report_dir,
                                                                                       "shares.sqlite")))
        return [*render(rows, "plain", "Drawing time per route (Hypothesis's shrinking off: the reducer "
                                       "shrinks each new failure after the drawing)").splitlines(),
                *starved_lines(rows), ""]

    def _history_path(self) -> str:
        return os.path.join(os.path.dirname(os.path.abspath(self.report_dir)), "buckets.json")

    def _history_buckets(self) -> set:
        """Buckets of earlier runs, for marking NEW ones in the progress lines."""
        return set(self._history_rows())

    def _history_rows(self) -> dict:
        """bucket -> its row in the bucket history (BucketStore.buckets)."""
        from torchsim_diff.buckets.bucket_history import BucketStore
        try:
            return BucketStore(self._history_path(), read_only=True).buckets
        except Exception:  # noqa: BLE001 - a history that cannot be read costs the NEW marks and times only
            return {}

    def _settle_new_buckets(self, records):
        """The bucket history updated with this run's failures (known bugs are not new), and
        the new buckets self-checked (triage.self_check) by a checker of this process."""
        from torchsim_diff.buckets.bucket_history import BucketStore
        from torchsim_diff.triage.self_check import settle_new_buckets
        store = BucketStore(self._history_path())
        findings = [r for r in records if r.is_new_failure]
        for record in findings:
            store.add(record)

        def checker():
            from torchsim_diff.run.checker import Checker
            return Checker(out_dir=os.path.join(self.report_dir, "self-check"), timeout_s=self.timeout_s,
                           tag="self-check")
        return settle_new_buckets(findings, store, self.report_dir, checker, interrupted=self._interrupted,
                                  deadline=self.budget.end if self.budget else None)


def _undecided(records, settled) -> int:
    """How many failures the budget left undecided: unreduced, or reduced but not self-checked
    in time. A budgeted run that found one fails: it may be a new bug, and a pass would hide it."""
    from torchsim_diff.triage.self_check import OUT_OF_TIME
    unchecked = sum(reason == OUT_OF_TIME for reason in settled.unconfirmed.values())
    return unchecked + sum(r.unreduced for r in records)


def _flushed_lines(reporter):
    """reporter.write_line, flushed after each line: to a file or a pipe Python's stdout is
    block-buffered, and progress lines would come minutes late, in bursts."""
    def write_line(line: str) -> None:
        reporter.write_line(line)
        reporter.flush()
    return write_line


def _terminal_stream():
    """A handle on the terminal that pytest's output capturing (fd 1 redirected while a test
    runs) does not swallow: the progress bars are drawn while tests run in this process."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (OSError, ValueError, AttributeError):
        return sys.stderr

