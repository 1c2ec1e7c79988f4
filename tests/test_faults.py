"""Fault injection: killed writers, torn tails, a full disk, shared histories, workers dying
while they start, damaged histories, route workers killed from outside (at start-up, mid-case,
mid-reduction), SIGINT, SIGTERM and SIGHUP mid-campaign. Each checks that no record and no bucket is
lost, and that no bucket is filed for a fault of ours or of the machine's."""
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO, make_case
from torchsim_diff.buckets.bucket_history import BucketStore
from torchsim_diff.run.checker import Checker
from torchsim_diff.results.kinds import Kind, Status
from torchsim_diff.results.jsonl import ResultsWriter, StorageError, read_all, read_records
from torchsim_diff.results.record import Record

pytestmark = [pytest.mark.slow, pytest.mark.e2e]   # whole campaigns: the e2e set (.ci/run)


def _cli(*argv, env=None):
    """The console command in a subprocess, as users run it from a terminal: with SIGINT's and
    SIGHUP's default actions, which a test run started in the background by a shell (or under
    nohup) lacks (it inherits them ignored, and so would the command)."""
    return subprocess.Popen([sys.executable, "-m", "torchsim_diff", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env, preexec_fn=_default_signals)


def _default_signals():
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _lines(path) -> list:
    with open(path, "rb") as handle:
        return handle.read().split(b"\n")


def _record(n: int) -> dict:
    return {"case_id": f"c{n}", "route": "eager", "status": "pass", "kind": None, "bucket": None, "ops": ["relu"],
            "case": None, "message": "x" * 50}


def _wait_for_records(path, n: int, proc, limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(path) and len(list(read_records(str(path)))) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"no {n} records in {path} (campaign exit {proc.poll()})")


# -- results.jsonl ----------------------------------------------------------------------
@pytest.mark.e2e
def test_sigkill_mid_campaign_then_a_rerun_into_the_same_folder_keeps_every_record(tmp_path):
    out = tmp_path / "run"
    proc = _cli("fuzz", "--routes", "eager", "--max-examples", "500", "--out", str(out), "--buckets", "none",
                "--no-reduce")
    _wait_for_records(out / "results.jsonl", 3, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before, log = read_all([str(out / "results.jsonl")])
    assert len(before) >= 3 and not log.skipped
    rerun = _cli("fuzz", "--routes", "eager", "--max-examples", "3", "--out", str(out), "--buckets", "none",
                 "--no-reduce", "--seed", "5")
    _, err = rerun.communicate(timeout=600)
    assert rerun.returncode == 0, err
    after, log = read_all([str(out / "results.jsonl")])
    assert after[:len(before)] == before and len(after) == len(before) + 3 and not log.skipped


def test_a_torn_tail_is_moved_aside_with_a_warning_and_the_next_record_survives(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = "".join(json.dumps(_record(n)) + "\n" for n in range(4))
    torn = json.dumps(_record(4))[:37]
    path.write_text(whole + torn)
    warnings = []
    with ResultsWriter(str(path), warn=warnings.append) as writer:
        writer.write(Record.from_dict(_record(5)))
    assert warnings == [f"{path}: moved 37 bytes of a torn last record (a killed writer) to results.jsonl.torn "
                        "before appending"]
    records, log = read_all([str(path)])
    assert [r.case_id for r in records] == ["c0", "c1", "c2", "c3", "c5"] and not log.skipped
    assert (tmp_path / "results.jsonl.torn").read_text() == torn + "\n"        # never deleted


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    # an edited or concatenated results file: its last record is whole, only its newline is missing
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_record(0)) + "\n" + json.dumps(_record(1)))
    warnings = []
    with ResultsWriter(str(path), warn=warnings.append) as writer:
        writer.write(Record.from_dict(_record(2)))
    records, log = read_all([str(path)])
    assert [r.case_id for r in records] == ["c0", "c1", "c2"] and not log.skipped
    assert "kept, with one added" in warnings[0] and not (tmp_path / "results.jsonl.torn").exists()


def test_a_results_file_that_is_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path):
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not ours\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").symlink_to(elsewhere)
    with pytest.raises(StorageError, match="symbolic link"):
        ResultsWriter(str(tmp_path / "run" / "results.jsonl"))
    assert elsewhere.read_text() == "not ours\n"


def test_a_line_with_an_integer_too_long_to_read_is_skipped_and_counted(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(_record(0)) + "\n" + '{"case_id": ' + "9" * 5000 + "}\n")
    records, log = read_all([str(path)])
    assert [r.case_id for r in records] == ["c0"] and "a number too long to read" in log.summary()


def test_a_torn_tail_then_a_campaign_rerun_loses_nothing(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps(_record(0)) + "\n" + '{"route": "eager", "sta')
    proc = _cli("fuzz", "--routes", "eager", "--max-examples", "3", "--out", str(out), "--buckets", "none",
                "--no-reduce")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "moved 23 bytes of a torn last record" in err
    records, log = read_all([str(out / "results.jsonl")])
    assert len(records) == 4 and records[0].case_id == "c0" and not log.skipped


def test_readers_say_how_many_lines_they_skipped_and_why(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(json.dumps(_record(0)).encode() + b'\n[1, 2]\n{"b": \n\xff\xfe\n\n')
    records, log = read_all([str(path)])
    assert len(records) == 1
    summary = log.summary()
    assert summary.startswith("skipped 3 unreadable line(s)") and "not JSON" in summary and "not UTF-8" in summary


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 96 KiB tmpfs (root only), unmounted afterwards."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a full disk is simulated with a small tmpfs, which needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_ends_the_run_with_one_line_saying_what_was_saved(small_tmpfs):
    out = small_tmpfs / "run"
    proc = _cli("fuzz", "--routes", "eager", "--max-examples", "400", "--out", str(out), "--buckets", "none",
                "--no-reduce")
    stdout, err = proc.communicate(timeout=600)
    errors = [line for line in err.splitlines() if line.startswith("torchsim-diff: error:")]
    assert proc.returncode == 2 and "Traceback" not in err + stdout, err
    assert len(errors) == 1 and "No space left on device" in errors[0]
    saved = int(errors[0].split("the ")[-1].split(" records")[0])
    records, log = read_all([str(out / "results.jsonl")])
    assert len(records) == saved > 0 and not log.skipped          # no torn record left behind


# -- bucket history ---------------------------------------------------------------------------
def _failing(bucket: str, nodes: int = 1) -> Record:
    case = make_case(nodes=[{"id": f"v{i}", "op": "relu", "args": ["x0"], "attrs": {}} for i in range(nodes)],
                     inputs=[("x0", [2], [1], 0, 2, {})], outputs=["v0"]).to_dict()
    return Record(bucket=bucket, route="r", kind="wrong_values", status="fail", message="m", case=case)


def _add_many(path: str, bucket: str, n: int) -> None:
    store = BucketStore(path)
    for _ in range(n):
        store.add(_failing("shared"))
    store.add(_failing(bucket))


def test_two_processes_sharing_a_history_lose_no_update(tmp_path):
    path = str(tmp_path / "buckets.sqlite")
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_add_many, args=(path, name, 150)) for name in ("only-a", "only-b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    buckets = BucketStore(path).buckets
    assert set(buckets) == {"shared", "only-a", "only-b"} and buckets["shared"]["count"] == 300


def test_processes_starting_at_once_on_a_new_history_both_open_it(tmp_path):
    """Two processes open each of 40 new histories at the same instant. Without the folder lock
    (buckets.history_file._opening) about one pair in nine failed on SQLite's switch to WAL mode
    ("database is locked"), and a check of a half-made file could set it aside with its buckets."""
    from tests.doubles.history_openers import open_each
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    workers = [ctx.Process(target=open_each, args=(str(tmp_path), 40, name, barrier)) for name in ("a", "b")]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    for k in range(40):
        folder = tmp_path / f"history{k}"
        assert set(BucketStore(str(folder / "buckets.sqlite"), read_only=True).buckets) == {"a", "b"}
        assert not [name for name in os.listdir(folder) if "unreadable" in name]


def test_reading_a_history_in_the_process_that_writes_it_keeps_sqlites_locks(tmp_path):
    """A campaign reads its history again (its standing) while its writer is open. Opening the file
    by a plain descriptor to check it, then closing that, dropped SQLite's locks: the other campaign's
    last close then deleted the log under this one, and the next run read "malformed" (seen in CI)."""
    from tests.doubles.history_openers import add_one
    path = str(tmp_path / "buckets.sqlite")
    writer = BucketStore(path)
    writer.add(_failing("a"))
    BucketStore(path, read_only=True).close()
    other = multiprocessing.get_context("spawn").Process(target=add_one, args=(path, "b"))
    other.start()
    other.join(120)
    assert other.exitcode == 0
    assert os.path.exists(path + "-wal"), "the other process's close found itself the last connection"
    writer.add(_failing("c"))
    writer.close()
    assert set(BucketStore(path, read_only=True).buckets) == {"a", "b", "c"}


def test_a_bucket_a_killed_run_left_unchecked_is_new_again_until_settled(tmp_path):
    path = str(tmp_path / "buckets.sqlite")
    killed = BucketStore(path)
    assert killed.add(_failing("b1"))         # new; the run is then killed during its self-check
    killed.close()
    again = BucketStore(path)
    assert again.add(_failing("b1")) and again.new == {"b1"}     # met again: new, checked again
    again.settle("b1")                         # its self-check confirmed it
    again.close()
    assert not BucketStore(path).add(_failing("b1"))             # seen from now on
    assert BucketStore(path).buckets["b1"]["count"] == 3


@pytest.mark.e2e
def test_two_concurrent_campaigns_on_one_history_keep_both_buckets(tmp_path, double_routes):
    history = str(tmp_path / "buckets.sqlite")
    env = dict(os.environ)
    runs = [_cli("fuzz", "--routes", route, "--ops", op, "--max-examples", "3", "--out", str(tmp_path / route),
                 "--buckets", history, "--no-reduce", env=env)
            for route, op in (("double-wrong-element", "relu"), ("double-raising", "exp"))]
    outputs = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [1, 1], outputs
    assert all("1 new bucket(s)" in out for out, _ in outputs)
    kinds = sorted(entry["kind"] for entry in BucketStore(history).buckets.values())
    assert kinds == ["compile_error", "wrong_values"]


def test_a_damaged_history_is_moved_aside_with_a_warning_never_overwritten(tmp_path, capsys):
    path = tmp_path / "buckets.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x13" * 500)
    store = BucketStore(str(path))
    err = capsys.readouterr().err
    (moved,) = [p for p in os.listdir(tmp_path) if ".unreadable-" in p]
    assert err.count("\n") == 1 and str(tmp_path / moved) in err and "moved aside" in err
    assert (tmp_path / moved).read_bytes() == b"SQLite format 3\x00" + b"\x13" * 500
    assert store.add(_failing("b1")) and set(BucketStore(str(path)).buckets) == {"b1"}


@pytest.mark.parametrize("content", ['{"schema": 1, "buckets": {"b": {"rou', '{"buckets": {"b": {"route": "r"}}}'],
                         ids=["truncated", "an entry without its fields"])
def test_a_damaged_json_history_is_moved_aside_not_replaced(tmp_path, capsys, content):
    legacy = tmp_path / "buckets.json"
    legacy.write_text(content)
    store = BucketStore(str(legacy))
    err = capsys.readouterr().err
    (moved,) = [p for p in os.listdir(tmp_path) if ".unreadable-" in p]
    assert (tmp_path / moved).read_text() == content and "moved aside" in err and err.count("\n") == 1
    assert store.add(_failing("b1"))


@pytest.mark.parametrize("content", ["[1, 2, 3]", '{"buckets": 7}'], ids=["a list", "no buckets object"])
def test_a_json_file_of_another_shape_is_refused_never_renamed(tmp_path, content):
    from torchsim_diff.results.jsonl import StorageError
    legacy = tmp_path / "buckets.json"
    legacy.write_text(content)
    with pytest.raises(StorageError, match="is no JSON history torchsim-diff made"):
        BucketStore(str(legacy))
    assert not [p for p in os.listdir(tmp_path) if "unreadable" in p] and legacy.read_text() == content


def test_a_json_history_is_imported_once(tmp_path):
    legacy = tmp_path / "buckets.json"
    entry = {"route": "r", "kind": "wrong_values", "op": "relu", "message": "m", "first_seen": "then",
             "count": 4, "size": [1, 1, 2], "case": _failing("b").case}
    legacy.write_text(json.dumps({"schema": 1, "buckets": {"old": entry}}))
    assert BucketStore(str(legacy)).buckets["old"]["count"] == 4
    again = BucketStore(str(tmp_path / "buckets.sqlite"))
    assert not again.add(_failing("old")) and again.buckets["old"]["count"] == 5
    assert again.smallest_record("old").case == entry["case"]


# -- workers that die while starting --------------------------------------------------------
@pytest.fixture
def start_counter(tmp_path, monkeypatch, double_routes):
    counter = tmp_path / "starts"
    monkeypatch.setenv("DOUBLE_START_COUNT", str(counter))
    return counter


def test_a_worker_killed_during_start_up_whose_case_then_passes_is_a_tool_error_not_a_crash(
        tmp_path, start_counter, monkeypatch, add_case):
    monkeypatch.setenv("DOUBLE_START_KILLS", "2")       # the probe's start, then the case's
    with Checker(out_dir=str(tmp_path / "run"), timeout_s=60) as checker:
        ok, reason, _ = checker.availability("double-dies-at-start")
        assert ok and "died during start-up" in reason and "SIGKILL" in reason
        first = checker.check(add_case, "double-dies-at-start")
        assert (first.status, first.kind, first.stage, first.bucket) == (Status.SKIPPED, Kind.TOOL_ERROR, "start", None)
        assert "killed by SIGKILL from outside while it started" in first.message and "passed" in first.message
        assert checker.check(add_case, "double-dies-at-start").status == Status.PASS
    assert start_counter.read_text().count("start") == 3


def test_a_worker_killed_again_when_its_case_runs_on_a_fresh_one_is_the_cases_crash(tmp_path, start_counter,
                                                                                    monkeypatch, add_case):
    # the OOM killer kills the same case's worker each time: the death is the case's doing
    monkeypatch.setenv("DOUBLE_START_KILLS", "3")
    with Checker(out_dir=str(tmp_path / "run"), timeout_s=60) as checker:
        checker.availability("double-dies-at-start")
        first = checker.check(add_case, "double-dies-at-start")
        assert (first.status, first.kind, first.stage) == (Status.FAIL, Kind.CRASH, "start")
        assert "SIGKILL" in first.message and checker.workers["double-dies-at-start"].crashes_in_a_row == 1
        assert checker.check(add_case, "double-dies-at-start").status == Status.PASS
    assert start_counter.read_text().count("start") == 4


@pytest.mark.e2e
def test_a_route_crashing_at_every_start_is_abandoned_and_the_run_is_not_clean(tmp_path, start_counter, monkeypatch,
                                                                               capsys):
    """Its crashes are findings (confirmed: repro.py's fresh worker dies at start too), so the
    run exits 1, and the summary says the route could not be tested to the end."""
    from torchsim_diff.cli import EXIT_FINDINGS, main
    from torchsim_diff.worker import client
    monkeypatch.setattr(client, "MAX_CRASHES_IN_A_ROW", 2)
    code = main(["fuzz", "--routes", "eager,double-dies-at-start", "--max-examples", "4", "--out",
                 str(tmp_path / "run"), "--buckets", "none", "--no-reduce"])
    captured = capsys.readouterr()
    assert code == EXIT_FINDINGS
    assert captured.err.count("abandoned after 2 crashes in a row") == 1
    assert "route double-dies-at-start could not be tested to the end" in captured.out
    records, _ = read_all([str(tmp_path / "run" / "results.jsonl")])
    mine = [(r.status, r.kind, r.stage) for r in records if r.route == "double-dies-at-start"]
    assert mine == [("fail", "crash", "start")] * 2 + [("skipped", None, "abandoned")] * 2
    assert len([r for r in records if r.route == "eager" and r.status == "pass"]) == 4


def test_crashes_reported_by_a_live_worker_never_abandon_the_route(tmp_path, double_routes, monkeypatch, add_case):
    from torchsim_diff.worker import client
    monkeypatch.setattr(client, "MAX_CRASHES_IN_A_ROW", 2)
    with Checker(out_dir=str(tmp_path / "run"), timeout_s=60) as checker:
        verdicts = [checker.check(add_case, "double-reports-trap") for _ in range(4)]
    assert [(v.status, v.kind, v.stage) for v in verdicts] == [(Status.FAIL, Kind.CRASH, "run")] * 4
    assert "Spike trap" in verdicts[-1].message


# -- our own faults are tool_error ------------------------------------------------------------
def test_an_exception_in_a_route_adapter_of_ours_is_a_tool_error_with_its_traceback(tmp_path, double_routes,
                                                                                    add_case):
    with Checker(out_dir=str(tmp_path)) as checker:
        verdict = checker.check(add_case, "double-adapter-bug")
    assert (verdict.kind, verdict.stage) == (Kind.TOOL_ERROR, "compile")
    assert "not a compiler finding" in verdict.message and "KeyError" in verdict.message
    traceback_text = open(os.path.join(verdict.artifact_dir, "tool_error.txt")).read()
    assert "layout.py" in traceback_text and "tool_error.txt" in verdict.artifacts


def test_an_exception_in_the_oracle_is_a_tool_error_and_eager_rejecting_is_invalid_case(tmp_path, monkeypatch,
                                                                                        add_case):
    import types

    from torchsim_diff.judge import oracle
    bad_shapes = make_case(nodes=[{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}],
                           inputs=[("x0", [2, 3], [3, 1], 0, 6, {}), ("x1", [4], [1], 0, 4, {})], outputs=["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        rejected = checker.check(bad_shapes, "eager")
        assert rejected.kind == Kind.INVALID_CASE and "eager rejects the program: RuntimeError" in rejected.message
        monkeypatch.setattr(oracle, "layout", types.SimpleNamespace())
        broken = checker.check(add_case, "eager")
    assert (broken.kind, broken.stage) == (Kind.TOOL_ERROR, "oracle") and "AttributeError" in broken.message


# -- route workers killed from outside: at start-up, mid-case, mid-reduction ------------------
@pytest.fixture
def fault_routes(tmp_path, monkeypatch, double_routes):
    """tests/fault_routes.py's doubles registered too; returns the file their marks go to."""
    from tests.fault_routes import FAULT_DOUBLES
    from torchsim_diff.routes import EXTRA_ROUTES_ENV
    routes = {**double_routes, **FAULT_DOUBLES}
    monkeypatch.setenv(EXTRA_ROUTES_ENV, ",".join(f"{name}={target}" for name, target in routes.items()))
    marks = tmp_path / "marks"
    monkeypatch.setenv("DOUBLE_MARK", str(marks))
    return marks


class Killer(threading.Thread):
    """Follows the marks file of tests/fault_routes.py and kills (SIGKILL, as `kill -9` does)
    the worker that wrote a mark when `aim(words, killer)` picks it, at most `most` times.
    A kill sent on reading the mark lands while the double pauses: mid start-up or mid-case."""

    def __init__(self, marks, aim, most: int):
        super().__init__(daemon=True)
        self.marks, self.aim, self.most = marks, aim, most
        self.killed: list = []          # the marks acted on
        self.seen = self.seen_at_last_kill = 0
        self._done = threading.Event()

    def run(self):
        offset = 0
        while not self._done.is_set():
            if self.marks.exists():
                with open(self.marks) as handle:
                    handle.seek(offset)
                    text = handle.read()
                whole = text[:text.rfind("\n") + 1]
                offset += len(whole)
                for line in whole.splitlines():
                    self.seen += 1
                    words = line.split()
                    if len(self.killed) < self.most and self.aim(words, self):
                        os.kill(int(words[1]), signal.SIGKILL)
                        self.killed.append(words)
                        self.seen_at_last_kill = self.seen
            time.sleep(0.01)

    def case_ids(self) -> set:
        return {words[2] for words in self.killed if words[0] == "case"}

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self.join()


def _fuzz_here(tmp_path, route: str, *options):
    """`torchsim-diff fuzz` in this process (so the test can watch it): exit status, records,
    the bucket history's buckets and the run folder."""
    from torchsim_diff.cli import main
    out, history = tmp_path / "run", tmp_path / "buckets.sqlite"
    code = main(["fuzz", "--routes", route, "--out", str(out), "--buckets", str(history), "--known-bugs", "none",
                 *options])
    records, log = read_all([str(out / "results.jsonl")])
    assert not log.skipped
    return code, records, BucketStore(str(history)).buckets, out


def _statuses(records) -> list:
    return sorted((r.status, r.kind, r.stage) for r in records)


@pytest.mark.parametrize("run", range(3))
def test_a_worker_killed_during_start_up_costs_only_its_case_and_files_no_bucket(tmp_path, fault_routes,
                                                                                 monkeypatch, run):
    monkeypatch.setenv("DOUBLE_SETUP_S", "1")
    # the worker's first set-up (the first case's), not the re-run's on a fresh worker
    with Killer(fault_routes, lambda words, k: words[0] == "setup", most=1) as killer:
        code, records, buckets, out = _fuzz_here(tmp_path, "double-marked", "--max-examples", "4", "--max-nodes", "1",
                                                 "--seed", str(run))
    assert len(killer.killed) == 1
    assert code == 0 and buckets == {} and not (out / "bundles").exists()
    assert _statuses(records) == [("pass", None, None)] * 3 + [("skipped", "tool_error", "start")]


@pytest.mark.e2e
def test_workers_killed_mid_case_three_times_cost_only_their_cases(tmp_path, fault_routes, monkeypatch):
    monkeypatch.setenv("DOUBLE_CASE_S", "0.3")

    def mid_case(words, killer):      # a case not killed before (not a re-run), 3 marks after the last kill
        return words[0] == "case" and words[2] not in killer.case_ids() and killer.seen - killer.seen_at_last_kill >= 3

    with Killer(fault_routes, mid_case, most=3) as killer:
        code, records, buckets, out = _fuzz_here(tmp_path, "double-marked", "--max-examples", "10", "--max-nodes",
                                                 "1", "--seed", "3")
    assert len(killer.killed) == 3
    assert code == 0 and buckets == {} and not (out / "bundles").exists()
    assert _statuses(records) == [("pass", None, None)] * 7 + [("skipped", "tool_error", "run")] * 3
    killed = [r for r in records if r.kind == "tool_error"]
    assert {r.case_id for r in killed} == killer.case_ids()
    assert all("killed by SIGKILL from outside while it ran the case" in r.message for r in killed)


@pytest.mark.e2e
def test_workers_killed_mid_reduction_three_times_leave_the_findings_as_they_were(tmp_path, fault_routes,
                                                                                  monkeypatch, no_planted_edges):
    from torchsim_diff.triage.refine import ReduceThenBucket
    monkeypatch.setenv("DOUBLE_CASE_S", "0.1")
    options = ("--max-examples", "4", "--max-nodes", "3", "--seed", "1", "--reduce-budget", "600")
    undisturbed = _fuzz_here(tmp_path / "undisturbed", "double-marked-wrong", *options)
    reducing = []                       # the failure being reduced, while it is
    reduce_and_classify = ReduceThenBucket._reduce_and_classify

    def marking(refiner, verdict, *rest):
        reducing.append(verdict.case.case_id)
        try:
            return reduce_and_classify(refiner, verdict, *rest)
        finally:
            reducing.clear()

    monkeypatch.setattr(ReduceThenBucket, "_reduce_and_classify", marking)

    def mid_reduction(words, killer):
        """The reducer's first run (the failure again), then two others 2 marks apart; never a re-run."""
        return (words[0] == "case" and reducing and words[2] not in killer.case_ids()
                and (words[2] in reducing if not killer.killed else killer.seen - killer.seen_at_last_kill >= 2))

    with Killer(fault_routes, mid_reduction, most=3) as killer:
        code, records, buckets, out = _fuzz_here(tmp_path, "double-marked-wrong", *options)
    assert len(killer.killed) == 3
    assert code == undisturbed[0] == 1
    assert _verdicts(records) == _verdicts(undisturbed[1]) and len(records) == 4
    assert {r.status for r in records} == {"fail"}        # the double fails every case (kinds as undisturbed)
    assert buckets.keys() == undisturbed[2].keys() and sorted(os.listdir(out / "bundles")) == sorted(buckets)


def _verdicts(records) -> list:
    return sorted((r.case_id, r.status, r.kind, r.bucket, r.trigger, json.dumps(r.reduced_case)) for r in records)


def test_a_failure_that_does_not_fail_again_is_kept_as_found_and_the_run_goes_on(tmp_path, add_case):
    from torchsim_diff.run.checker import Verdict
    from torchsim_diff.triage.refine import ReduceThenBucket
    flaky = Verdict(add_case, "eager", Status.FAIL, Kind.CRASH, "run", "worker killed by SIGSEGV")
    with Checker(out_dir=str(tmp_path)) as checker:
        fields = ReduceThenBucket(checker, budget_s=30).refine(flaky)
    assert "does not fail on route 'eager'" in fields["reduce_error"]
    assert flaky.failed and flaky.bucket is not None and flaky.refined is None     # in its raw bucket


# -- SIGINT, SIGTERM and SIGHUP -----------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)],
                         ids=["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_signal_mid_campaign_leaves_whole_records_and_prints_the_summary(tmp_path, fault_routes, monkeypatch,
                                                                           signum, status):
    monkeypatch.setenv("DOUBLE_CASE_S", "2")        # the case in flight must not be waited for
    out = tmp_path / "run"
    proc = _cli("fuzz", "--routes", "double-marked", "--max-examples", "500", "--max-nodes", "1", "--out", str(out),
                "--buckets", str(tmp_path / "buckets.sqlite"), "--no-reduce")
    _wait_for_records(out / "results.jsonl", 2, proc)
    time.sleep(0.5)                                  # into the next case
    sent = time.monotonic()
    proc.send_signal(signum)
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == status, err
    assert time.monotonic() - sent < 30 and "Traceback" not in err
    lines = [line for line in _lines(out / "results.jsonl") if line]
    records = [Record.from_dict(json.loads(line)) for line in lines]     # every line whole
    assert len(records) >= 2 and {r.status for r in records} == {"pass"}
    assert "Summary" in stdout
    name = signal.Signals(signum).name
    assert (f"{len(records)} cases ({len(records)} route runs, 0 skipped), results in {out / 'results.jsonl'} "
            f"(interrupted by {name})") in stdout


PYTEST_SUITE = '''
from hypothesis import given, seed
from torchsim_diff.generate.strategies import cases

def test_fuzz(torchsim_session, fuzz_route):
    torchsim_session.require(fuzz_route)

    @seed(torchsim_session.fuzz_seed(fuzz_route))
    @torchsim_session.settings()
    @given(case=cases(ops=["relu", "exp"], max_nodes=1))
    def run_case(case):
        torchsim_session.check(case, fuzz_route)
    run_case()
'''


@pytest.mark.e2e
def test_sigterm_ends_a_pytest_fuzz_run_with_its_report_and_whole_records(tmp_path, fault_routes, monkeypatch):
    monkeypatch.setenv("DOUBLE_CASE_S", "2")
    (tmp_path / "test_suite.py").write_text(PYTEST_SUITE)
    report = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_suite.py", "--routes",
                             "double-marked", "--fuzz-examples", "1000", "--report-dir", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    _wait_for_records(report / "results-main.jsonl", 2, proc)
    time.sleep(1.0)     # into the next case's 2 s run, past its draw (whose traceback pytest cannot always print)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, stdout + err
    assert time.monotonic() - sent < 60
    records = [Record.from_dict(json.loads(line)) for line in _lines(report / "results-main.jsonl") if line]
    assert len(records) >= 2 and {r.status for r in records} == {"pass"}      # every line whole
    assert "SIGTERM received" in stdout and "Summary" in stdout and f"HTML report: {report / 'report.html'}" in stdout
