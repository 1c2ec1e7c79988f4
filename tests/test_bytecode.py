"""Bytecode of the Pythons a campaign starts, on machines whose environment forbids writing it."""
import os
import subprocess
import sys

import pytest

from torchsim_diff import bytecode
from torchsim_diff.routes.triton.launch_replay import executor_env
from torchsim_diff.worker.client import RouteWorker


def test_an_environment_that_forbids_bytecode_writes_it_to_the_shared_folder(tmp_path):
    env = {"PYTHONDONTWRITEBYTECODE": "1", bytecode.DIR_ENV: str(tmp_path)}
    bytecode.redirect(env)
    assert env == {"PYTHONPYCACHEPREFIX": str(tmp_path), bytecode.DIR_ENV: str(tmp_path)}


@pytest.mark.parametrize("env", [
    {},                                                              # Python writes bytecode as usual
    {"PYTHONDONTWRITEBYTECODE": ""},                                 # empty: not set, for Python too
    {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/elsewhere"},
    {"PYTHONDONTWRITEBYTECODE": "1", bytecode.DIR_ENV: "off"},
])
def test_other_environments_are_left_alone(env):
    before = dict(env)
    bytecode.redirect(env)
    assert env == before


def test_a_child_started_with_the_redirected_environment_shares_its_bytecode(tmp_path):
    source, folder = tmp_path / "src", tmp_path / "pycache"
    source.mkdir()
    (source / "some_module.py").write_text("VALUE = 1\n")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(source), **{bytecode.DIR_ENV: str(folder)})
    env.pop("PYTHONPYCACHEPREFIX", None)
    bytecode.redirect(env)
    subprocess.run([sys.executable, "-c", "import some_module"], env=env, check=True)
    assert [p.name for p in folder.rglob("some_module*.pyc")]
    assert not (source / "__pycache__").exists()


def test_route_workers_and_kernel_replays_are_started_with_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    monkeypatch.setenv(bytecode.DIR_ENV, str(tmp_path))
    worker_env = RouteWorker("eager", work_root=str(tmp_path / "work")).environment()
    for env in (worker_env, executor_env("interpreter")):
        assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path) and "PYTHONDONTWRITEBYTECODE" not in env


def test_a_process_redirected_at_run_time_shares_it_too_and_so_do_its_children(tmp_path):
    """What the pytest plugin does in the controller, before xdist starts its workers."""
    source, folder = tmp_path / "src", tmp_path / "pycache"
    source.mkdir()
    for name in ("mine", "my_childs"):
        (source / f"{name}.py").write_text("VALUE = 1\n")
    program = ("import subprocess, sys\n"
               "from torchsim_diff import bytecode\n"
               "bytecode.redirect_this_process()\n"
               "import mine\n"
               "subprocess.run([sys.executable, '-c', 'import my_childs'], check=True)\n")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(bytecode.__file__)))
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=os.pathsep.join([str(source), package_parent]),
               **{bytecode.DIR_ENV: str(folder)})
    env.pop("PYTHONPYCACHEPREFIX", None)
    subprocess.run([sys.executable, "-c", program], env=env, check=True)
    assert sorted(p.name.split(".")[0] for p in folder.rglob("m*.pyc")) == ["mine", "my_childs"]
