"""Progress lines: counts per route from records, NEW marks, plain lines vs redrawn ones."""
import io
import json

from torchsim_diff.campaign.progress import PLAIN_EVERY_S, Board, Display, ResultsTail
from torchsim_diff.results.record import Record


def _rec(route, status="pass", bucket=None, known=False):
    return Record(route=route, status=status, bucket=bucket, known=known)


def test_board_counts_cases_failures_and_marks_new_and_known_buckets():
    board = Board(start=0.0, end=600.0, seen_buckets={"old"}, known={"k"})
    for record in [_rec("inductor")] * 7 + [_rec("inductor", "fail", "b1"), _rec("inductor", "fail", "b1"),
                                            _rec("inductor", "fail", "old"), _rec("mlir", "fail", "k")]:
        board.add(record)
    inductor, mlir = board.lines(now=100.0)
    assert inductor.split() == ["inductor", "10", "cases", "0.10/s", "3", "failing", "in", "2", "buckets",
                                "(1", "NEW),", "8m20s", "left"]
    assert "1 failing in 1 bucket (1 known)" in mlir


def test_tail_reads_only_complete_new_lines(tmp_path):
    path = tmp_path / "results-gw0.jsonl"
    path.write_text(json.dumps(_rec("eager").to_dict()) + "\n" + '{"route": "ea')
    tail = ResultsTail(str(tmp_path))
    assert [r.route for r in tail.new_records()] == ["eager"]
    with open(path, "a") as handle:
        handle.write('ger", "status": "pass"}\n')
    assert [r.route for r in tail.new_records()] == ["eager"]
    assert tail.new_records() == []


def test_plain_display_prints_lines_at_most_every_period():
    stream = io.StringIO()
    display = Display(stream, tty=False)
    display.show(["a 1"])
    display.show(["a 2"])                       # within the period: not printed
    display.show(["a 3"], force=True)
    assert stream.getvalue() == "progress: a 1\nprogress: a 3\n" and display.every_s == PLAIN_EVERY_S


def test_tty_display_redraws_its_block_in_place():
    stream = io.StringIO()
    display = Display(stream, tty=True)
    display.show(["a", "b"], force=True)
    display.show(["a2", "b2"], force=True)
    assert stream.getvalue() == "\na\nb\n\x1b[2F\x1b[Ja2\nb2\n"


def test_board_says_so_before_the_first_case_finishes():
    assert Board(start=0.0, end=600.0).lines(now=75.0) == ["no case finished yet (1m15s since the start), 8m45s left"]
    assert Board(start=0.0).lines(now=75.0) == []          # no budget, no fuzzing yet: nothing to say
