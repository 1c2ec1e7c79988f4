"""Reproducer bundles: the real inductor bug reproduces standalone, a passing case does not,
and repro.py's embedded comparison rule agrees with torchsim_diff.oracle."""
import ast
import importlib.util
import os
import re
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from tests.conftest import REPO
from torchsim_diff import layout, oracle, repro
from torchsim_diff.check import Checker
from torchsim_diff.corpus import read_entry
from torchsim_diff.graph import Case
from torchsim_diff.kinds import Kind

KNOWN = os.path.join(REPO, "corpora", "known", "inductor-argmax-permuted-input.json")
SEED = os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")


# -- helpers ---------------------------------------------------------------------------------
def _torch_only_venv(folder: str) -> str:
    """A fresh venv that sees torch (and what sits beside it) but not the harness; its python.

    `venv --without-pip` takes well under a second (pip-installing torch would need the
    network and minutes). One .pth line names the site-packages folder torch lives in, as
    a plain sys.path entry: Python does not process the .pth files inside it, so the
    editable install of torchsim_diff is not importable (test below), and torch keeps its
    real paths, so Inductor's on-disk caches stay valid. A venv of symlinks to torch's
    requirement closure would hide numpy and triton too, but moves torch's include paths:
    every C++ kernel is rebuilt cold (measured 35 s instead of 16 s per script).
    --system-site-packages would process those .pth files and expose torchsim_diff.
    What repro.py imports is checked separately (torch and the standard library only).
    """
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(folder)
    python = os.path.join(folder, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "torch-only.pth"), "w") as handle:
        handle.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    return python


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TORCHSIM_DIFF"))}
    env["OMP_NUM_THREADS"] = "1"
    return env


def _run_script(python: str, bundle: str):
    return subprocess.run([python, os.path.join(bundle, "repro.py")], cwd=bundle, env=_clean_env(),
                          capture_output=True, text=True, timeout=240)


def _load_script(bundle: str):
    """repro.py imported as a module (its main() guarded by __name__), to test its rule in-process."""
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(bundle))}", os.path.join(bundle, "repro.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(case: Case, route="inductor", **fields) -> dict:
    record = {"route": route, "kind": "wrong_values", "bucket": "0123456789", "op": "add",
              "message": "output 0: values differ", "case": case.to_dict(), "artifacts": None,
              "max_abs_err": 0.5, "max_rel_err": 0.25, "max_ulp": 4e6, "err_ratio": None}
    record.update(fields)
    return record


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory):
    return _torch_only_venv(str(tmp_path_factory.mktemp("torch-only-venv")))


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


# -- end to end ------------------------------------------------------------------------------
@pytest.mark.slow
def test_known_bug_reproduces_in_torch_only_venv_and_passing_case_does_not(inductor_record, torch_venv, tmp_path):
    failing = repro.write_bundle(inductor_record, str(tmp_path / "failing"))
    # The same record after the case became one inductor gets right (a fixed bug looks like this).
    passing = repro.write_bundle(dict(inductor_record, case=read_entry(SEED).case.to_dict()), str(tmp_path / "passing"))
    with ThreadPoolExecutor(2) as pool:
        bug, fixed = pool.map(lambda b: _run_script(torch_venv, b), [failing, passing])
    assert bug.returncode == 1, bug.stdout + bug.stderr
    assert "Mismatched elements: 1 / 1" in bug.stdout and "REPRODUCED" in bug.stdout
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "NOT REPRODUCED" in fixed.stdout


@pytest.mark.slow
def test_torch_only_venv_cannot_import_the_harness(torch_venv):
    """Guards the test above: a script importing torchsim_diff would fail there."""
    probe = "import torch, importlib.util as u; print(torch.__version__, u.find_spec('torchsim_diff'))"
    done = subprocess.run([torch_venv, "-c", probe], capture_output=True, text=True, env=_clean_env(),
                          cwd=os.path.dirname(torch_venv))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [torch.__version__, "None"]


def test_non_standalone_route_says_so_and_exits_2(add_case, tmp_path):
    bundle = repro.write_bundle(_record(add_case, route="double-wrong-element"), str(tmp_path / "b"))
    done = _run_script(sys.executable, bundle)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "double-wrong-element" in done.stdout and "torchsim-diff replay case.json" in done.stdout


# -- what the bundle holds -------------------------------------------------------------------
def test_script_imports_only_torch_and_the_standard_library(add_case, tmp_path):
    bundle = repro.write_bundle(_record(add_case), str(tmp_path / "b"))
    tree = ast.parse(open(os.path.join(bundle, "repro.py")).read())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names - set(sys.stdlib_module_names) == {"torch"}


def test_bundle_holds_case_inputs_artifacts_and_issue(add_case, tmp_path):
    artifacts = tmp_path / "run-artifacts"
    (artifacts / "kernels").mkdir(parents=True)
    (artifacts / "kernels" / "k0.py").write_text("# kernel source\n")
    bundle = repro.write_bundle(_record(add_case), str(tmp_path / "b"), artifacts_dir=str(artifacts))
    assert Case.from_json(open(os.path.join(bundle, "case.json")).read()).case_id == add_case.case_id
    storages = [layout.storage_of(t) for t in layout.materialize_all(add_case.to_dict())]
    expected = b"".join(s.contiguous().view(torch.uint8).numpy().tobytes() for s in storages)
    assert open(os.path.join(bundle, "inputs.bin"), "rb").read() == expected
    assert open(os.path.join(bundle, "artifacts", "kernels", "k0.py")).read() == "# kernel source\n"
    issue = open(os.path.join(bundle, "ISSUE.md")).read()
    assert issue.startswith("# [inductor] wrong_values in `add`")
    assert add_case.program_source() in issue and "python repro.py" in issue
    assert f"| torch | {torch.__version__} |" in issue
    for component in ("triton", "torch-mlir", "clang-19", "spike", "torchsim-diff"):
        assert re.search(rf"^\| {re.escape(component)} \| \S", issue, re.M), component
    assert "artifacts/kernels/k0.py" in issue and "[1, 3] | 2 | 20" in issue


@pytest.mark.parametrize("embed_limit", [repro.EMBED_LIMIT_BYTES, 0], ids=["embedded", "inputs.bin"])
def test_script_rebuilds_every_storage_bit_for_bit(embed_limit, inout_case, monkeypatch, tmp_path):
    monkeypatch.setattr(repro, "EMBED_LIMIT_BYTES", embed_limit)
    bundle = repro.write_bundle(_record(inout_case), str(tmp_path / "b"))
    script = _load_script(bundle)
    assert (script.INPUT_DATA is None) == (embed_limit == 0)
    for want_dtype in (None, torch.float64):
        for got, want in zip(script.build_inputs(want_dtype), layout.materialize_all(inout_case.to_dict(), want_dtype)):
            assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(), want.storage_offset())
            assert oracle.same_bits(layout.storage_of(got), layout.storage_of(want)).all()


# -- the embedded rule agrees with the oracle -------------------------------------------------
def _verdicts(script, got, want, truth, sens):
    ours = script.compare("t", got, want, truth, sens) == []
    theirs = isinstance(oracle.compare_values(got, want, truth, "t", sens), oracle.ErrorStats)
    return ours, theirs


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
def test_embedded_rule_agrees_with_oracle(dtype, add_case, tmp_path):
    script = _load_script(repro.write_bundle(_record(add_case), str(tmp_path / "b")))
    gen = torch.Generator().manual_seed(5)
    truth = torch.randn(64, generator=gen, dtype=torch.float64) * 3
    want = truth.to(dtype)
    sens = torch.zeros(64, dtype=torch.float64)
    outcomes = set()
    for scale in (0.0, 1e-7, 1e-5, 1e-3, 1e-2, 0.1, 1.0):
        noise = torch.randn(64, generator=gen, dtype=torch.float64) * scale
        got = (truth + noise).to(dtype)
        got[7] = float("nan") if scale == 1.0 and dtype.is_floating_point else got[7]
        ours, theirs = _verdicts(script, got, want, truth, sens)
        assert ours == theirs, f"scale {scale}: repro.py says pass={ours}, oracle says pass={theirs}"
        outcomes.add(ours)
    assert outcomes == {True, False}, "the sweep must exercise both a pass and a fail"


def test_embedded_constants_come_from_the_oracle(add_case, tmp_path):
    script = _load_script(repro.write_bundle(_record(add_case), str(tmp_path / "b")))
    assert script.MARGIN == oracle.MARGIN and script.LOW_PRECISION_MARGIN == oracle.LOW_PRECISION_MARGIN
    assert (script.FEW_ELEMENTS, script.FEW_ELEMENTS_FACTOR) == (oracle.FEW_ELEMENTS, oracle.FEW_ELEMENTS_FACTOR)
    assert {layout.dtype_of(k): tuple(v) for k, v in script.TOLERANCES.items()} == oracle.TOLERANCES
    assert {layout.dtype_of(k): v for k, v in script.MANTISSA_BITS.items()} == oracle.MANTISSA_BITS


def test_storage_check_catches_guard_readonly_and_untouched_writes(inout_case, tmp_path):
    script = _load_script(repro.write_bundle(_record(inout_case), str(tmp_path / "b")))
    spec = script.INPUTS[0]
    init = layout.storage_of(script.build_inputs()[0]).clone()
    want = init.clone()
    want.as_strided([4, 2], [5, 1], 1).copy_(torch.ones(4, 2))     # what x0[:, 1:3].copy_(x1) does
    zero = torch.zeros_like(want, dtype=torch.float64)

    def check(got, mutated=True):
        return "\n".join(script.check_storage(dict(spec, mutated=mutated), init, got, want, want.double(), zero))

    assert check(want.clone()) == ""
    guard = want.clone()
    guard[-1] = 7.0
    assert "1 guard elements outside the view" in check(guard)
    assert "elements of a read-only input" in check(want.clone(), mutated=False)
    untouched = want.clone()
    untouched[0] += 1.0
    assert "must leave alone" in check(untouched)


def test_record_without_case_or_route_is_refused(add_case, tmp_path):
    with pytest.raises(repro.BundleError, match="'case'"):
        repro.write_bundle({"route": "inductor"}, str(tmp_path / "a"))
    with pytest.raises(repro.BundleError, match="'route'"):
        repro.write_bundle(_record(add_case, route=None), str(tmp_path / "b"))


@pytest.mark.slow
def test_triton_bundle_runs_inductor_triton_kernels_under_the_interpreter(inductor_record, torch_venv, tmp_path):
    """The argmax bug lives in Inductor's lowering, so the triton route shares it (seen with
    Checker too); its repro.py must load the bundled interpreter shims and reproduce it."""
    from torchsim_diff.routes import make_route
    available, reason = make_route("triton").available()
    if not available:
        pytest.skip(f"route triton unavailable: {reason}")
    bundle = repro.write_bundle(dict(inductor_record, route="triton"), str(tmp_path / "triton"))
    assert os.path.exists(os.path.join(bundle, repro.SHIMS_FILE))
    done = _run_script(torch_venv, bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Mismatched elements: 1 / 1" in done.stdout and "REPRODUCED: route triton" in done.stdout
