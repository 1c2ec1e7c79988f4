"""Results readers stream: records come one at a time, a bad line in the middle is skipped and
counted while the rest still come, and `table` keeps of each record only what its tables read
(report.tables.table_view), so its memory is a fraction of the file's size
(benchmarks/bench_table_memory.py measures it)."""
import json
import os
import shutil

from tests.conftest import REPO
from torchsim_diff.report import tables
from torchsim_diff.results.jsonl import ReadLog, read_all, read_records, stream_records

OLD_RUN = os.path.join(REPO, "tests", "data", "results-v1")
OLD_LINES = os.path.join(OLD_RUN, "results.jsonl")


def _old_lines() -> list:
    with open(OLD_LINES, "rb") as handle:
        return [line for line in handle if line.strip()]


def test_records_come_one_at_a_time_and_a_bad_line_in_the_middle_costs_only_itself(tmp_path):
    first, second, third = _old_lines()[:3]
    path = tmp_path / "results.jsonl"
    path.write_bytes(first + b'{"torn": \n' + second)
    log = ReadLog()
    stream = read_records(str(path), log)
    assert iter(stream) is stream
    assert next(stream).case_id == json.loads(first)["case_id"]
    with open(path, "ab") as handle:          # written after the first record was read: a reader
        handle.write(third)                   # that had read the whole file first would miss it
    rest = [r.case_id for r in stream]
    assert rest == [json.loads(line)["case_id"] for line in (second, third)]
    assert sum(log.skipped.values()) == 1 and "not JSON" in log.summary()


def test_stream_records_reads_file_after_file_lazily(tmp_path):
    lines = _old_lines()
    for name, part in (("a", lines[:2]), ("b", lines[2:])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.jsonl").write_bytes(b"".join(part))
    log = ReadLog()
    stream = stream_records([str(tmp_path / "a" / "results.jsonl"), str(tmp_path / "b" / "results.jsonl")], log)
    assert next(stream).case_id == json.loads(lines[0])["case_id"]
    shutil.rmtree(tmp_path / "b")             # not opened yet: the stream finds it gone, counts it
    assert len(list(stream)) == 1 and "unreadable file" in log.summary()


def test_table_views_make_the_same_tables_as_whole_records_and_hold_less():
    records, _ = read_all([OLD_LINES])
    shared: dict = {}
    views = [tables.table_view(r, shared) for r in records]
    for rows in (tables.summary_rows, tables.tolerance_rows, tables.bucket_rows, tables.coverage_rows,
                 tables.args_rows, tables.mix_rows):
        assert rows(views) == rows(records), rows.__name__
    assert all(v.case["inputs"] == () and v.versions is None and v.t_compile is None for v in views)
    assert sum(len(json.dumps(v.case)) for v in views) < sum(len(json.dumps(r.case)) for r in records) / 2
