"""One fixture per PyTorchSim generation (tests/torchsim/generations/<A|B|C1|C2>/), laid out
as that generation writes it: detection, config format, classification, capture
conversion and replay scripts against each. Where each layout and text comes from is in
generations/README.md; every test here failed on the adapter before issue 14.
"""
import json
import os
import pathlib
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.torchsim.torchsim import TorchSimMlirRoute, TorchSimTritonRoute
from torchsim_diff.routes.torchsim import artifacts, config, device, generation, kernel_repro, subprocess_limits, workdir
from torchsim_diff.routes.torchsim.failure_text import classify

GENERATIONS = pathlib.Path(__file__).parent / "generations"
X = np.arange(24, dtype=np.float32) * 0.5 - 3.0          # in_ptr0.raw of the Triton fixtures
Y = np.linspace(-1, 1, 24).astype(np.float32)            # in_ptr1.raw


def _dump(tmp_path, name):
    target = tmp_path / f"{name}-dump"
    shutil.copytree(GENERATIONS / name / "dump", target)
    return str(target)


def _tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root)


# -- detection ------------------------------------------------------------------------------
# torch_openreg/__init__.py as later C1 writes it (PSAL-POSTECH 1c5dde5) and as the switching
# C1 writes it (4c077b4): only the registration lines matter to detection.
UNCONDITIONAL = ("from PyTorchSimFrontend.triton_backend import (\n    TritonNPUScheduling, TritonNPUWrapperCodegen)\n"
                 "torch._inductor.codegen.common.register_backend_for_device(\n    \"npu\",\n"
                 "    lambda scheduling: TritonNPUScheduling(scheduling),\n    TritonNPUWrapperCodegen\n)\n")
SWITCHING = "if _extension_config.CONFIG_TRITON_CODEGEN:\n" + "".join(
    "    " + line + "\n" for line in UNCONDITIONAL.splitlines()) + "else:\n    pass\n"
C1_FILES = {"PyTorchSimDevice/CMakeLists.txt": "", "PyTorchSimFrontend/mlir/mlir_scheduling.py": "",
            "PyTorchSimFrontend/triton_backend/__init__.py": ""}


def test_mlir_route_refuses_a_checkout_that_registers_triton_unconditionally(tmp_path):
    root = _tree(tmp_path, dict(C1_FILES, **{generation.DEVICE_INIT: UNCONDITIONAL}))
    with pytest.raises(generation.UnknownGeneration, match="unconditionally"):
        generation.detect(generation.MLIR_ROUTE, root)
    assert generation.detect(generation.TRITON_ROUTE, root).name == "C1"


def test_a_switching_c1_checkout_keeps_its_mlir_route(tmp_path):
    root = _tree(tmp_path, dict(C1_FILES, **{generation.DEVICE_INIT: SWITCHING}))
    assert generation.detect(generation.MLIR_ROUTE, root).name == "B"


def test_mlir_worker_refuses_a_triton_backend_registered_at_run_time(monkeypatch):
    """The run-time guard: whatever the files say, the wrapper torch_openreg registered decides."""
    import torch._inductor.codegen.common as common
    triton_wrapper = type("TritonNPUWrapperCodegen", (), {"__module__": "PyTorchSimFrontend.triton_backend.wrapper_codegen"})
    monkeypatch.setattr(common, "get_wrapper_codegen_for_device", lambda name, *a, **k: triton_wrapper)
    assert "torchsim-triton" in device.wrong_backend("torchsim-mlir")
    assert device.wrong_backend("torchsim-triton") == ""


# -- config format --------------------------------------------------------------------------
A_CONFIG = {"num_cores": 1, "vpu_num_lanes": 128, "vpu_spad_size_kb_per_lane": 128, "vpu_vector_length_bits": 256,
            "pytorchsim_functional_mode": 0, "pytorchsim_timing_mode": 1, "codegen_mapping_strategy": "heuristic"}


def test_generation_a_gets_a_json_machine_config(tmp_path, monkeypatch):
    monkeypatch.delenv("TOGSIM_CONFIG", raising=False)
    root = _tree(tmp_path, {config.DEFAULT_CONFIGS["A"]: json.dumps(A_CONFIG, indent=2)})
    base = config.base_config_path(root, "A", None)
    assert base.endswith(".json")
    written = config.write_machine_config(base, str(tmp_path / "machine"), timing=False, generation="A")
    loaded = json.load(open(written))          # what fe04c9a extension_config.py does with it
    assert loaded["pytorchsim_functional_mode"] == 1 and loaded["pytorchsim_timing_mode"] == 0
    assert loaded["vpu_num_lanes"] == 128 and loaded["codegen_mapping_strategy"] == "heuristic"


def test_a_yaml_config_for_generation_a_is_refused_with_the_fix(tmp_path):
    root = _tree(tmp_path, {"configs/mine.yml": "vpu_num_lanes: 128\n"})
    with pytest.raises(config.ConfigError, match=r"reads only JSON.*\.json"):
        config.base_config_path(root, "A", "configs/mine.yml")


def test_later_generations_keep_yaml_and_get_the_verify_key(tmp_path):
    base = tmp_path / "base.yml"
    base.write_text("vpu_num_lanes: 128\npytorchsim_functional_mode: 0\n")
    written = config.write_machine_config(str(base), str(tmp_path / "m"), timing=True, generation="C2", verify=True)
    text = open(written).read()
    assert written.endswith(".yml") and config.read_top_level(text, config.VERIFY_KEY) == "1"
    assert config.read_top_level(text, "pytorchsim_functional_mode") == "1"


# -- workdirs and stages --------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("A", ["outputs/c4kbgc3nqzq", "outputs/dml6bfqzh2e"]), ("B", ["c4kbgc3nqzq", "dml6bfqzh2e"]),
    ("C1", ["triton_a3f09c2d7e1"]), ("C2", ["triton_5be81f04c6a"]),
])
def test_each_kernel_folder_is_one_workdir(tmp_path, name, expected):
    dump = _dump(tmp_path, name)
    found = sorted(os.path.relpath(w, dump) for w in artifacts.kernel_workdirs(dump))
    assert found == expected
    first = os.path.join(dump, expected[0])
    assert artifacts.stage_reached(first) == "spike"


def test_build_identity_reads_provenance_and_kernel_format(tmp_path):
    assert artifacts.build_identity(_dump(tmp_path, "C2")) == {"compiler_commit": "fe0ee08c4a2b", "kernel_format": 1}
    assert artifacts.build_identity(_dump(tmp_path, "C1")) == {}


def test_failure_copies_carry_c2s_target_description(tmp_path):
    dump = _dump(tmp_path, "C2")
    copied = artifacts.collect(dump_path=dump, inductor_cache=os.path.join(dump, ".torchinductor"),
                               log_dir=str(tmp_path / "none"), log_text="", dest=str(tmp_path / "case"))
    assert "pytorchsim/target-systolic_ws_256x256_c1_simple_noc_tpuv6e_functional_only.json" in copied


def test_togsim_log_line_of_debug_mode_is_read():
    text = (GENERATIONS / "A" / "logs" / "togsim_debug_ok.log").read_text()
    assert artifacts.TOGSIM_LOG_LINE.findall(text) == ["/workspace/PyTorchSim/togsim_results/20251231_143732.log"]


# -- classification -------------------------------------------------------------------------
EXPECTED = {
    "A/link_failed": (Kind.COMPILE_ERROR, "compile:toolchain", "toolchain", "exit code 1"),
    "A/objdump_failed": (Kind.COMPILE_ERROR, "compile:toolchain", "toolchain", "objdump -d"),
    "A/spad_overflow": (Kind.COMPILE_ERROR, "compile:spad", "spad_overflow", "usage 262144 > budget 131072"),
    "B/compiler_timeout": (Kind.TIMEOUT, "compiler", "timeout", "mlir-opt"),
    "C1/compiler_timeout": (Kind.TIMEOUT, "compiler", "timeout", "run.py"),
    "C1/verify_mismatch": (Kind.WRONG_VALUES, "compare:kernel", "functional_verify", "buffer buf1 (op aten.relu.default)"),
    "C2/spad_no_smaller_tile": (Kind.COMPILE_ERROR, "compile:spad", "spad_overflow", "usage 1048576 > budget 131072"),
    "C2/register_spill": (Kind.COMPILE_ERROR, "compile:registers", "register_spill", "register file spills"),
    "C2/spike_fault": (Kind.CRASH, "spike", "spike_fault", "exit code 200 (INVALID_SPAD_ACCESS)"),
    "C2/verify_mismatch": (Kind.WRONG_VALUES, "compare:kernel", "functional_verify", "buffer buf0 (op aten.add.Tensor)"),
}
LOGS = {f"{p.parent.parent.name}/{p.stem}": p for p in GENERATIONS.glob("*/logs/*.log")}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_generation_failure_text_is_classified(name):
    kind, stage, label, fragment = EXPECTED[name]
    verdict = classify(LOGS[name].read_text())
    assert (verdict.kind, verdict.stage, verdict.label) == (kind, stage, label)
    assert fragment in verdict.message()


def test_every_generation_log_has_an_expectation():
    assert {n for n in LOGS if not n.endswith("_ok")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(n for n in LOGS if n.endswith("_ok")))
def test_clean_generation_logs_name_no_failure(name):
    assert classify(LOGS[name].read_text()).label == "other"


def test_a_compiler_exit_is_a_compile_error_and_their_stage_text_still_wins():
    marker = "torchsim-diff: __exit__ compiler code 1: python /c/pytorchsim-triton-compiler k_spec.py\n"
    assert (classify(marker).kind, classify(marker).stage) == (Kind.COMPILE_ERROR, "compile:compiler")
    staged = marker + "CompilerError: the compiler pipeline failed (exit 1)\n  [transform] failed to legalize\n"
    assert classify(staged).stage == "compile:transform"


def test_traced_verify_names_the_first_buffer_over_tolerance():
    found = artifacts.traced_divergence(LOGS["C2/verify_trace_ok"].read_text(), rtol=1e-4, atol=1e-4)
    assert found["kernel_name"] == "buf1" and "aten.mul.Tensor" in found["summary"]
    assert artifacts.traced_divergence(LOGS["C2/verify_trace_ok"].read_text(), rtol=0.1, atol=0.1) is None


WP = "/workspace/outputs/c4kbgc3nqzq"


@pytest.mark.parametrize("command, tool", [
    (f"riscv64-unknown-elf-gcc -march=rv64gcv {WP}/validation_wrapper.o {WP}/k.o -o {WP}/validation_binary -lm",
     "toolchain"),
    (f"riscv64-unknown-elf-objdump -d {WP}/validation_binary > {WP}/binary.dump", "toolchain"),
    (f"nm {WP}/validation_binary | grep 'kernel' | awk 'NR==1 {{print $1}}'", "toolchain"),
    (["riscv64-unknown-elf-readelf", "-s", f"{WP}/validation_binary"], "toolchain"),
    (f"spike --isa rv64gcv --varch=vlen:256,elen:64 /workspace/riscv-pk/build/pk {WP}/validation_binary a.raw", "spike"),
    (["/opt/vcix-env/spike/bin/spike", "--isa", "rv64gcv_zfh_xvcixaccel", "--base-path=/o/triton_x/launch-1/runtime",
      "/opt/vcix-env/pk/riscv64-unknown-elf/bin/pk", "/o/triton_x/k.elf", "in_ptr0.raw"], "spike"),
    (["python", "/c/pytorchsim-triton-compiler", "/o/triton_x/k_spec.py", "--from", "triton-compile"], "compiler"),
    (["python", "/t/triton-npu/run.py", "/o/triton_x/k_spec.py", "--from", "ttir"], "compiler"),
])
def test_link_and_binutils_are_the_toolchain_not_spike(command, tool):
    assert subprocess_limits.tool_of(command) == tool


def test_their_explicit_compiler_timeout_no_longer_outlives_ours(tmp_path, capfd):
    """C1/C2 run_pipeline passes timeout=1800 itself; our limit must still apply."""
    compiler = tmp_path / "pytorchsim-triton-compiler"
    compiler.write_text("#!/bin/sh\nsleep 5\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    with subprocess_limits.limited_subprocesses({"compiler": 0.5}) as ends:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([str(compiler), "k_spec.py", "--from", "triton-compile"], timeout=1800)
    assert [(e.tool, e.returncode, e.limit_s) for e in ends] == [("compiler", None, 0.5)]
    verdict = classify(capfd.readouterr().err)
    assert (verdict.kind, verdict.stage) == (Kind.TIMEOUT, "compiler")


# -- environment of a worker ----------------------------------------------------------------
C2_TREE = {"PyTorchSimDevice/CMakeLists.txt": "", "PyTorchSimCodegen/__init__.py": "",
           "Simulator/functional_verify.py": "", config.DEFAULT_CONFIGS["C2"]: "vpu_num_lanes: 256\n"}


def test_worker_env_sizes_spike_jobs_by_workers_and_turns_on_the_verify_trace(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSIM_DIR", _tree(tmp_path, C2_TREE))
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    monkeypatch.delenv("TORCHSIM_SPIKE_JOBS", raising=False)
    env = TorchSimTritonRoute.worker_env({})
    assert env["TORCHSIM_SPIKE_JOBS"] == str(config.spike_jobs(4))
    assert config.spike_jobs(4, cpus=16) == 4 and config.spike_jobs(32, cpus=16) == 1
    assert env["TORCHSIM_FUNCTIONAL_VERIFY_TRACE"] == "1"
    stop = TorchSimTritonRoute.worker_env({"verify": "stop", "verify_rtol": "1e-3"})
    assert "TORCHSIM_FUNCTIONAL_VERIFY_TRACE" not in stop and stop["TORCHSIM_FUNCTIONAL_VERIFY_RTOL"] == "0.001"
    assert TorchSimTritonRoute.worker_env({"spike_jobs": "2"})["TORCHSIM_SPIKE_JOBS"] == "2"


def test_versions_are_read_without_setup(monkeypatch, tmp_path):
    """Bundles ask a fresh route for its versions: no setup() has run there."""
    pins = {"spike": {"repository": "PSAL-POSTECH/riscv-isa-sim", "release_tag": "v1.0.1", "asset_name": "s.tar.gz"},
            "pytorch_image": "pytorch/pytorch:2.8.0-cuda12.6-cudnn9-devel"}
    root = _tree(tmp_path, {"PyTorchSimDevice/CMakeLists.txt": "", "PyTorchSimFrontend/mlir/mlir_scheduling.py": "",
                            config.DEFAULT_CONFIGS["B"]: "vpu_num_lanes: 128\n",
                            "thirdparty/github-releases.json": json.dumps(pins)})
    monkeypatch.setenv("TORCHSIM_DIR", root)
    monkeypatch.delenv("TORCHSIM_PYTHON", raising=False)
    monkeypatch.delenv("TOGSIM_CONFIG", raising=False)
    facts = TorchSimMlirRoute().versions()
    assert facts["pytorchsim"] == "B" and facts["config_format"] == "yaml"
    assert facts["pin_spike"] == "PSAL-POSTECH/riscv-isa-sim@v1.0.1" and facts["torch"] == "?"


# -- capture conversion ---------------------------------------------------------------------
def _spike_writes_sum(runtime, wrong=False):
    """What Spike leaves after running the fixtures' add kernel: out_ptr0 = in_ptr0 + in_ptr1."""
    total = np.fromfile(os.path.join(runtime, "in_ptr0.raw"), np.float32) + np.fromfile(
        os.path.join(runtime, "in_ptr1.raw"), np.float32)
    if wrong:
        total[5] += 1.0
    total.tofile(os.path.join(runtime, "out_ptr0.raw"))


def _c1_run(tmp_path, wrong=False):
    dump = _dump(tmp_path, "C1")
    wd = os.path.join(dump, "triton_a3f09c2d7e1")
    spike = [sys.executable, "-m", "tnpu.spike", os.path.join(wd, "triton_npu_fused_add_0_spec.py"), wd]
    workdir.snapshot_spike_run(spike, "before")
    _spike_writes_sum(os.path.join(wd, "runtime"), wrong)
    workdir.snapshot_spike_run(spike, "after")
    return dump, wd


def _c2_run(tmp_path, wrong=False):
    dump = _dump(tmp_path, "C2")
    wd = os.path.join(dump, "triton_5be81f04c6a")
    runtime = os.path.join(wd, "launch-4242", "runtime")
    manifest = json.load(open(os.path.join(wd, "kernel.json")))
    raw_paths = {a["name"]: os.path.join(runtime, a["name"] + ".raw") for a in manifest["args"]}

    def launch(obj_dir, manifest, runtime, raw_paths, log, jobs=None, scalars=()):   # Simulator/spike_run.py
        _spike_writes_sum(runtime, wrong)
        return runtime
    workdir.wrap_launch(launch)(wd, manifest, runtime, raw_paths, print)
    return dump, wd


@pytest.mark.parametrize("run", [_c1_run, _c2_run], ids=["C1", "C2"])
def test_a_recorded_launch_converts_and_reproduces(tmp_path, run):
    dump, wd = run(tmp_path)
    launches = workdir.convert_dump(dump, str(tmp_path / "capture"))
    assert len(launches) == 1
    record = json.load(open(os.path.join(launches[0], "launch.json")))
    assert record["grid"] == [3, 1, 1] and record["buffers"]["buf0"].get("after")
    assert workdir.first_divergent_kernel(str(tmp_path / "capture")) is None


@pytest.mark.parametrize("run", [_c1_run, _c2_run], ids=["C1", "C2"])
def test_a_wrong_spike_output_names_the_kernel(tmp_path, run):
    dump, wd = run(tmp_path, wrong=True)
    workdir.convert_dump(dump, str(tmp_path / "capture"))
    found = workdir.first_divergent_kernel(str(tmp_path / "capture"))
    assert found is not None and found["kernel_name"] == workdir.read_meta(wd)["kernel_name"]


def test_c2s_spike_command_names_no_workdir_so_launch_itself_is_wrapped(tmp_path, monkeypatch):
    dump = _dump(tmp_path, "C2")
    runtime = os.path.join(dump, "triton_5be81f04c6a", "launch-4242", "runtime")
    command = ["/opt/vcix-env/spike/bin/spike", "--isa", "rv64gcv_zfh_xvcixaccel", f"--base-path={runtime}",
               "/opt/vcix-env/pk/riscv64-unknown-elf/bin/pk", "k.elf", "in_ptr0.raw", "in_ptr1.raw", "out_ptr0.raw"]
    workdir.snapshot_spike_run(command, "before")
    assert not os.path.exists(os.path.join(dump, "triton_5be81f04c6a", workdir.SNAPSHOT_DIR))
    module = type(sys)("Simulator.spike_run")
    module.launch = lambda *args, **kwargs: None
    monkeypatch.setitem(sys.modules, "Simulator", type(sys)("Simulator"))
    monkeypatch.setitem(sys.modules, "Simulator.spike_run", module)
    assert device.wrap_module_functions(["Simulator.spike_run", "no.such.module"], "launch", workdir.wrap_launch) \
        == ["Simulator.spike_run"]
    assert module.launch.torchsim_diff_wrapped


def test_an_unrecorded_c2_dump_converts_its_launch_dirs_as_inputs(tmp_path):
    dump = _dump(tmp_path, "C2")
    wd = os.path.join(dump, "triton_5be81f04c6a")
    assert workdir.launch_sources(wd) == [(os.path.join(wd, "launch-4242", "runtime"), None)]
    assert len(workdir.convert_dump(dump, str(tmp_path / "capture"))) == 1


# -- replay scripts, run against stand-ins for their tools -----------------------------------
STAND_IN_SPIKE = """import os, sys
import numpy as np
def write_sum(runtime):
    a = np.fromfile(os.path.join(runtime, "in_ptr0.raw"), np.float32)
    b = np.fromfile(os.path.join(runtime, "in_ptr1.raw"), np.float32)
    out = a + b
    if os.environ.get("STAND_IN_WRONG"):
        out[5] += 1.0
    out.tofile(os.path.join(runtime, "out_ptr0.raw"))
"""


def _executable(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _bundle(tmp_path, run, name):
    dump, wd = run(tmp_path)
    launches = workdir.convert_dump(dump, str(tmp_path / "capture"), generation=name)
    dest = tmp_path / "repro"
    kernel_repro.export_reproducer(launches[0], str(dest), generation=name, pytorchsim_workdir=wd)
    return dest


def _replay(dest, env, wrong=False):
    bin_dir = dest.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(sys.executable)      # compare_outputs.py needs numpy
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", PYTHONPATH="poison", **env)
    if wrong:
        env["STAND_IN_WRONG"] = "1"
    return subprocess.run(["sh", str(dest / "replay.sh")], capture_output=True, text=True, env=env)


def test_c1_replay_script_compiles_runs_spike_and_compares(tmp_path):
    dest = _bundle(tmp_path, _c1_run, "C1")
    tnpu = tmp_path / "triton-npu"
    _executable(tnpu / "run.py", "import os, sys\nassert os.environ.get('PYTHONPATH') is None\n"
                "assert sys.argv[2:6] == ['--from', 'ttir', '--to', 'binary'], sys.argv\n")
    _executable(tnpu / "tnpu" / "__init__.py", "")
    _executable(tnpu / "tnpu" / "spike.py", STAND_IN_SPIKE + "write_sum(os.path.join(sys.argv[2], 'runtime'))\n")
    env = {"TORCHSIM_DIR": str(tmp_path), "TNPU_DIR": str(tnpu), "TNPU_PYTHON": sys.executable}
    done = _replay(dest, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches the interpreter" in done.stdout
    assert _replay(dest, env, wrong=True).returncode == 1


def test_c2_replay_script_uses_their_compiler_target_and_spike_launcher(tmp_path):
    dest = _bundle(tmp_path, _c2_run, "C2")
    assert (dest / "target.json").is_file() and (dest / "run_spike.py").is_file()
    compiler = tmp_path / "pytorchsim-triton-compiler-checkout"
    _executable(compiler / "pytorchsim-triton-compiler",
                "import os, sys\nassert os.environ.get('PYTHONPATH') is None\n"
                "assert os.path.isfile(os.environ['TORCHSIM_COMPILE_TARGET'])\n"
                "assert sys.argv[2:6] == ['--from', 'triton-compile', '--to', 'torchsim-compile'], sys.argv\n")
    torchsim = tmp_path / "PyTorchSim"
    _executable(torchsim / "Simulator" / "__init__.py", "")
    _executable(torchsim / "Simulator" / "spike_run.py", STAND_IN_SPIKE +
                "def launch(obj_dir, manifest, runtime, raw_paths, log, jobs=None, scalars=()):\n"
                "    assert jobs == 1 and os.path.isfile(os.path.join(obj_dir, 'kernel.json'))\n"
                "    write_sum(runtime)\n")
    env = {"TORCHSIM_DIR": str(torchsim), "TORCHSIM_COMPILE_DIR": str(compiler),
           "TORCHSIM_COMPILE_PYTHON": sys.executable, "TORCHSIM_PYTHON": sys.executable}
    done = _replay(dest, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "matches the interpreter" in done.stdout
    assert _replay(dest, env, wrong=True).returncode == 1


@pytest.mark.parametrize("name", ["A", "B"])
def test_mlir_generations_have_no_kernel_reproducer_and_say_why(tmp_path, name):
    dump, _ = _c1_run(tmp_path)
    launches = workdir.convert_dump(dump, str(tmp_path / "capture"))
    with pytest.raises(ValueError, match="only the MLIR route"):
        kernel_repro.export_reproducer(launches[0], str(tmp_path / "repro"), generation=name)
