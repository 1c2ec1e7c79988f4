"""Reproducer bundles: the real inductor bug reproduces with torch alone in at most 40 lines, a
passing case does not, torch missing exits 2; tolerances, titles, projects, shims and inputs."""
import ast
import json
import os
import platform
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.conftest import REPO, inputs_built_by, make_case
from torchsim_diff.case import layout
from torchsim_diff.buckets.projects import PROJECTS
from torchsim_diff.report import bundles, plain_script
from torchsim_diff.report.issue_text import FUZZER_NOTE, OUTPUT_HEADING, _description, versions_text
from torchsim_diff.report.repro_script import HANG_S
from torchsim_diff.run.checker import Checker
from torchsim_diff.buckets.corpus import read_entry
from torchsim_diff.case.graph import Case
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record
from torchsim_diff.routes import EXTRA_ROUTES_ENV

KNOWN = os.path.join(REPO, "corpora", "known", "inductor-argmax-flat-index-of-permuted-input",
                     "inductor-argmax-permuted-input.json")
SEED = os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")


# -- helpers ---------------------------------------------------------------------------------
def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TORCHSIM_DIFF"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run_script(python: str, bundle: str):
    return subprocess.run([python, os.path.join(bundle, "repro.py")], cwd=bundle, env=_clean_env(),
                          capture_output=True, text=True, timeout=240)


def _run_with_this_env(bundle: str) -> tuple:
    """(exit status, stdout) of repro.py run in a fresh process with this python and this
    environment (the test-double routes registered when the test asked for them)."""
    done = subprocess.run([sys.executable, "repro.py"], cwd=bundle, env=dict(os.environ), capture_output=True,
                          text=True, timeout=240)
    return done.returncode, done.stdout


def _record(case: Case, route="inductor", **fields) -> Record:
    record = dict(route=route, kind="wrong_values", bucket="0123456789", op="add",
                  message="output 0: values differ", case=case.to_dict(), artifacts=None,
                  max_abs_err=0.5, max_rel_err=0.25, max_ulp=4e6, err_ratio=None)
    record.update(fields)
    return Record(**record)


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory):
    return plain_script.torch_only_python(str(tmp_path_factory.mktemp("torch-only-venv")))


@pytest.fixture(scope="module")
def inductor_record(tmp_path_factory):
    """The results.jsonl record of the known Inductor argmax bug, from a real Checker run."""
    entry = read_entry(KNOWN)
    with Checker(out_dir=str(tmp_path_factory.mktemp("run"))) as checker:
        available, reason, _ = checker.availability("inductor")
        if not available:
            pytest.skip(f"route inductor unavailable: {reason}")
        verdict = checker.check(entry.case, "inductor")
    if verdict.kind != Kind.WRONG_VALUES:
        pytest.fail(f"the known inductor bug no longer fails as wrong_values: {verdict.status} {verdict.message}")
    return verdict.record()


def _known_entry_and_a_passing_case_run(entry_path: tuple, passing_case, tmp_path) -> tuple:
    """(failing bundle, its run, the run of the same record over `passing_case`) for a torch-mlir
    known entry (corpora/known/<cause>/<file>), whose scripts run on the host with torch-mlir."""
    pytest.importorskip("torch_mlir.execution_engine")
    record = bundles.entry_record(read_entry(os.path.join(REPO, "corpora", "known", *entry_path)))
    failing = bundles.write_bundle(record, str(tmp_path / "failing"))
    passing = bundles.write_bundle(record.with_fields(case=passing_case.to_dict()), str(tmp_path / "passing"))
    with ThreadPoolExecutor(2) as pool:
        bug, fixed = pool.map(lambda b: _run_script(sys.executable, b), [failing, passing])
    return failing, bug, fixed


# -- end to end ------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.slow
def test_known_bug_reproduces_in_torch_only_venv_and_passing_case_does_not(inductor_record, torch_venv, tmp_path):
    failing = bundles.write_bundle(inductor_record, str(tmp_path / "failing"))
    # The same record after the case became one inductor gets right (a fixed bug looks like this).
    passing = bundles.write_bundle(inductor_record.with_fields(case=read_entry(SEED).case.to_dict()),
                                   str(tmp_path / "passing"))
    with ThreadPoolExecutor(2) as pool:
        bug, fixed = pool.map(lambda b: _run_script(torch_venv, b), [failing, passing])
    assert bug.returncode == 1, bug.stdout + bug.stderr
    assert "REPRODUCES" in bug.stdout and "indices: eager 16, compiled 8" in bug.stdout, bug.stdout
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "FIXED" in fixed.stdout
    # 40 lines, and the 10 that compare argmax's index by the value it picks (PyTorch's fuzzer rule)
    assert len(open(os.path.join(failing, "repro.py")).read().splitlines()) <= 50


@pytest.mark.e2e
@pytest.mark.slow
def test_torch_mlir_value_bug_runs_on_the_host_and_a_passing_case_exits_0(add_case, tmp_path):
    failing, bug, fixed = _known_entry_and_a_passing_case_run(
        ("torch-mlir-minimum-maximum-nan", "mlir-minimum-nan.json"), add_case, tmp_path)
    assert bug.returncode == 1, bug.stdout + bug.stderr
    assert "eager    nan\n  compiled 0.0" in bug.stdout and "REPRODUCES" in bug.stdout, bug.stdout
    assert fixed.returncode == 0 and "FIXED" in fixed.stdout, fixed.stdout + fixed.stderr
    assert os.path.exists(os.path.join(failing, "mlir_host.py"))
    assert len(open(os.path.join(failing, "repro.py")).read().splitlines()) <= 40


@pytest.mark.e2e
@pytest.mark.slow
def test_a_crash_reproduces_as_exit_1_from_a_child_killed_by_its_signal(add_case, tmp_path):
    """torch-mlir's reciprocal asserts x != 0 at run time: the host run aborts (SIGABRT), which
    no Python line survives to report; the script's parent does."""
    _failing, bug, fixed = _known_entry_and_a_passing_case_run(
        ("torch-mlir-reciprocal-asserts-nonzero", "mlir-reciprocal-of-zero.json"), add_case, tmp_path)
    assert bug.returncode == 1 and "REPRODUCES: killed by signal 6" in bug.stdout, bug.stdout + bug.stderr
    assert fixed.returncode == 0 and "FIXED" in fixed.stdout, fixed.stdout + fixed.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_triton_cuda_script_compiles_on_the_gpu_and_compares_on_the_cpu(inductor_record, inout_case, tmp_path):
    """Without a GPU it exits 2. With its device made the CPU (the one edit), the known Inductor
    bug reproduces and an in/out case passes: what the compiled run wrote comes back whole."""
    record = inductor_record.with_fields(route="triton-cuda")
    failing = bundles.write_bundle(record, str(tmp_path / "failing"))
    passing = bundles.write_bundle(record.with_fields(case=inout_case.to_dict()), str(tmp_path / "passing"))
    assert 'compiled(*inputs(device="cuda"))' in open(os.path.join(failing, "repro.py")).read()
    if not torch.cuda.is_available():
        done = _run_script(sys.executable, failing)
        assert done.returncode == 2 and "cannot run here: no CUDA GPU" in done.stdout, done.stdout + done.stderr
    for bundle in (failing, passing):
        path = os.path.join(bundle, "repro.py")
        text = open(path).read().replace('device="cuda"', 'device="cpu"').replace("torch.cuda.is_available()", "True")
        open(path, "w").write(text)
    with ThreadPoolExecutor(2) as pool:
        bug, fixed = pool.map(lambda b: _run_script(sys.executable, b), [failing, passing])
    assert bug.returncode == 1 and "indices: eager 16, compiled 8" in bug.stdout, bug.stdout + bug.stderr
    assert fixed.returncode == 0 and "FIXED" in fixed.stdout, fixed.stdout + fixed.stderr
    assert "on_host(gx)" in open(os.path.join(passing, "repro.py")).read()


@pytest.mark.e2e
@pytest.mark.slow
def test_torch_only_venv_cannot_import_the_harness(torch_venv):
    """Guards the test above: a script importing torchsim_diff would fail there."""
    probe = "import torch, importlib.util as u; print(torch.__version__, u.find_spec('torchsim_diff'))"
    done = subprocess.run([torch_venv, "-c", probe], capture_output=True, text=True, env=_clean_env(),
                          cwd=os.path.dirname(torch_venv))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [torch.__version__, "None"]


def test_missing_torch_exits_2(add_case, tmp_path):
    bare = str(tmp_path / "bare")
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(bare)
    bundle = bundles.write_bundle(_record(add_case), str(tmp_path / "b"))
    done = _run_script(os.path.join(bare, "bin", "python"), bundle)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot run here: No module named 'torch'" in done.stdout


def test_hang_runs_in_a_child_with_a_time_limit_that_passes_its_exit_status_on(add_case, tmp_path):
    bundle = bundles.write_bundle(_record(add_case, route="eager", kind="timeout"), str(tmp_path / "b"))
    script = open(os.path.join(bundle, "repro.py")).read()
    assert f"timeout={HANG_S}" in script and "REPRODUCES: no result within" in script
    done = _run_script(sys.executable, bundle)          # eager finishes: the child's exit 0 comes back
    assert done.returncode == 0 and "FIXED" in done.stdout, done.stdout + done.stderr


@pytest.mark.e2e
def test_harness_only_route_runs_the_case_through_torchsim_diff_and_exits_2_where_it_is_missing(
        add_case, tmp_path, double_routes, monkeypatch):
    record = _record(add_case, route="double-wrong-element", project="llvm")      # llvm: no collect_env
    bundle = bundles.write_bundle(record, str(tmp_path / "b"))
    status, out = _run_with_this_env(bundle)
    assert status == 1 and "REPRODUCES: double-wrong-element wrong_values" in out, out
    assert "def program(x0, x1)" in out
    assert os.path.isdir(os.path.join(bundle, bundles.HARNESS_RUN_DIR, "artifacts"))     # the route's files stay
    monkeypatch.delenv(EXTRA_ROUTES_ENV)
    status, out = _run_with_this_env(bundle)
    assert status == 2 and "not registered here" in out, out


# -- what the bundle holds -------------------------------------------------------------------
def test_script_imports_only_torch_and_the_standard_library(add_case, tmp_path):
    bundle = bundles.write_bundle(_record(add_case), str(tmp_path / "b"))
    tree = ast.parse(open(os.path.join(bundle, "repro.py")).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names - set(sys.stdlib_module_names) == {"torch"}
    assert sorted(os.listdir(bundle)) == [bundles.MANIFEST, "ISSUE.md", "case.json", "repro.py"]


def test_inputs_are_views_of_small_explicit_storages(add_case, tmp_path):
    bundle = bundles.write_bundle(_record(add_case), str(tmp_path / "b"))
    built = inputs_built_by(open(os.path.join(bundle, "repro.py")).read())
    wanted = layout.materialize_all(add_case.to_dict())
    assert len(built) == len(wanted)
    for got, want in zip(built, wanted):
        assert (got["shape"], got["stride"], got["offset"]) == (list(want.shape), list(want.stride()), want.storage_offset())
        assert got["bits"] == want.contiguous().view(torch.int32).tolist()
    assert str(layout.guard_value(torch.float32)) not in open(os.path.join(bundle, "repro.py")).read()


def test_tolerance_is_eagers_own_error_so_a_flushed_subnormal_still_fails():
    def program(x):
        return x * 3.0, x.argmax(), x * 0.0 + 1e-40      # rounded, an exact index, a subnormal

    x = torch.tensor([0.1, 0.7])
    rounded, index, subnormal = [plain_script._tolerance(e, t, False) for e, t in zip(program(x), program(x.double()))]
    assert (index.rtol, index.atol) == (0, 0) and "exact" in index.reason
    assert 0 < subnormal.atol <= 2e-45      # never atol=0 on a float (PyTorch's fuzzer rule), yet a flush shows
    err = float((x * 3.0).double().sub(x.double() * 3).abs().max())
    assert 2 * err <= rounded.atol <= 2.2 * err and rounded.rtol == 1.3e-6
    eager = torch.full((2,), 1e-40)
    with pytest.raises(AssertionError):     # compiled flushing the subnormal to zero
        torch.testing.assert_close(torch.zeros(2), eager, rtol=subnormal.rtol, atol=subnormal.atol)
    torch.testing.assert_close(torch.zeros(2), eager)       # torch.testing's default atol would hide it
    defaults = plain_script._tolerance(program(x)[0], program(x.double())[0], True)
    assert defaults.literal() == "dict()" and "defaults" in defaults.reason


@pytest.mark.parametrize("kind,guarded", [("wrong_values", False), ("guard_violation", True)])
def test_guard_storage_only_for_guard_violations(kind, guarded, add_case):
    values = plain_script.storage_values(add_case, 0, kind)
    assert (layout.guard_value(torch.float32) in values) == guarded
    assert len(values) == (20 if guarded else 2 + 15)       # offset 2, span 15 of a 20-element storage


def test_issue_is_in_the_projects_template_with_title_note_and_versions(add_case, tmp_path):
    record = _record(add_case, note="an internal note", upstream="https://github.com/pytorch/pytorch/issues/1")
    bundle = bundles.write_bundle(record, str(tmp_path / "b"), analysis="A planted analysis.")
    issue = open(os.path.join(bundle, "ISSUE.md")).read()
    lines = issue.splitlines()
    assert lines[0] == "<!-- File at https://github.com/pytorch/pytorch/issues/new?template=pt2-bug-report.yml -->"
    assert lines[1] == "# torch.compile (Inductor CPU): relu(add(transpose(x), y)) on a permuted storage-offset input " \
                       "returns wrong values"
    assert "A planted analysis." in issue and "The first op whose result differs is `add`" in issue
    assert "Related: https://github.com/pytorch/pytorch/issues/1" in issue and "internal note" not in issue
    assert not any(word in issue for word in ("route", "bucket", "campaign", "torchsim"))
    assert "### 🐛 Describe the bug" in issue and "### Versions" in issue
    assert f"torch: {torch.__version__}" in issue and "PyTorch version:" in issue      # route report, collect_env
    # the pt2 template: the run's output as its error logs, its fuzzer block's label, collect_env whole
    assert issue.index("### Error logs") < issue.index(OUTPUT_HEADING) < issue.index("### Versions")
    assert "`topic: fuzzer`" in issue and "float64" in FUZZER_NOTE
    assert "Versions of relevant libraries" in issue


def test_a_bug_outside_torch_compile_keeps_its_projects_own_template(add_case, tmp_path):
    record = _record(add_case, route="mlir")
    issue = bundles.render_issue(record, add_case, _bundle_with_script(tmp_path), [])
    assert issue.splitlines()[0] == f"<!-- File at {PROJECTS['torch-mlir'].file_at} -->"
    assert "### Error logs" not in issue and "topic: fuzzer" not in issue


@pytest.mark.parametrize("route,upstream,project", [
    ("inductor", "", "pytorch"), ("triton", "not yet filed (triton-lang/triton)", "triton"),
    ("triton", "not yet filed (pytorch/pytorch)", "pytorch"), ("mlir", "", "torch-mlir"), ("spike", "", "torch-mlir"),
    ("triton-spike", "", "triton-adapter"), ("triton-spike", "https://github.com/triton-lang/triton-ascend/issues/1", "triton-adapter")])
def test_project_follows_upstream_then_route(route, upstream, project):
    assert bundles.project_of(Record(route=route, upstream=upstream)).name == project


def test_title_names_the_trigger_found_by_ablation_over_the_layout_classes(add_case):
    record = _record(add_case, kind="wrong_values", reduced_case=add_case.to_dict(), trigger=["broadcast"])
    assert bundles.title(record, add_case).endswith("on an expanded (stride-0) input returns wrong values")
    assert "argmax" in bundles.expression(read_entry(KNOWN).case)


def test_compile_error_title_names_every_output_and_a_value_failure_the_one_its_message_names(add_case):
    two = Case.from_dict({**add_case.to_dict(), "outputs": ["v2", "v0"]})
    failed = _record(two, kind="compile_error", message="InductorError: CantSplit")
    assert "relu(add(transpose(x), y)), transpose(x) on a" in bundles.title(failed, two)
    assert "`transpose`, `add`, `relu`" in _description(failed, two)
    many = Case.from_dict({**add_case.to_dict(), "outputs": ["v2", "v0", "v1", "v2", "v0"]})
    assert bundles.expression(many, many.outputs) == "relu(add(transpose(x), y)), transpose(x), add(transpose(x), y), ..."
    wrong = _record(two, message="output 1: values differ")
    assert "): transpose(x) on a" in bundles.title(wrong, two)


def test_unused_inputs_leave_the_bundle_with_the_values_the_others_had(add_case):
    data = add_case.to_dict()
    data["inputs"].insert(0, {**data["inputs"][1], "name": "x9"})     # drawn first: shifts every position
    wide = Case.from_dict(data)
    narrow = bundles.without_unused_inputs(wide)
    assert [s["name"] for s in narrow.inputs] == ["x0", "x1"]
    for got, want in zip(layout.materialize_all(narrow.to_dict()), layout.materialize_all(data)[1:]):
        assert torch.equal(layout.storage_of(got), layout.storage_of(want))
    assert "program(x0, x1)" in bundles.render_script(_record(wide), bundles._case_of(_record(wide)))
    assert bundles.without_unused_inputs(add_case) is add_case


def test_a_large_output_prints_its_first_differing_elements_not_every_element(tmp_path):
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [33, 33], [33, 1], 0, 33 * 33, {})], outputs=["v0"])
    script = bundles.render_script(_record(case, route="eager"), case).replace(
        "compiled = program", "compiled = lambda x: (program(x)[0].flip(0),)")   # rows reversed: many differ
    (tmp_path / "repro.py").write_text(script)
    torch.save(plain_script.stored_inputs(case, "wrong_values"), tmp_path / plain_script.INPUTS_FILE)
    status, out = _run_with_this_env(str(tmp_path))
    shown = out.split("REPRODUCES")[0]
    assert status == 1 and "Mismatched elements" in shown and len(shown) < 1500, shown
    assert shown.count("  compiled [") == 1 and len(ast.literal_eval(shown.split("  compiled ")[1].split("\n")[0])) == plain_script.SHOWN


class _RunsCodeWhenUnpickled:
    """What a hostile inputs.pt would hold: unpickling it calls os.system."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_inputs_pt_that_is_not_plain_tensors_runs_no_code_and_cannot_run_here(tmp_path):
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [33, 33], [33, 1], 0, 33 * 33, {})], outputs=["v0"])
    (tmp_path / "repro.py").write_text(bundles.render_script(_record(case, route="eager"), case))
    torch.save(plain_script.stored_inputs(case, "wrong_values"), tmp_path / plain_script.INPUTS_FILE)
    assert _run_with_this_env(str(tmp_path))[0] == 0          # eager: its own values pass

    marker = tmp_path / "code-ran"
    torch.save([_RunsCodeWhenUnpickled(str(marker))], tmp_path / plain_script.INPUTS_FILE)
    status, out = _run_with_this_env(str(tmp_path))
    assert (status, marker.exists()) == (2, False)
    assert out.startswith("cannot run here: inputs.pt is not a file of saved tensors") and out.count("\n") == 1


def test_pytorch_compile_error_met_on_triton_spike_reproduces_through_the_triton_route(add_case):
    pytorch = dict(route="triton-spike", upstream="not yet filed (pytorch/pytorch)")
    record = bundles.script_record(_record(add_case, kind="compile_error", **pytorch))
    assert (record.route, record.found_on) == ("triton", "triton-spike")
    assert bundles.script_record(_record(add_case, **pytorch)).route == "triton-spike"      # values: the executor's
    assert bundles.script_record(_record(add_case, route="triton-spike", kind="compile_error")).route == "triton-spike"


def test_kernel_ttir_names_source_files_without_their_temporary_folders(tmp_path):
    from torchsim_diff.report import adapter_bundle
    ttir = tmp_path / "kernel.fixed.ttir"
    ttir.write_text('#loc = loc("/tmp/torchsim-ttir-k77u/kc2d.py":18:1)\n#loc31 = loc("in_ptr0"(#loc))\n')
    adapter_bundle.write_kernel(str(ttir), str(tmp_path))
    shipped = (tmp_path / adapter_bundle.KERNEL_FILE).read_text()
    assert shipped == '#loc = loc("kc2d.py":18:1)\n#loc31 = loc("in_ptr0"(#loc))\n'


def test_shims_module_holds_only_the_shims_asked_for():
    source = bundles.shims_source(["_patch_backend_hash"])
    assert "def _patch_backend_hash" in source and "def _patch_libdevice" not in source
    compile(source, "triton_shims.py", "exec")


def test_record_without_case_or_route_is_refused(add_case, tmp_path):
    with pytest.raises(bundles.BundleError, match="'case'"):
        bundles.write_bundle({"route": "inductor"}, str(tmp_path / "a"))
    with pytest.raises(bundles.BundleError, match="'route'"):
        bundles.write_bundle(_record(add_case, route=None), str(tmp_path / "b"))


@pytest.mark.parametrize("kind", ["invalid_case", "tool_error"])
def test_a_failure_with_no_compiler_values_gets_a_bundle_without_running_eager_for_tolerances(
        kind, add_case, tmp_path, monkeypatch):
    """Eager rejecting the program (invalid_case) made the bundle writer run it for tolerances,
    and the campaign ended in a traceback."""
    def eager_rejects(*_args):
        raise RuntimeError("view size is not compatible with input tensor's size and stride")
    monkeypatch.setattr(plain_script, "tolerances", eager_rejects)
    folder = bundles.write_bundle(_record(add_case, kind=kind, message="eager rejects the program"),
                                  str(tmp_path / kind))
    assert os.path.isfile(os.path.join(folder, "repro.py"))


# -- adapter bugs: the kernel through triton-adapter-opt alone -----------------------------------
ADAPTER_OUTCOMES = {  # a stand-in adapter's shell body -> repro.py's exit status and verdict
    "echo 'error: strides must not be zero' >&2; kill -ABRT $$": (1, "strides must not be zero"),
    "echo '  %3 = tt.reduce %2'": (1, "tt.reduce left unconverted"),
    "echo '  %3 = linalg.generic'": (0, "FIXED"),
    # a crash with no message: the dump's size and the adapter's innermost frames, without its folder
    "printf 'Stack dump:\\n #0 0x1 (/opt/x/triton-adapter-opt+0x10)\\n #1 0x2 (/lib/libc.so.6+0x3c050)\\n"
    " #2 0x3 (/opt/x/triton-adapter-opt+0xb3a38d)\\n #3 0x4 (/opt/x/triton-adapter-opt+0xa4a9b4)\\n' >&2; kill -SEGV $$":
        (1, "stack dump: 4 frames; innermost in triton-adapter-opt:\n#2 (triton-adapter-opt+0xb3a38d)\n"
            "#3 (triton-adapter-opt+0xa4a9b4)\n"),
}


@pytest.mark.parametrize("body", list(ADAPTER_OUTCOMES), ids=["aborts", "leaves-tt-op", "converts", "segfaults"])
def test_adapter_repro_runs_the_kernel_through_the_adapter_alone(body, tmp_path):
    from torchsim_diff.report import adapter_bundle
    fake = tmp_path / "triton-adapter-opt"
    fake.write_text(f"#!/bin/sh\n{body}\n")
    fake.chmod(0o755)
    (tmp_path / adapter_bundle.KERNEL_FILE).write_text("tt.func @k() { tt.return }\n")
    (tmp_path / "repro.py").write_text(adapter_bundle.render_script("triton-adapter (triton-spike): a title"))
    env = {**_clean_env(), "TRITON_ADAPTER_OPT": str(fake)}
    done = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, env=env)
    status, verdict = ADAPTER_OUTCOMES[body]
    assert done.returncode == status and verdict in done.stdout, done.stdout + done.stderr
    assert "/opt/x" not in done.stdout
    env.pop("TRITON_ADAPTER_OPT")
    env["PATH"] = "/nonexistent"
    missing = subprocess.run([sys.executable, str(tmp_path / "repro.py")], capture_output=True, text=True, env=env)
    assert missing.returncode == 2 and "triton-adapter-opt not found" in missing.stdout


def test_adapter_kernel_is_the_one_the_adapter_stopped_on(tmp_path):
    from torchsim_diff.report import adapter_bundle
    for name, files in (("a-ok", ["kernel.fixed.ttir", "kernel.linalg.mlir"]), ("b-stopped", ["kernel.fixed.ttir"])):
        (tmp_path / name).mkdir()
        for f in files:
            (tmp_path / name / f).write_text("")
    assert adapter_bundle.failing_kernel(str(tmp_path)) == str(tmp_path / "b-stopped" / "kernel.fixed.ttir")
    assert adapter_bundle.is_adapter_bug(Record(route="triton-spike", kind="compile_error", message="adapter: x"))
    assert not adapter_bundle.is_adapter_bug(Record(route="triton-spike", kind="compile_error", message="ttir: x"))


def test_repro_literals_keep_every_float_bit_exact():
    import ast
    import math
    import struct

    from torchsim_diff.report.plain_script import number as _number
    values = [-0.0, 0.0, 2.0, -3.0, 1e-45, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
              -65504.0, 3.3895313892515355e38, 0.1, float("inf"), float("-inf")]
    for v in values:
        text = _number(v)
        back = float(text[len('float("'):-2]) if text.startswith("float(") else ast.literal_eval(text)
        assert struct.pack("<d", back) == struct.pack("<d", v), (v, text)
    assert math.isnan(float(_number(float("nan"))[len('float("'):-2]))


def test_repro_compiles_with_the_settings_the_campaign_compiled_with():
    from torchsim_diff.report.bundles import compile_setup
    record = Record.from_dict({"case_id": "c", "route": "inductor", "status": "fail", "kind": "wrong_values",
                               "bucket": "b", "ops": ["neg"], "case": None, "dynamic": True,
                               "versions": {"torch": "x", "dynamic": "mixed", "emulate_precision_casts": False,
                                            "mode": "max-autotune-no-cudagraphs", "freezing": False}})
    text = compile_setup(record)
    assert "dynamic=True, mode='max-autotune-no-cudagraphs')" in text
    assert "emulate_precision_casts = False" in text and "force_disable_caches = True" in text
    if platform.machine() in ("x86_64", "AMD64"):     # the default 256-bit vectors, not the host's widest
        assert "cpp.simdlen = 256" in text
    assert "cpp.simdlen = 1 " in compile_setup(record.with_fields(versions={"simdlen": 0}))
    assert "simdlen" not in compile_setup(record.with_fields(versions={"simdlen": "host"}))
    assert "simdlen" not in compile_setup(record.with_fields(route="triton"))
    hostile = record.with_fields(dynamic=None, versions={"mode": "default'); import os; ('", "dynamic": True})
    assert "import os" not in compile_setup(hostile) and "dynamic=True)" in compile_setup(hostile)


def test_a_float32_case_with_a_bfloat16_round_trip_compiles_with_the_campaigns_precision_casts():
    # Without the setting torch's default drops the round trip, and repro.py shows another bug.
    from torchsim_diff.report.bundles import compile_setup
    record = Record.from_dict({"case_id": "c", "route": "triton", "status": "fail", "kind": "wrong_values",
                               "bucket": "b", "ops": ["cast_round_trip"], "case": None,
                               "versions": {"emulate_precision_casts": True}})
    node = {"id": "v0", "op": "cast_round_trip", "args": ["x0"], "attrs": {"via": "bfloat16"}}
    round_trip = make_case([node], [("x0", [3], [1], 0, 3, {})], ["v0"])
    plain = make_case([dict(node, op="neg", attrs={})], [("x0", [3], [1], 0, 3, {})], ["v0"])
    assert "emulate_precision_casts = True" in compile_setup(record, round_trip)
    assert "emulate_precision_casts" not in compile_setup(record, plain)


def test_an_adapter_kernel_report_speaks_of_the_kernel_and_the_adapters_version_only(add_case):
    record = _record(add_case, route="triton-spike", kind="compile_error", message="adapter: aborted")
    text = _description(record, add_case, kernel_only=True)
    assert "`kernel.ttir`" in text and "triton-spike" not in text and "strides" not in text
    versions = versions_text(record, add_case, kernel_only=True)
    assert versions.splitlines()[1].startswith("triton (wrote kernel.ttir): ") and "torch" not in versions


def test_a_quoted_run_names_files_inside_the_bundle_not_the_folder_it_ran_in_and_leaves_no_bytecode(tmp_path):
    (tmp_path / "helper.py").write_text("VALUE = 1\n")
    (tmp_path / "repro.py").write_text("import os, sys\nimport helper\nprint(os.path.abspath(__file__))\nsys.exit(1)\n")
    quoted = bundles.run_script(str(tmp_path))
    assert quoted.splitlines() == ["repro.py", "$ echo $?  # 1"]
    assert not (tmp_path / "__pycache__").exists()


@pytest.mark.parametrize("project,runs", [("torch-mlir", True), ("llvm", True), ("pytorch", False)])
def test_a_value_bug_in_the_mlir_lowering_runs_on_the_host_whichever_of_torch_mlir_or_mlir_owns_it(
        project, runs, add_case):
    """An MLIR pass inside torch-mlir's lowering (a fusion) shows only when the module runs: its
    bundle once stopped after the import and exited 2 (cannot tell)."""
    record = _record(add_case, route="mlir", project=project)
    assert bundles.runs_on_host(record, add_case) is runs


def _bundle_with_script(tmp_path) -> str:
    (tmp_path / "repro.py").write_text("print('REPRODUCES')\n")
    return str(tmp_path)


def test_a_bundle_whose_write_was_killed_part_way_is_written_again(add_case, tmp_path):
    """kill -9 of a campaign during its self-check left a bundle's first files without their
    manifest; the rerun's self-check refused the folder, and the bucket was never NEW again."""
    record = _record(add_case)
    folder = tmp_path / "b"
    bundles.claim_folder(str(folder))               # what a write killed after its first file leaves
    (folder / "case.json").write_text("{")
    assert bundles.write_bundle(record, str(folder)) == str(folder)
    manifest = (folder / bundles.MANIFEST).read_text().split()
    assert bundles.UNFINISHED not in manifest and "case.json" in manifest
    assert json.loads((folder / "case.json").read_text())["nodes"]
    (folder / bundles.HARNESS_RUN_DIR).mkdir()      # what its repro.py makes when the self-check runs it
    assert bundles.write_bundle(record, str(folder)) == str(folder)
    mine = tmp_path / "mine"                        # no manifest: the same name is a user's file
    (mine / bundles.HARNESS_RUN_DIR).mkdir(parents=True)
    with pytest.raises(bundles.BundleError, match="holds files no export wrote"):
        bundles.write_bundle(record, str(mine))


def test_a_bundle_is_written_only_into_a_folder_that_is_ours(add_case, tmp_path):
    record = _record(add_case)
    bundle = bundles.write_bundle(record, str(tmp_path / "b"))
    assert bundles.write_bundle(record, bundle) == bundle           # an earlier export's folder: rewritten
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    with pytest.raises(bundles.BundleError, match="holds files no export wrote"):
        bundles.write_bundle(record, str(mine))
    assert (mine / "notes.txt").read_text() == "a user's file" and sorted(os.listdir(mine)) == ["notes.txt"]
    # a symbolic link planted where the bundle writes is refused, and its target left alone
    target = tmp_path / "elsewhere.md"
    target.write_text("not ours")
    os.unlink(os.path.join(bundle, "ISSUE.md"))
    os.symlink(target, os.path.join(bundle, "ISSUE.md"))
    with pytest.raises(bundles.BundleError, match="symbolic links"):
        bundles.write_bundle(record, bundle)
    assert target.read_text() == "not ours"
    link = tmp_path / "link"
    link.symlink_to(mine)
    with pytest.raises(bundles.BundleError, match="is a symbolic link"):
        bundles.write_bundle(record, str(link))
    with pytest.raises(bundles.BundleError, match="not a folder"):
        bundles.write_bundle(record, str(target))
