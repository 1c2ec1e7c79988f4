"""Live progress: counts and rates per route from records, the mode a run gets, plain lines,
tqdm bars, and a plain pytest run that prints none of it."""
import io
import json
import time

import pytest

from torchsim_diff.campaign.progress import (PLAIN_EVERY_S, POLL_S, BarDisplay, Board, LineDisplay, Progress,
                                             ProgressThread, ResultsTail, choose_mode)
from torchsim_diff.results.record import Record


def _rec(route, status="pass", bucket=None, known=False, t_case=None, t_start=None):
    return Record(route=route, status=status, bucket=bucket, known=known, t_case=t_case, t_start=t_start)


def _board_of_two_routes() -> Board:
    """inductor: first case (2 s after 30 s of worker start-up) read at t=100, six cases by
    t=108; mlir: one 1 s case at t=50."""
    board = Board(start=0.0, end=600.0, seen_buckets={"old"}, known={"k"})
    board.add(_rec("inductor", t_case=32.0, t_start=30.0), now=100)
    for second in range(101, 105):
        board.add(_rec("inductor", t_case=2.0), now=second)
    board.add(_rec("inductor", "fail", "b1", t_case=2.0), now=108)
    board.add(_rec("mlir", "fail", "k", t_case=1.0), now=50)
    return board


def test_board_counts_cases_failures_and_marks_new_and_known_buckets():
    board = Board(start=0.0, end=600.0, seen_buckets={"old"}, known={"k"})
    for record in [_rec("inductor")] * 7 + [_rec("inductor", "fail", "b1"), _rec("inductor", "fail", "b1"),
                                            _rec("inductor", "fail", "old"), _rec("mlir", "fail", "k")]:
        board.add(record, now=10.0)
    inductor, mlir = board.lines(now=100.0)
    assert inductor.split()[:3] == ["inductor", "10", "cases"]
    assert inductor.endswith("3 failing in 2 buckets (1 NEW), 8m20s left")
    assert "1 failing in 1 bucket (1 known)" in mlir


def test_a_failure_left_to_reduce_after_the_drawing_is_counted_in_no_bucket():
    from torchsim_diff.results.record import DEFERRED
    board = Board(start=0.0, end=600.0)
    board.add(Record(route="mlir", status="fail", bucket="raw", reduce_error=DEFERRED), now=10.0)
    board.add(_rec("mlir", "fail", "b1"), now=11.0)
    line, = board.lines(now=100.0)
    assert line.endswith("2 failing in 1 bucket (1 NEW, 1 to reduce after the drawing), 8m20s left")


def test_a_routes_rate_runs_from_its_first_case_not_from_the_session_start():
    board = _board_of_two_routes()
    inductor, mlir = board.routes["inductor"], board.routes["mlir"]
    # inductor's first case started at 100 - 2 s (its worker's start-up before that is no case's
    # time); six cases by 108 (measured from the session start: 0.06/s)
    assert inductor.first_start == 98.0 and inductor.rate() == pytest.approx(6 / 10)
    assert mlir.rate() == pytest.approx(1 / 1)          # not decayed by the time since its last case
    lines = board.lines(now=110.0)
    assert "0.60/s" in lines[0] and "1.00/s" in lines[1]


def test_a_rate_needs_a_span_to_be_measured():
    board = Board(start=0.0)
    board.add(_rec("eager"), now=5.0)                   # no t_case: its first case has no length
    assert board.routes["eager"].rate() is None and "-/s" in board.lines(now=6.0)[0]


def test_board_says_so_before_the_first_case_finishes():
    assert Board(start=0.0, end=600.0).lines(now=75.0) == ["no case finished yet (1m15s since the start), 8m45s left"]
    assert Board(start=0.0).lines(now=75.0) == []          # no budget, no fuzzing yet: nothing to say


def test_tail_reads_only_complete_new_lines(tmp_path):
    path = tmp_path / "results-gw0.jsonl"
    path.write_text(json.dumps(_rec("eager").to_dict()) + "\n" + '{"route": "ea')
    tail = ResultsTail(str(tmp_path))
    assert [r.route for r in tail.new_records()] == ["eager"]
    with open(path, "a") as handle:
        handle.write('ger", "status": "pass"}\n')
    assert [r.route for r in tail.new_records()] == ["eager"]
    assert tail.new_records() == []


@pytest.mark.parametrize("requested, tty, campaign, asked, mode", [
    ("auto", True, False, False, "off"),       # a plain test run: nothing between pytest's dots
    ("auto", False, False, False, "off"),
    ("auto", True, True, False, "bar"),        # a campaign on a terminal
    ("auto", False, True, False, "lines"),     # a campaign in a log
    ("auto", False, False, True, "lines"),     # -v asks for it
    ("auto", True, False, True, "bar"),
    ("off", True, True, True, "off"),
    ("lines", True, False, False, "lines"),
    ("bar", False, False, False, "bar"),
], ids=lambda v: str(v))
def test_the_mode_follows_the_flag_the_terminal_and_whether_the_run_is_a_campaign(requested, tty, campaign,
                                                                                   asked, mode):
    assert choose_mode(requested, tty=tty, campaign=campaign, asked=asked) == mode


def test_plain_lines_are_whole_prefixed_and_at_most_one_block_per_period():
    written = []
    display = LineDisplay(written.append)
    board = _board_of_two_routes()
    display.show(board, now=110.0)
    display.show(board, now=111.0)                      # within the period: not written
    assert len(written) == 2 and all(line.startswith("progress: ") and "\n" not in line for line in written)
    display.close(board, now=112.0)                     # the final block is always written
    assert len(written) == 4 and display.every_s == PLAIN_EVERY_S


def test_the_thread_writes_plain_blocks_while_no_item_ends_and_never_while_pytest_writes(tmp_path):
    """An item that runs for minutes reports nothing through pytest's hooks: the progress
    thread writes the blocks, and paused() (held while pytest writes its line) holds it back."""
    import threading
    (tmp_path / "results-gw0.jsonl").write_text(json.dumps(_rec("eager", t_case=1.0).to_dict()) + "\n")
    written, blocked = [], threading.Event()
    display = LineDisplay(written.append, every_s=0.0)
    thread = ProgressThread(Progress(str(tmp_path), Board(start=0.0), display))
    with display.paused():
        thread.start()
        blocked.wait(2.5 * POLL_S)                      # the thread ticks, but cannot write yet
        assert written == []
    deadline = time.monotonic() + 10 * POLL_S
    while not written and time.monotonic() < deadline:
        time.sleep(POLL_S / 10)
    thread.stop()
    assert written and written[0].split()[1:4] == ["eager", "1", "cases"]


def test_bars_hold_each_routes_counts_and_the_budget_left():
    stream, final = io.StringIO(), []
    display = BarDisplay(stream, final.append)
    board = _board_of_two_routes()
    display.show(board, now=109.0)
    board.add(_rec("inductor", t_case=2.0), now=110.0)
    display.show(board, now=110.0)                      # the same bars, redrawn
    drawn = stream.getvalue()
    assert "7 cases, 0.58/s, 1 failing in 1 bucket (1 NEW)" in drawn
    assert "1 cases, 1.00/s, 1 failing in 1 bucket (1 known)" in drawn
    assert "18%" in drawn and "1m50s spent, 8m10s left" in drawn
    display.close(board, now=110.0)
    assert [line.split()[1:3] for line in final] == [["inductor", "7"], ["mlir", "1"]]   # then plain lines


def test_progress_counts_what_the_run_folder_holds(tmp_path):
    (tmp_path / "results-gw0.jsonl").write_text(
        "".join(json.dumps(_rec("eager", t_case=1.0).to_dict()) + "\n" for _ in range(3)))
    written = []
    progress = Progress(str(tmp_path), Board(start=0.0), LineDisplay(written.append))
    progress.tick()
    assert written and written[0].split()[1:4] == ["eager", "3", "cases"]


# -- under pytest ------------------------------------------------------------------------------
pytest_plugins = ["pytester"]

SUITE = '''
from hypothesis import given, seed
from torchsim_diff.generate.strategies import cases

def test_fuzz(torchsim_session, fuzz_route):
    @seed(torchsim_session.fuzz_seed(fuzz_route))
    @torchsim_session.settings()
    @given(case=cases(ops=["relu"], max_nodes=1))
    def run_case(case):
        torchsim_session.check(case, fuzz_route)
    run_case()

def test_other():
    pass
'''


@pytest.fixture
def suite(pytester, double_routes, monkeypatch):
    monkeypatch.chdir(pytester.path)
    pytester.makepyfile(test_suite=SUITE)
    return pytester


def _run(suite, *args):
    return suite.runpytest_subprocess("--routes", "eager", "--fuzz-examples", "2", "--fuzz-reduce-budget", "0",
                                      "--report-dir", str(suite.path / "run"), "-p", "no:cacheprovider", *args)


@pytest.mark.e2e
@pytest.mark.slow
def test_a_plain_test_run_prints_no_progress_and_keeps_its_dot_line(suite):
    result = _run(suite)
    result.assert_outcomes(passed=2)
    assert "progress:" not in result.stdout.str()
    result.stdout.fnmatch_lines(["test_suite.py .. *"])


@pytest.mark.e2e
@pytest.mark.slow
def test_progress_asked_for_comes_in_whole_lines_between_pytests_own(suite):
    result = _run(suite, "--fuzz-progress", "lines")
    result.assert_outcomes(passed=2)
    # pytest's item lines stay whole (one per item), and the progress lines are lines of their own
    result.stdout.fnmatch_lines(["test_suite.py::test_fuzz[[]eager[]] PASSED*", "progress: eager *2 cases*/s*"])


def test_progress_lines_are_flushed_as_they_are_written():
    """To a log file or a pipe stdout is block-buffered: unflushed, a 10-minute run's blocks came
    in 9 bursts, up to 69 s apart."""
    from torchsim_diff.campaign.pytest_controller import _flushed_lines
    calls = []

    class Reporter:
        def write_line(self, line):
            calls.append(("line", line))

        def flush(self):
            calls.append(("flush",))

    _flushed_lines(Reporter())("progress: eager 2 cases")
    assert calls == [("line", "progress: eager 2 cases"), ("flush",)]
