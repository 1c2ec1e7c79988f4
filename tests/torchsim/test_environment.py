"""Generation detection, availability reasons, machine config and per-case isolation."""
import os
import sys
import types

import pytest

from torchsim_diff.routes.torchsim.torchsim import TorchSimMlirRoute, TorchSimTritonRoute
from torchsim_diff.routes.torchsim import config, generation

# Marker files of each generation's checkout, as PyTorchSim lays them out.
TREES = {
    "A": ["Scheduler/scheduler.py", "PyTorchSimFrontend/extension_device.cpp",
          "PyTorchSimFrontend/mlir/mlir_scheduling.py"],
    "B": ["PyTorchSimDevice/CMakeLists.txt", "PyTorchSimFrontend/mlir/mlir_scheduling.py",
          "Scheduler/scheduler.py"],
    "C1": ["PyTorchSimDevice/CMakeLists.txt", "PyTorchSimFrontend/mlir/mlir_scheduling.py",
           "PyTorchSimFrontend/triton_backend/__init__.py", "PyTorchSimFrontend/triton_backend/kernel_spec.py"],
    "C2": ["PyTorchSimDevice/CMakeLists.txt", "PyTorchSimCodegen/__init__.py", "Simulator/simulator.py",
           "PyTorchSimFrontend/mlir/mlir_scheduling.py"],
    "unknown": ["README.md", "PyTorchSimFrontend/extension_config.py"],
}
CONFIG_TEXT = ("num_cores: 1\nvpu_num_lanes: 128\nvpu_spad_size_kb_per_lane: 128\n"
               "vpu_vector_length_bits: 256\npytorchsim_functional_mode: 0\npytorchsim_timing_mode: 1\n"
               "dram_type: ramulator2\n")


def make_tree(root, name):
    for rel in TREES[name] + list(config.DEFAULT_CONFIGS.values()):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(CONFIG_TEXT if rel.endswith(".yml") else "")
    return str(root)


@pytest.mark.parametrize("tree, route, expected", [
    ("A", generation.MLIR_ROUTE, "A"), ("B", generation.MLIR_ROUTE, "B"),
    ("C1", generation.MLIR_ROUTE, "B"), ("C1", generation.TRITON_ROUTE, "C1"),
    ("C2", generation.TRITON_ROUTE, "C2"),
])
def test_generation_is_detected_from_files(tmp_path, tree, route, expected):
    assert generation.detect(route, make_tree(tmp_path, tree)).name == expected


@pytest.mark.parametrize("tree, route, fragment", [
    ("unknown", generation.TRITON_ROUTE, "PyTorchSimFrontend/triton_backend/__init__.py"),
    ("unknown", generation.MLIR_ROUTE, "Scheduler/scheduler.py"),
    ("B", generation.TRITON_ROUTE, "matches no PyTorchSim generation"),
    ("A", generation.TRITON_ROUTE, "matches no PyTorchSim generation"),
    ("C2", generation.MLIR_ROUTE, "registers only the Triton backend"),
])
def test_unknown_generation_is_refused_with_what_was_looked_for(tmp_path, tree, route, fragment):
    with pytest.raises(generation.UnknownGeneration, match=fragment.replace(".", r"\.")):
        generation.detect(route, make_tree(tmp_path, tree))


def test_c1_mlir_evidence_says_it_is_bs_route(tmp_path):
    assert "C1 checkout" in generation.detect(generation.MLIR_ROUTE, make_tree(tmp_path, "C1")).evidence


@pytest.mark.parametrize("route_class", [TorchSimMlirRoute, TorchSimTritonRoute])
def test_unavailable_without_interpreter(monkeypatch, route_class):
    monkeypatch.delenv("TORCHSIM_PYTHON", raising=False)
    ok, reason = route_class().available()
    assert not ok and "TORCHSIM_PYTHON is not set" in reason


def test_unavailable_without_checkout(monkeypatch):
    monkeypatch.setenv("TORCHSIM_PYTHON", sys.executable)
    monkeypatch.delenv("TORCHSIM_DIR", raising=False)
    ok, reason = TorchSimTritonRoute().available()
    assert not ok and "TORCHSIM_DIR is not set" in reason


def test_unknown_checkout_is_unavailable_never_guessed(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSIM_PYTHON", sys.executable)
    monkeypatch.setenv("TORCHSIM_DIR", make_tree(tmp_path, "unknown"))
    ok, reason = TorchSimTritonRoute().available()
    assert not ok and "matches no PyTorchSim generation" in reason


def test_interpreter_without_pytorchsim_is_unavailable(monkeypatch, tmp_path):
    """Our own interpreter has no torch_openreg: the probe must say so."""
    monkeypatch.setenv("TORCHSIM_PYTHON", sys.executable)
    monkeypatch.setenv("TORCHSIM_DIR", make_tree(tmp_path, "C1"))
    monkeypatch.delenv("TOGSIM_CONFIG", raising=False)
    ok, reason = TorchSimTritonRoute().available()
    assert not ok and "cannot import torch_openreg" in reason and "generation C1" in reason


def test_missing_machine_config_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHSIM_PYTHON", sys.executable)
    monkeypatch.setenv("TORCHSIM_DIR", make_tree(tmp_path, "C2"))
    ok, reason = TorchSimTritonRoute({"config": "configs/nope.yml"}).available()
    assert not ok and "configs/nope.yml" in reason and "does not exist" in reason


def test_worker_env_switches_the_triton_codegen_only_for_c1_triton(monkeypatch, tmp_path):
    root = make_tree(tmp_path, "C1")
    monkeypatch.setenv("TORCHSIM_DIR", root)
    triton_env = TorchSimTritonRoute.worker_env({})
    assert triton_env["TORCHSIM_TRITON_CODEGEN"] == "1"
    assert TorchSimMlirRoute.worker_env({})["TORCHSIM_TRITON_CODEGEN"] == "0"
    path = triton_env["PYTHONPATH"].split(os.pathsep)
    assert root in path and any(os.path.isdir(os.path.join(p, "torchsim_diff")) for p in path)


def test_machine_config_forces_functional_mode_and_keeps_the_rest(tmp_path):
    base = tmp_path / "base.yml"
    base.write_text(CONFIG_TEXT)
    written = config.write_machine_config(str(base), str(tmp_path / "m"), timing=False, generation="B")
    assert written.endswith(".yml")
    text = open(written).read()
    assert config.read_top_level(text, "pytorchsim_functional_mode") == "1"
    assert config.read_top_level(text, "pytorchsim_timing_mode") == "0"
    assert config.read_top_level(text, "vpu_num_lanes") == "128"
    assert text.count("pytorchsim_functional_mode") == 1


def test_each_program_gets_its_own_dump_and_inductor_cache(tmp_path, monkeypatch):
    """Kernel workdirs are keyed on source text alone: a shared dump lets one case's kernel
    answer for another's. Import-time copies of the paths (generations A/B) move too."""
    fake = types.ModuleType("PyTorchSimFrontend.extension_config")
    fake.CONFIG_TORCHSIM_DUMP_PATH = "/shared/outputs"
    monkeypatch.setitem(sys.modules, "PyTorchSimFrontend.extension_config", fake)
    for var in ("TORCHSIM_DUMP_PATH", "TORCHINDUCTOR_CACHE_DIR", "TORCHSIM_LOG_PATH", "TORCHSIM_TRITON_REPLAY"):
        monkeypatch.setenv(var, "unset")
    seen = []
    for name in ("a", "b"):
        env = config.CaseEnvironment(root=str(tmp_path / name), torchsim_dir=str(tmp_path),
                                     machine_config="m.yml", timing=False)
        env.apply()
        seen.append((os.environ["TORCHSIM_DUMP_PATH"], os.environ["TORCHINDUCTOR_CACHE_DIR"],
                     fake.CONFIG_TORCHSIM_DUMP_PATH))
        assert os.environ["TORCHSIM_TRITON_REPLAY"] == "0"
        assert os.path.isdir(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]
    assert seen[1][2] == seen[1][0]
