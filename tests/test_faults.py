"""Fault injection: killed writers, torn tails, a full disk, shared histories, workers dying
while they start, damaged histories. Each checks that no record and no bucket is lost."""
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, make_case
from torchsim_diff.buckets import BucketStore
from torchsim_diff.check import Checker
from torchsim_diff.kinds import Kind, Status
from torchsim_diff.results import ResultsWriter, read_all, read_records

pytestmark = pytest.mark.slow


def _cli(*argv, env=None):
    """The console command in a subprocess, as users run it."""
    return subprocess.Popen([sys.executable, "-m", "torchsim_diff", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)


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


def test_a_torn_tail_is_cut_back_with_a_warning_and_the_next_record_survives(tmp_path):
    path = tmp_path / "results.jsonl"
    whole = "".join(json.dumps(_record(n)) + "\n" for n in range(4))
    path.write_text(whole + json.dumps(_record(4))[:37])
    warnings = []
    with ResultsWriter(str(path), warn=warnings.append) as writer:
        writer.write(_record(5))
    assert warnings == [f"{path}: dropped 37 bytes of a torn last record (a killed writer) before appending"]
    records, log = read_all([str(path)])
    assert [r["case_id"] for r in records] == ["c0", "c1", "c2", "c3", "c5"] and not log.skipped


def test_a_torn_tail_then_a_campaign_rerun_loses_nothing(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.jsonl").write_text(json.dumps(_record(0)) + "\n" + '{"route": "eager", "sta')
    proc = _cli("fuzz", "--routes", "eager", "--max-examples", "3", "--out", str(out), "--buckets", "none",
                "--no-reduce")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "dropped 23 bytes of a torn last record" in err
    records, log = read_all([str(out / "results.jsonl")])
    assert len(records) == 4 and records[0]["case_id"] == "c0" and not log.skipped


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
def _failing(bucket: str, nodes: int = 1) -> dict:
    case = make_case(nodes=[{"id": f"v{i}", "op": "relu", "args": ["x0"], "attrs": {}} for i in range(nodes)],
                     inputs=[("x0", [2], [1], 0, 2, {})], outputs=["v0"]).to_dict()
    return {"bucket": bucket, "route": "r", "kind": "wrong_values", "status": "fail", "message": "m", "case": case}


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


@pytest.mark.parametrize("content", ['{"schema": 1, "buckets": {"b": {"rou', "[1, 2, 3]", '{"buckets": 7}'],
                         ids=["truncated", "a list", "wrong shape"])
def test_a_damaged_json_history_is_moved_aside_not_replaced(tmp_path, capsys, content):
    legacy = tmp_path / "buckets.json"
    legacy.write_text(content)
    store = BucketStore(str(legacy))
    err = capsys.readouterr().err
    (moved,) = [p for p in os.listdir(tmp_path) if ".unreadable-" in p]
    assert (tmp_path / moved).read_text() == content and "moved aside" in err and err.count("\n") == 1
    assert store.add(_failing("b1"))


def test_a_json_history_is_imported_once(tmp_path):
    legacy = tmp_path / "buckets.json"
    entry = {"route": "r", "kind": "wrong_values", "op": "relu", "message": "m", "first_seen": "then",
             "count": 4, "size": [1, 1, 2], "case": _failing("b")["case"]}
    legacy.write_text(json.dumps({"schema": 1, "buckets": {"old": entry}}))
    assert BucketStore(str(legacy)).buckets["old"]["count"] == 4
    again = BucketStore(str(tmp_path / "buckets.sqlite"))
    assert not again.add(_failing("old")) and again.buckets["old"]["count"] == 5
    assert again.smallest_record("old")["case"] == entry["case"]


# -- workers that die while starting --------------------------------------------------------
@pytest.fixture
def start_counter(tmp_path, monkeypatch, double_routes):
    counter = tmp_path / "starts"
    monkeypatch.setenv("DOUBLE_START_COUNT", str(counter))
    return counter


def test_a_worker_killed_during_start_up_is_a_crash_at_start_and_is_retried(tmp_path, start_counter, monkeypatch,
                                                                             add_case):
    monkeypatch.setenv("DOUBLE_START_KILLS", "2")
    with Checker(out_dir=str(tmp_path / "run"), timeout_s=60) as checker:
        ok, reason, _ = checker.availability("double-dies-at-start")
        assert ok and "died during start-up" in reason and "SIGKILL" in reason
        first = checker.check(add_case, "double-dies-at-start")
        assert (first.status, first.kind, first.stage) == (Status.FAIL, Kind.CRASH, "start")
        assert checker.check(add_case, "double-dies-at-start").status == Status.PASS
    assert start_counter.read_text().count("start") == 3


def test_a_route_crashing_at_every_start_is_abandoned_and_the_run_is_not_clean(tmp_path, start_counter, monkeypatch,
                                                                               capsys):
    from torchsim_diff.cli import main
    from torchsim_diff.worker import client
    monkeypatch.setattr(client, "MAX_CRASHES_IN_A_ROW", 2)
    code = main(["fuzz", "--routes", "eager,double-dies-at-start", "--max-examples", "4", "--out",
                 str(tmp_path / "run"), "--buckets", "none", "--no-reduce"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("abandoned after 2 crashes in a row") == 1
    records, _ = read_all([str(tmp_path / "run" / "results.jsonl")])
    mine = [(r["status"], r["kind"], r["stage"]) for r in records if r["route"] == "double-dies-at-start"]
    assert mine == [("fail", "crash", "start")] * 2 + [("skipped", None, None)] * 2
    assert len([r for r in records if r["route"] == "eager" and r["status"] == "pass"]) == 4


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

    from torchsim_diff import oracle
    bad_shapes = make_case(nodes=[{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}],
                           inputs=[("x0", [2, 3], [3, 1], 0, 6, {}), ("x1", [4], [1], 0, 4, {})], outputs=["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        rejected = checker.check(bad_shapes, "eager")
        assert rejected.kind == Kind.INVALID_CASE and "eager rejects the program: RuntimeError" in rejected.message
        monkeypatch.setattr(oracle, "layout", types.SimpleNamespace())
        broken = checker.check(add_case, "eager")
    assert (broken.kind, broken.stage) == (Kind.TOOL_ERROR, "oracle") and "AttributeError" in broken.message
