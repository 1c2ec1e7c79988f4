"""Reports in each upstream's own terms: the checklist a written bundle is held to (report.checklist),
indices compared by the values they pick, drafts that fit the thread's state, quoted output
summarised and free of this machine's paths, and a cause's record of its upstream search."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, make_case
from torchsim_diff.report import bundles, checklist, quoted_output
from torchsim_diff.results.record import Record
from torchsim_diff.buckets import causes as ledger
from torchsim_diff.report.cause_analysis import analysis
from torchsim_diff.buckets.corpus import CorruptEntry

URL = "https://github.com/pytorch/pytorch/issues/1"


def _argmax_case():
    return make_case(nodes=[{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}},
                            {"id": "v1", "op": "argmax", "args": ["v0"], "attrs": {"dim": 0, "keepdim": False}}],
                     inputs=[("x0", [3], [1], 0, 3, {})], outputs=["v1"])


def _record(case, **fields) -> Record:
    base = dict(route="eager", kind="wrong_values", bucket="0123456789", op="argmax", message="output 0: differs",
                case=case.to_dict(), artifacts=None)
    return Record(**{**base, **fields})


@pytest.fixture
def bundle(tmp_path):
    case = _argmax_case()
    return bundles.write_bundle(_record(case), str(tmp_path / "b"))


def _edit(bundle: str, name: str, change) -> None:
    path = os.path.join(bundle, name)
    text = open(path).read() if os.path.exists(path) else ""
    open(path, "w").write(change(text))


def test_a_written_bundle_meets_the_checklist(bundle):
    assert checklist.problems(bundle) == []
    script = open(os.path.join(bundle, "repro.py")).read()
    assert "def picked_0(indices, x0)" in script and "atol=0.0" not in script and "atol=0)" not in script


@pytest.mark.parametrize("name,change,problem", [
    ("repro.py", lambda t: t.replace("def picked_0(", "def unused_0("), "compares the indices"),
    ("repro.py", lambda t: t.replace("TOLERANCES = [dict()]  # the values", "TOLERANCES = [dict(rtol=0, atol=0)]"
                                     "  # float32: the values"), "atol=0"),
    ("triton_shims.py", lambda t: "pass\n" * 61, "61 lines"),
    ("ISSUE.md", lambda t: t + f"\nTraceback: {os.path.join(REPO, 'torchsim_diff', 'cli.py')}\n", "path of this machine"),
    ("repro.py", lambda t: t + "\nsaved = torch.load('inputs.pt')\n", "weights_only"),
    ("ISSUE.md", lambda t: t.replace("template=bug-report.yml", "template=pt2-bug-report.yml"), "ablation"),
    ("ISSUE.md", lambda t: t.split("\n", 1)[1], "names no template"),
])
def test_each_checklist_rule_can_fail(bundle, name, change, problem):
    _edit(bundle, name, change)
    found = checklist.problems(bundle)
    assert len(found) == 1 and problem in found[0], found


@pytest.mark.parametrize("picked,verdict", [(2, 0), (0, 1)])
def test_an_index_is_compared_by_the_value_it_picks_so_a_tie_passes(bundle, picked, verdict):
    """argmax(-x) over x = [3, 1, 1]: eager picks index 1 of -x = [-3, -1, -1]. A compiled
    program that picks index 2 (an equal value) passes; one that picks index 0 reproduces."""
    _edit(bundle, "repro.py", lambda t: t.replace(
        "compiled = program", f"compiled = lambda x0: (torch.tensor({picked}),)"))
    # inputs with a tie at the maximum: -x = [-3, -1, -1]
    _edit(bundle, "repro.py", lambda t: _with_inputs(t, "[3., 1., 1.]"))
    done = subprocess.run([sys.executable, "repro.py"], cwd=bundle, capture_output=True, text=True, timeout=120)
    assert done.returncode == verdict, done.stdout + done.stderr
    if verdict:
        assert "indices: eager 1, compiled 0" in done.stdout, done.stdout


def _with_inputs(script: str, literal: str) -> str:
    start = script.index("x0 = torch.tensor(") + len("x0 = torch.tensor(")
    return script[:start] + literal + script[script.index(", dtype=", start):]


@pytest.mark.parametrize("status,mark", [("reported", "<!-- A comment for " + URL),
                                         ("fixed", "<!-- Re-test of the fix of " + URL),
                                         ("new", "<!-- File at https://")])
def test_the_draft_fits_the_threads_state(tmp_path, status, mark):
    case = _argmax_case()
    written = bundles.write_bundle(_record(case, upstream=URL), str(tmp_path / "b"), status=status)
    issue = open(os.path.join(written, "ISSUE.md")).read()
    assert issue.startswith(mark)
    assert ("### 🐛 Describe the bug" in issue) == (status == "new")      # a comment has no template sections
    assert (f"Related: {URL}" in issue) == (status == "new")


def test_long_output_is_summarised_with_its_most_repeated_line():
    text = "start\n" + "failed to get softmax result\n" * 100_000 + "the end\n"
    quoted = quoted_output.summarised(text)
    lines = quoted.splitlines()
    assert len(lines) == quoted_output.HEAD_LINES + 1 + quoted_output.TAIL_LINES
    assert lines[0] == "start" and lines[-1] == "the end"
    assert "lines left out; the most repeated (99962 times): failed to get softmax result" in quoted
    assert quoted_output.summarised("a\nb\n") == "a\nb"


def test_quoted_output_names_no_path_of_this_machine(tmp_path):
    out = f"REPRODUCES\n  File \"{os.path.join(sys.prefix, 'lib', 'x.py')}\"\n{REPO}/torchsim_diff/cli.py\n"
    quoted = quoted_output.quoted(1, "", out, str(tmp_path))     # no verdict on stdout: stderr is quoted
    assert sys.prefix not in quoted and REPO not in quoted
    assert "<python-env>" in quoted and "<torchsim-diff>/torchsim_diff/cli.py" in quoted and quoted.endswith("# 1")
    assert "[stderr]" not in quoted_output.quoted(1, "REPRODUCES\n", "a warning\n")


CAUSE = {"title": "t", "project": "pytorch", "status": "new", "summary": "What is known."}
SEARCH = {"date": "2026-12-06", "queries": ["inductor argmax permuted"],
          "nearest": [{"url": URL, "title": "argmax", "state": "open", "relation": "related: another op"}]}


def _cause_folder(tmp_path, add_case, cause) -> str:
    folder = tmp_path / "known" / "a-cause"
    folder.mkdir(parents=True)
    (folder / ledger.CAUSE_FILE).write_text(json.dumps(cause))
    (folder / "on-inductor.json").write_text(json.dumps({
        "route": "inductor", "kind": "wrong_values", "bucket": "0123456789",
        "signature": "inductor|wrong_values|relu|output", "cause": "inductor|wrong_values|relu|strided",
        "case": add_case.to_dict()}))
    return str(folder)


def test_a_new_causes_draft_says_how_upstream_was_searched(tmp_path, add_case):
    cause = ledger.read_cause(_cause_folder(tmp_path, add_case, {**CAUSE, "search": SEARCH}))
    assert cause.search.nearest[0].relation == "related: another op"
    text = analysis(cause, cause.representative())
    assert f"Searched for an existing report on 2026-12-06 (1 queries); nearest: {URL} (related: another op)." in text


@pytest.mark.parametrize("search", [[], {"date": "x", "queries": "q", "nearest": []},
                                    {**SEARCH, "nearest": [{"url": "file:///etc/passwd", "title": "", "state": "",
                                                            "relation": ""}]}])
def test_a_malformed_search_record_is_one_line(tmp_path, add_case, search):
    with pytest.raises(CorruptEntry, match="search"):
        ledger.read_cause(_cause_folder(tmp_path, add_case, {**CAUSE, "search": search}))


def test_every_cause_in_the_ledger_records_its_upstream_search():
    causes, problems = ledger.read_causes(os.path.join(REPO, "corpora", "known"))
    assert problems == []
    assert [c.name for c in causes if c.search is None] == []


@pytest.mark.parametrize("name", ["togsim-vector-idle-not-accumulated", "togsim-vector-active-counts-finish-cycle"])
def test_a_togsim_defect_exports_with_its_graph_config_and_a_literal_command(tmp_path, capsys, name):
    from torchsim_diff.cli import main
    from torchsim_diff.report import togsim_bundle
    known = os.path.join(REPO, "corpora", "known")
    assert main(["export", name, "--known-bugs", known, "--to", str(tmp_path / "b")]) == 0
    assert sorted(os.listdir(tmp_path / "b")) == sorted(togsim_bundle.SHIPPED + ("ISSUE.md", bundles.MANIFEST))
    assert main(["export", name, "--known-bugs", known, "--to", str(tmp_path / "b")]) == 0    # its own folder again
    issue = (tmp_path / "b" / "ISSUE.md").read_text()
    assert issue.startswith(f"<!-- File at {togsim_bundle.FILE_AT}") and togsim_bundle.COMMAND in issue
    assert "$" not in togsim_bundle.COMMAND and "Core [0] : Total_cycles 68" in issue
    assert not any(word in issue for word in ("torchsim", "triton-spike", "command.txt", "bucket")), issue


def test_a_togsim_defect_missing_its_graph_is_one_line(tmp_path, capsys):
    from torchsim_diff.cli import main
    folder = tmp_path / "known" / "togsim-broken"
    folder.mkdir(parents=True)
    (folder / "defect.json").write_text(json.dumps({"title": "t", "project": "TOGSim", "status": "s", "upstream": "",
                                                    "bucket": "k"}))
    assert main(["export", str(folder), "--to", str(tmp_path / "b")]) != 0
    err = capsys.readouterr().err
    assert "a TOGSim defect needs tile_graph.onnx" in err and "Traceback" not in err


def test_a_bug_of_eager_itself_is_shown_eager_against_eager(tmp_path, capsys):
    """conv2d's channels-last weight path skips padded taps: eager against eager on the weight in
    channels-last format shows it, with no compiler, in PyTorch's general template."""
    from torchsim_diff.cli import main
    name = "aten-conv-channels-last-weight-skips-padding-taps"
    assert main(["export", name, "--known-bugs", os.path.join(REPO, "corpora", "known"), "--to", str(tmp_path / "b"),
                 "--no-bisect"]) == 0
    script = (tmp_path / "b" / "repro.py").read_text()
    issue = (tmp_path / "b" / "ISSUE.md").read_text()
    assert "torch.compile" not in script and "memory_format=torch.channels_last" in script
    assert issue.startswith("<!-- File at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml")
    assert "with no compiler involved" in issue and "$ echo $?  # 1" in issue
    assert checklist.problems(str(tmp_path / "b")) == []


def test_a_cause_names_its_wrong_side_as_eager_or_compiled(tmp_path, add_case):
    assert ledger.read_cause(_cause_folder(tmp_path, add_case, {**CAUSE, "wrong_side": "eager"})).eager_bug
    with pytest.raises(CorruptEntry, match="wrong_side='both' is not one of compiled, eager"):
        ledger.read_cause(_cause_folder(tmp_path / "2", add_case, {**CAUSE, "wrong_side": "both"}))


# IR-level reduction of an adapter bug's TTIR: tests/test_ttir_reduce.py (the real adapter on the route's TTIR).


def test_every_cause_with_a_plain_script_meets_its_upstreams_checklist(tmp_path):
    """Each cause whose repro.py needs no torchsim-diff, written as export writes it but without
    running: the checklist holds, but for what needs runs (the ablation compiles tens of times;
    the triton shims are cut to those the bug needs by running without each, and a Triton bug is
    tried as one plain kernel launch by running it)."""
    causes, problems = ledger.read_causes(os.path.join(REPO, "corpora", "known"))
    assert problems == []
    checked = 0
    for cause in causes:
        shown = cause.representative()
        if bundles.harness_only(bundles.script_record(bundles.entry_record(shown)).route):
            continue
        record = bundles.entry_record(shown).with_fields(project=cause.project, upstream=cause.upstream)
        folder = bundles.write_bundle(record, str(tmp_path / cause.name), heading=cause.title, status=cause.status,
                                      analysis=analysis(cause, shown), eager_bug=cause.eager_bug)
        found = [p for p in checklist.problems(folder)
                 if "ablation" not in p and "triton_shims" not in p and "plain kernel launch" not in p]
        assert found == [], (cause.name, found)
        checked += 1
    assert checked >= 40


@pytest.mark.parametrize("name", ["mlir-math-atan2-fold-zero-zero", "mlir-0d-sum-fused-into-consumer-accumulates"])
def test_an_mlir_bug_ships_its_mlir_file_and_the_mlir_opt_command(tmp_path, capsys, name):
    from torchsim_diff.cli import main
    if shutil.which("mlir-opt-19") is None:
        pytest.skip("mlir-opt-19 is not installed here (scripts/setup.sh installs it)")
    assert main(["export", name, "--known-bugs", os.path.join(REPO, "corpora", "known"), "--to", str(tmp_path / "b")]) == 0
    assert sorted(os.listdir(tmp_path / "b")) == [bundles.MANIFEST, "ISSUE.md", "repro.mlir", "repro.py"]
    issue = (tmp_path / "b" / "ISSUE.md").read_text()
    assert issue.startswith("<!-- File at https://github.com/llvm/llvm-project/issues/new")
    assert "mlir-opt-19 --pass-pipeline=" in issue and "```mlir" in issue and "$ echo $?  # 1" in issue
    assert "import torch" not in (tmp_path / "b" / "repro.py").read_text()
    assert checklist.problems(str(tmp_path / "b")) == []


@pytest.mark.parametrize("field", [{"file": "../../etc/passwd", "pipeline": "builtin.module(canonicalize)", "shows": "x"},
                                   {"file": "repro.mlir", "pipeline": "x; rm -rf /", "shows": "x"},
                                   {"file": "repro.mlir", "pipeline": "canonicalize", "shows": "x", "run": "yes"}])
def test_a_malformed_mlir_reproducer_field_is_one_line(tmp_path, add_case, field):
    with pytest.raises(CorruptEntry, match="mlir_opt"):
        ledger.read_cause(_cause_folder(tmp_path, add_case, {**CAUSE, "mlir_opt": field}))


def test_every_shim_a_bundle_can_ship_says_what_it_changes():
    """A Triton-route bundle names what each shim it needs changes in torch or triton (never a
    patch that goes unexplained)."""
    from torchsim_diff.routes.triton.shims import EFFECTS
    assert set(bundles.SHIM_CALLS) == set(EFFECTS)
    assert all(len(text) > 20 for text in EFFECTS.values())


def test_a_pytorch_bug_met_under_the_interpreter_ships_its_cuda_twin_without_shims(tmp_path, add_case):
    """PyTorch supports Inductor's Triton kernels on CUDA: the bundle of a PyTorch bug found under
    Triton's interpreter also compiles the same program for a GPU, with no shims; a machine
    without one is told so (exit 2), never a pass."""
    record = _record(add_case, route="triton", op="relu", project="pytorch")
    folder = bundles.write_bundle(record, str(tmp_path / "b"))
    twin = (tmp_path / "b" / bundles.CUDA_TWIN).read_text()
    assert "triton_shims" not in twin and "torch.cuda.is_available()" in twin and "torch.compile(" in twin
    issue = (tmp_path / "b" / "ISSUE.md").read_text()
    assert f"`{bundles.CUDA_TWIN}` runs the same program" in issue and "not run where this report was written" in issue
    import torch
    status, out, _err = bundles.run_repro(folder, script=bundles.CUDA_TWIN)
    if not torch.cuda.is_available():
        assert (status, out.strip()) == (2, "cannot run here: no CUDA GPU")
    # the ablation and the shims cut to what the bug needs come from runs
    assert [p for p in checklist.problems(folder) if "ablation" not in p and "triton_shims" not in p] == []


def test_what_a_run_elsewhere_showed_goes_into_the_causes_report(tmp_path, add_case):
    note = "On a GPU (2026-12-06): the compiled kernel gives eager's values."
    cause = ledger.read_cause(_cause_folder(tmp_path, add_case, {**CAUSE, "also_checked": note}))
    assert note in analysis(cause, cause.representative())
    with pytest.raises(CorruptEntry, match="also_checked must be text"):
        ledger.read_cause(_cause_folder(tmp_path / "2", add_case, {**CAUSE, "also_checked": ["x"]}))
