"""Failed timing checks as buckets with reproducers, the known TOGSim defects in the ledger, and
the per-kernel timing table."""
import json
import os
import shlex

import pytest

from torchsim_diff.cli import main as cli_main
from torchsim_diff.report.tables import timing_rows
from torchsim_diff.timing import checks
from torchsim_diff.timing.kernel_timing import read_timings
from torchsim_diff.buckets.known_defects import BadDefect, known_defects
from torchsim_diff.timing.togsim_buckets import bucket_key, write_bucket
from torchsim_diff.timing.togsim_log import TOGSimFigures, parse_log
from torchsim_diff.timing.togsim_runner import availability
from torchsim_diff.buckets.causes import read_causes
from torchsim_diff.buckets.corpus import iter_entries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "togsim")
LEDGER = os.path.join(ROOT, "corpora", "known")
DEFECT = os.path.join(LEDGER, "togsim-vector-idle-not-accumulated")


def recorded(name):
    with open(os.path.join(FIXTURES, name)) as log:
        return parse_log(log.read())


@pytest.fixture
def run_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("tile_graph.onnx", "tile_graph.attr.json", "config.json"):
        (folder / name).write_text(name)
    return str(folder)


def command(folder):
    return shlex.join(["/opt/togsim/Simulator", "--config", f"{folder}/config.json", "--models_list",
                       f"{folder}/tile_graph.onnx", "--attributes_list", f"{folder}/tile_graph.attr.json"])


# -- bucket keys and folders ---------------------------------------------------------------
def test_the_key_is_check_outcome_and_message_without_numbers():
    slow = checks.dram_bound(recorded("gemm_c1.log"), 1.0)
    slower = checks.dram_bound(recorded("gemm_c2.log"), 2.0)
    assert not slow and not slower and bucket_key(slow) == bucket_key(slower)
    assert bucket_key(slow).startswith("togsim | dram_bound | ok | ")
    assert bucket_key(slow) != bucket_key(slow, "hang")


def test_a_bucket_folder_holds_the_tog_config_command_and_verdict(tmp_path, run_folder):
    verdict = checks.dram_bound(recorded("gemm_c1.log"), 1.0)
    bucket = write_bucket(str(tmp_path / "buckets"), verdict, run_folder, command(run_folder))
    assert sorted(os.listdir(bucket.folder)) == ["command.txt", "config.json", "tile_graph.attr.json",
                                                 "tile_graph.onnx", "verdict.json"]
    with open(os.path.join(bucket.folder, "command.txt")) as handle:
        assert handle.read() == ('"$TORCHSIM_DIFF_TOGSIM" --config config.json --models_list tile_graph.onnx '
                                 '--attributes_list tile_graph.attr.json\n')
    with open(os.path.join(bucket.folder, "verdict.json")) as handle:
        saved = json.load(handle)
    assert saved["check"] == "dram_bound" and saved["key"] == bucket.key and saved["known_defect"] == ""
    assert saved["figures"]["cycles"] == 10496


def test_the_first_failure_of_a_bucket_keeps_its_reproducer(tmp_path, run_folder):
    slow, slower = checks.dram_bound(recorded("gemm_c1.log"), 1.0), checks.dram_bound(recorded("gemm_c2.log"), 2.0)
    first = write_bucket(str(tmp_path), slow, run_folder, command(run_folder))
    again = write_bucket(str(tmp_path), slower, run_folder, command(run_folder))
    assert again.folder == first.folder
    with open(os.path.join(first.folder, "verdict.json")) as handle:
        assert json.load(handle)["figures"]["cycles"] == 10496


# -- the known TOGSim defect -----------------------------------------------------------------
def test_the_vector_idle_failure_is_the_known_defect(tmp_path, run_folder):
    known = known_defects(LEDGER)
    verdict = checks.units_accounted(recorded("vector_idle.log"))
    bucket = write_bucket(str(tmp_path), verdict, run_folder, command(run_folder), known=known)
    assert bucket.known == "togsim-vector-idle-not-accumulated"
    assert known[bucket.key].project == "TOGSim" and known[bucket.key].status == "no upstream issue found"


def test_a_vector_unit_active_past_its_work_or_the_run_is_the_known_finish_cycle_defect(tmp_path, run_folder):
    from torchsim_diff.timing.tog_kernels import ElementwiseTiling, elementwise
    known = known_defects(LEDGER)
    tog = elementwise(ElementwiseTiling(8, 8, 8, 8, inputs=1, elements_per_cycle=16, element_size=2))
    past_work = checks.units_work(recorded("vector_idle.log"), tog)
    # the triton-spike sort kernel: 903 vector instructions, each counted one cycle long
    core = recorded("vector_idle.log").cores[0]
    long_kernel = type(core)(0, 36047110, core.systolic_arrays, type(core.vector)(36047760, 0), core.dma, 0, {})
    past_run = checks.units_busy(TOGSimFigures(36047110, (long_kernel,), 1000, 32, 1.0))
    for verdict in (past_work, past_run):
        bucket = write_bucket(str(tmp_path), verdict, run_folder, command(run_folder), known=known)
        assert not verdict and bucket.known == "togsim-vector-active-counts-finish-cycle", verdict.message
    assert bucket_key(checks.units_busy(figures_with_dma_active(10**9))) not in known


def figures_with_dma_active(active: int) -> TOGSimFigures:
    core = recorded("vector_idle.log").cores[0]
    return TOGSimFigures(core.cycles, (type(core)(0, core.cycles, core.systolic_arrays, core.vector,
                                                  type(core.dma)(active, 0), 0, {}),), 1000, 32, 1.0)


def test_also_buckets_must_be_a_list_of_keys(tmp_path):
    (tmp_path / "togsim-x").mkdir()
    fields = dict(title="t", project="TOGSim", status="s", upstream="", bucket="k", also_buckets="k2")
    (tmp_path / "togsim-x" / "defect.json").write_text(json.dumps(fields))
    with pytest.raises(BadDefect, match="also_buckets must be a list"):
        known_defects(str(tmp_path))


def test_a_systolic_array_off_too_is_not_the_known_defect():
    figures = recorded("vector_idle.log")
    core = figures.cores[0]
    bad = type(core)(core.core, core.cycles, (type(core.vector)(1, 1),), core.vector, core.dma, 0, {})
    verdict = checks.units_accounted(type(figures)(figures.total_cycles, (bad,), 1000, 32, 1.0))
    assert bucket_key(verdict) not in known_defects(LEDGER)


@pytest.mark.parametrize("name,function", [("togsim-vector-idle-not-accumulated", "Core::update_stats"),
                                           ("togsim-vector-active-counts-finish-cycle", "Core::vu_cycle")])
def test_the_defect_folder_holds_its_minimal_reproducer(name, function):
    folder = os.path.join(LEDGER, name)
    names = set(os.listdir(folder))
    assert {"defect.json", "note.md", "tile_graph.onnx", "tile_graph.attr.json", "config.json", "command.txt"} <= names
    with open(os.path.join(folder, "note.md")) as handle:
        note = handle.read()
    assert function in note and "no upstream issue found" in note


def test_the_case_loaders_skip_defect_folders():
    assert not [err for _entry, err in iter_entries([DEFECT])]
    assert not [entry for entry, _err in iter_entries([DEFECT])]
    _causes, problems = read_causes(LEDGER)
    assert not [p for p in problems if "togsim-" in p]


def test_a_broken_defect_json_is_one_clear_error(tmp_path):
    (tmp_path / "togsim-x").mkdir()
    (tmp_path / "togsim-x" / "defect.json").write_text('{"title": 3}')
    with pytest.raises(BadDefect, match="defect.json: needs text fields"):
        known_defects(str(tmp_path))


# -- the timing table ----------------------------------------------------------------------
KERNEL = {"case_id": "c1", "kernel": "000_triton_poi_fused_add_0", "programs": 2, "instret": 900, "outcome": "ok",
          "seconds": 0.1, "cycles": 1200, "dram_ratio": 30.0, "compute_ratio": 2.5, "vector_utilisation": 0.4,
          "dma_utilisation": 0.01,
          "verdicts": [{"check": "dram_bound", "passed": True, "bucket": None, "known": None},
                       {"check": "units_accounted", "passed": False, "bucket": "b1",
                        "known": "togsim-vector-idle-not-accumulated"},
                       {"check": "more_cores", "passed": False, "bucket": "b2", "known": ""}]}


def test_timing_rows_show_cycles_bound_ratios_utilisation_and_failed_checks():
    row, = timing_rows([KERNEL])
    assert row["cycles"] == 1200 and row["cycles/dram bound"] == 30.0 and row["cycles/compute bound"] == 2.5
    assert row["vector util"] == 0.4 and row["failed checks"] == "units_accounted (known), more_cores"


def test_the_table_command_prints_the_timing_table(tmp_path, capsys):
    (tmp_path / "timing.jsonl").write_text(json.dumps(KERNEL) + "\n")
    assert cli_main(["table", str(tmp_path), "--tables", "timing", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "cycles/dram bound" in out and "000_triton_poi_fused_add_0" in out


def test_a_bad_timing_file_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "timing.jsonl").write_text('{"case_id": "c1"}\n')
    assert cli_main(["table", str(tmp_path), "--tables", "timing"]) == 2
    err = capsys.readouterr().err
    assert "timing.jsonl:1: not a kernel timing row" in err and "Traceback" not in err
    assert read_timings([str(tmp_path / "none")])[1].startswith("no timing.jsonl under")


# -- availability --------------------------------------------------------------------------
def test_togsim_is_unavailable_with_the_reason_when_the_variable_is_unset(tmp_path):
    assert availability({}) == (False, "TOGSim not configured: set TORCHSIM_DIFF_TOGSIM to the path of its "
                                       "`Simulator` binary")
    ok, reason = availability({"TORCHSIM_DIFF_TOGSIM": str(tmp_path / "missing")})
    assert not ok and "is not an executable file" in reason


def test_the_direct_fuzz_counts_the_vector_idle_failure_as_known_not_new():
    from benchmarks.fuzz_togsim import signature
    verdict = checks.units_accounted(recorded("vector_idle.log"))
    assert signature(verdict) in known_defects(LEDGER)
    failed_run = checks.Verdict("run", False, "crash: killed by SIGSEGV", {"outcome": "crash"})
    assert signature(failed_run).startswith("togsim | run | crash | ")
