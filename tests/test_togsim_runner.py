"""The TOGSim runner: found from arguments or the environment, unavailable with a reason
otherwise, and every way a run ends classified. TOGSim itself is replaced by small scripts
written here (a test double of the process boundary) that print a log, crash or hang."""
import os
import stat
import sys

import pytest

from torchsim_diff.timing.togsim_runner import (BINARY_VARIABLE, CONFIG_VARIABLE, Outcome, TOGSimInstall,
                                                Unavailable, find_togsim, run_togsim)

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "togsim")


def fake_togsim(tmp_path, body: str) -> TOGSimInstall:
    """An executable Python script standing in for TOGSim's Simulator."""
    script = tmp_path / "Simulator"
    script.write_text(f"#!{sys.executable}\nimport os, signal, sys, time\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return TOGSimInstall(str(script))


def run(install, tmp_path, timeout_s=10.0):
    folder = tmp_path / "run"
    folder.mkdir()
    return run_togsim(install, "g.onnx", "g.attr.json", "c.json", str(folder), timeout_s)


def real_log_text() -> str:
    with open(os.path.join(FIXTURES, "gemm_c1.log")) as log:
        return log.read()


# -- finding it ----------------------------------------------------------------------------
def test_unset_variable_is_unavailable_with_what_to_set():
    found = find_togsim(environ={})
    assert isinstance(found, Unavailable) and BINARY_VARIABLE in found.reason


def test_a_path_that_is_no_executable_is_unavailable(tmp_path):
    plain = tmp_path / "Simulator"
    plain.write_text("")
    found = find_togsim(environ={BINARY_VARIABLE: str(plain)})
    assert isinstance(found, Unavailable) and "not an executable" in found.reason


def test_a_missing_config_is_unavailable(tmp_path):
    install = fake_togsim(tmp_path, "")
    found = find_togsim(environ={BINARY_VARIABLE: install.binary, CONFIG_VARIABLE: str(tmp_path / "none.json")})
    assert isinstance(found, Unavailable) and CONFIG_VARIABLE in found.reason


def test_the_argument_wins_over_the_environment(tmp_path):
    install = fake_togsim(tmp_path, "")
    found = find_togsim(binary=install.binary, environ={BINARY_VARIABLE: "/nonexistent"})
    assert found == TOGSimInstall(install.binary)


# -- how a run ends ------------------------------------------------------------------------
def test_a_finished_run_gives_its_figures_and_its_command(tmp_path):
    (tmp_path / "log.txt").write_text(real_log_text())
    install = fake_togsim(tmp_path, f"print(open({str(tmp_path / 'log.txt')!r}).read())")
    result = run(install, tmp_path)
    assert result.outcome is Outcome.OK and result.figures.total_cycles > 0
    assert result.command.startswith(install.binary) and "--models_list g.onnx" in result.command
    assert os.path.isfile(os.path.join(result.folder, "togsim.log"))


def test_an_abort_is_a_crash_naming_the_signal_and_the_assertion(tmp_path):
    install = fake_togsim(tmp_path, "print(\"Simulator: Core.cc:112: Assertion `x' failed.\", flush=True)\n"
                                    "os.kill(os.getpid(), signal.SIGABRT)")
    result = run(install, tmp_path)
    assert result.outcome is Outcome.CRASH
    assert "SIGABRT" in result.message and "Assertion" in result.message


def test_a_segfault_is_a_crash(tmp_path):
    result = run(fake_togsim(tmp_path, "os.kill(os.getpid(), signal.SIGSEGV)"), tmp_path)
    assert result.outcome is Outcome.CRASH and "SIGSEGV" in result.message


def test_an_error_exit_is_a_crash_with_the_error_line(tmp_path):
    install = fake_togsim(tmp_path, "print('[info] x'); print('[error] [TileGraphParser] Invalid node type...'); sys.exit(1)")
    result = run(install, tmp_path)
    assert result.outcome is Outcome.CRASH and result.returncode == 1
    assert "exit status 1" in result.message and "Invalid node type" in result.message


def test_no_end_within_the_limit_is_a_hang_and_the_process_is_gone(tmp_path):
    install = fake_togsim(tmp_path, "print(os.getpid(), flush=True)\ntime.sleep(60)")
    result = run(install, tmp_path, timeout_s=1.0)
    assert result.outcome is Outcome.HANG and result.seconds < 10
    pid = int(result.log_tail.split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_exit_zero_without_total_cycles_is_missing_total(tmp_path):
    truncated = real_log_text().split("Total execution cycles")[0]
    (tmp_path / "log.txt").write_text(truncated)
    install = fake_togsim(tmp_path, f"print(open({str(tmp_path / 'log.txt')!r}).read())")
    result = run(install, tmp_path)
    assert result.outcome is Outcome.MISSING_TOTAL and "Total execution cycles" in result.message


def test_exit_zero_without_a_core_line_is_an_incomplete_log(tmp_path):
    text = "\n".join(l for l in real_log_text().splitlines() if "Vector unit" not in l)
    (tmp_path / "log.txt").write_text(text)
    install = fake_togsim(tmp_path, f"print(open({str(tmp_path / 'log.txt')!r}).read())")
    result = run(install, tmp_path)
    assert result.outcome is Outcome.INCOMPLETE_LOG and "Vector unit" in result.message


def test_simulate_in_a_folder_named_relative_to_here_finds_its_files(tmp_path, monkeypatch):
    """TOGSim runs inside the folder: the files it is given must not be named relative to ours."""
    from torchsim_diff.timing.hw_config import HardwareConfig
    from torchsim_diff.timing.tog_kernels import ElementwiseTiling, elementwise
    from torchsim_diff.timing.togsim_runner import simulate
    pytest.importorskip("onnx")
    (tmp_path / "log.txt").write_text(real_log_text())
    install = fake_togsim(tmp_path, "import sys\nargs = sys.argv[1:]\n"
                                    "missing = [a for a in args[1::2] if not os.path.isfile(a)]\n"
                                    f"print(open({str(tmp_path / 'log.txt')!r}).read() if not missing else missing)")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    result = simulate(install, elementwise(ElementwiseTiling(8, 8, 8, 8)), HardwareConfig(), "run")
    assert result.outcome is Outcome.OK, result.message
