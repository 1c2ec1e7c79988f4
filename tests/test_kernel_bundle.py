"""A triton-spike value bug's bundle: one launch of one kernel, run on this host by the adapter
and LLVM 19 alone (report.kernel_bundle). The script's parts are checked here without tools;
the slow test runs a right launch for real (exit 0), the end-to-end one exports a known adapter
bug (exit 1); both are skipped with the reason where the chain is missing."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torchsim_diff.report import kernel_bundle  # noqa: E402
from torchsim_diff.results.record import Record  # noqa: E402

KNOWN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "corpora", "known")


def launch_meta(**changes):
    meta = {"kernel_name": "k", "grid": [2, 1, 1], "constexprs": {"XBLOCK": 4},
            "signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32", "scale": "fp32",
                          "n": "constexpr", "XBLOCK": "constexpr"},
            "args": [{"name": "in_ptr0", "kind": "tensor", "buffer": "buf0", "dtype": "float32", "storage_offset": 3},
                     {"name": "out_ptr0", "kind": "tensor", "buffer": "buf1", "dtype": "float32", "storage_offset": 0},
                     {"name": "xnumel", "kind": "scalar", "value": 5, "dtype": "i32"},
                     {"name": "scale", "kind": "scalar", "value": 0.5, "dtype": "fp32"},
                     {"name": "n", "kind": "scalar", "value": 1, "dtype": "constexpr"}],
            "buffers": {"buf0": {"dtype": "float32", "nbytes": 32}, "buf1": {"dtype": "float32", "nbytes": 20}}}
    meta.update(changes)
    return meta


def test_arguments_are_byte_offsets_into_buffers_and_typed_scalars_without_constexprs():
    assert kernel_bundle.launch_arguments(launch_meta()) == [
        ("buffer", "buf0", 12, 5), ("buffer", "buf1", 0, 5), ("c_int32", 5), ("c_float", 0.5)]


def test_a_scalar_type_ctypes_cannot_pass_has_no_kernel_repro():
    meta = launch_meta()
    meta["signature"]["scale"] = "bf16"
    with pytest.raises(kernel_bundle.NoKernelRepro, match="bf16"):
        kernel_bundle.launch_arguments(meta)


def test_only_value_failures_and_crashes_on_triton_spike_take_one_launch():
    assert kernel_bundle.is_kernel_value_bug(Record(route="triton-spike", kind="wrong_values"))
    assert kernel_bundle.is_kernel_value_bug(Record(route="triton-spike", kind="crash"))
    assert not kernel_bundle.is_kernel_value_bug(Record(route="triton-spike", kind="compile_error"))
    assert not kernel_bundle.is_kernel_value_bug(Record(route="triton", kind="wrong_values"))


def test_script_imports_torch_and_the_standard_library_only_and_keeps_a_hostile_title_in_its_docstring():
    head = 'a title """\nimport os; os.system("echo pwned")'
    text = kernel_bundle.render_script(head, "k", (2, 1, 1), kernel_bundle.launch_arguments(launch_meta()), True)
    tree = ast.parse(text)
    assert "os.system" in ast.get_docstring(tree)
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert imported == {"ctypes", "os", "re", "shutil", "subprocess", "sys", "torch"}
    assert "_mlir_ciface_k" in text and "GRID = (2, 1, 1)" in text


def test_pass_lists_are_packed_into_short_lines_and_read_back_whole():
    items = [f"--pass-number-{i}" for i in range(30)]
    literal = kernel_bundle._wrapped(items)
    assert ast.literal_eval(literal) == items
    assert all(len(line) <= 110 for line in literal.splitlines())
    assert kernel_bundle._wrapped(["--a"]) == "['--a']"


def test_missing_tools_exit_2_with_the_reason(tmp_path):
    script = kernel_bundle.render_script("t", "k", (1, 1, 1), [], True)
    (tmp_path / "repro.py").write_text(script)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_ADAPTER_OPT"}
    env["PATH"] = str(tmp_path)
    done = subprocess.run([sys.executable, "repro.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 2 and "cannot run here: needs triton-adapter-opt" in done.stdout


# -- the real chain ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def spike_route():
    from torchsim_diff.routes import make_route
    route = make_route("triton-spike")
    ok, reason = route.available()
    if not ok:
        pytest.skip(reason)
    missing = [t for t in ("mlir-opt-19", "mlir-translate-19", "clang-19") if not shutil.which(t)]
    if missing or not os.path.exists(kernel_bundle.RUNNER_UTILS):
        pytest.skip(f"the host run needs {', '.join(missing) or kernel_bundle.RUNNER_UTILS} (apt-packages.txt)")
    from torchsim_diff.routes.triton_spike.toolchain import ADAPTER_ENV, adapter_path
    os.environ.setdefault(ADAPTER_ENV, adapter_path())
    route.setup()
    yield route
    route.close()


def run(bundle):
    return subprocess.run([sys.executable, "repro.py"], cwd=bundle, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e    # a whole export: the case through the route, the interpreter, the host build, two launches
def test_a_known_adapter_value_bug_exports_one_launch_that_reproduces_on_the_host(spike_route, tmp_path):
    from torchsim_diff.report.bundles import entry_record, write_bundle
    from torchsim_diff.buckets.causes import read_cause
    entry = read_cause(os.path.join(KNOWN, "adapter-reduce-init-tensor-empty")).representative()
    bundle = write_bundle(entry_record(entry), str(tmp_path / "bundle"))
    shipped = set(os.listdir(bundle))
    assert set(kernel_bundle.SHIPPED) <= shipped and not shipped & set(kernel_bundle.BUILT)
    assert "launch.pt" in open(os.path.join(bundle, "ISSUE.md")).read()
    done = run(bundle)
    assert done.returncode == 1, done.stdout + done.stderr
    # the reduced kernel (the whole one beside it), judged by malloc's two fills
    assert "kernel.original.ttir" in shipped and "buf1[0]: " in done.stdout and "with 0xC7" in done.stdout, done.stdout


@pytest.mark.e2e
@pytest.mark.slow
def test_a_right_launch_exits_0(spike_route, tmp_path):
    from doubles.cases import CaseRun, make_case, tensor_spec
    source = "import torch\ndef program(x0):\n    return (torch.relu(x0.t() * 2.0 + 1.0),)\n"
    case = make_case(tensor_spec("x0", [3, 5], strides=[1, 3], offset=2))
    ran = CaseRun(spike_route, source, case, artifact_dir=str(tmp_path / "run"))
    assert ran.matches_eager()
    launch = os.path.join(ran.artifact_dir, "kernels", ran.kernels()[0])
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    kernel_bundle.write_launch(ran.artifact_dir, launch, str(bundle), "a right kernel")
    done = run(bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FIXED: every buffer matches" in done.stdout


@pytest.mark.parametrize("ships_launch", [False, True], ids=["adapter-compile-error", "one-launch"])
def test_a_kernel_report_speaks_of_the_kernel_not_of_the_harness(ships_launch, add_case, tmp_path):
    from torchsim_diff.report import bundles
    kind = "crash" if ships_launch else "compile_error"
    record = Record(route="triton-spike", kind=kind, message="adapter: aborted", case=add_case.to_dict())
    (tmp_path / "repro.py").write_text('"""t"""\n')
    (tmp_path / kernel_bundle.KERNEL_FILE).write_text("tt.func @k() { tt.return }\n")
    if ships_launch:
        (tmp_path / kernel_bundle.LAUNCH_FILE).write_bytes(b"")
    text = bundles.render_issue(record, add_case, str(tmp_path), [])
    assert "through torchsim-diff" not in text and "`kernel.ttir` is the kernel" in text
    assert ("`launch.pt` holds every buffer" in text) == ships_launch
    assert ("crashes on a launch that Triton's interpreter runs" in text) == ships_launch
