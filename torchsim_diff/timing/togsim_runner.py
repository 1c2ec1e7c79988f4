"""Finding TOGSim, running it on one TOG with a time limit, and saying how the run ended.

TOGSim is not installable from a registry; a user builds it (PyTorchSim's `TOGSim/`) and
points torchsim-diff at the binary with TORCHSIM_DIFF_TOGSIM, and optionally at a hardware
config with TORCHSIM_DIFF_TOGSIM_CONFIG (else `HardwareConfig()` is written per run). Where it
is missing, `find_togsim` returns an `Unavailable` with a one-line reason instead of raising.

A run happens in its own folder (TOGSim writes beside its inputs) and ends as one of
`Outcome`: ok, crash (a signal, an abort or assert, a non-zero exit), hang (no end within the
time limit), missing_total (exit 0 without `Total execution cycles`) or incomplete_log.
"""
from __future__ import annotations

import dataclasses
import enum
import os
import shlex
import signal
import subprocess
import time
from typing import Optional, Union

from torchsim_diff.timing.togsim_log import FINISHED, TOTAL_LINE, LogError, TOGSimFigures, parse_log

BINARY_VARIABLE = "TORCHSIM_DIFF_TOGSIM"
CONFIG_VARIABLE = "TORCHSIM_DIFF_TOGSIM_CONFIG"
DEFAULT_TIMEOUT_S = 60.0
LOG_NAME = "togsim.log"


class Outcome(str, enum.Enum):
    OK = "ok"
    CRASH = "crash"
    HANG = "hang"
    MISSING_TOTAL = "missing_total"
    INCOMPLETE_LOG = "incomplete_log"


@dataclasses.dataclass(frozen=True)
class Unavailable:
    """TOGSim cannot run here; `reason` is one line saying why and what to set."""
    reason: str


@dataclasses.dataclass(frozen=True)
class TOGSimInstall:
    binary: str
    config: Optional[str] = None     # a user's hardware config; None: write one per run


@dataclasses.dataclass(frozen=True)
class RunResult:
    """How one TOGSim run ended, with what reproduces it (`command`, run in `folder`)."""
    outcome: Outcome
    message: str
    command: str
    folder: str
    seconds: float
    returncode: Optional[int] = None
    figures: Optional[TOGSimFigures] = None
    log_tail: str = ""


def find_togsim(binary: str | None = None, config: str | None = None,
                environ: dict | None = None) -> Union[TOGSimInstall, Unavailable]:
    """The TOGSim to use: the arguments, else the environment variables."""
    environ = os.environ if environ is None else environ
    binary = binary or environ.get(BINARY_VARIABLE)
    config = config or environ.get(CONFIG_VARIABLE) or None
    if not binary:
        return Unavailable(f"TOGSim not configured: set {BINARY_VARIABLE} to the path of its `Simulator` binary")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return Unavailable(f"{BINARY_VARIABLE}={binary!r} is not an executable file")
    if config is not None and not os.path.isfile(config):
        return Unavailable(f"{CONFIG_VARIABLE}={config!r} is not a file")
    return TOGSimInstall(os.path.abspath(binary), config and os.path.abspath(config))


def availability(environ: dict | None = None) -> tuple:
    """(available, one line): the binary and version-free facts, or why TOGSim cannot run here."""
    install = find_togsim(environ=environ)
    if isinstance(install, Unavailable):
        return False, install.reason
    try:
        import onnx  # noqa: F401 - the TOG writer's one dependency
    except ImportError:
        return False, "the onnx package is missing: pip install 'torchsim-diff[togsim]'"
    config = f"config {install.config}" if install.config else "simple DRAM config per run"
    return True, f"{install.binary}, {config}"


def command_for(install: TOGSimInstall, onnx_path: str, attr_path: str, config_path: str) -> list:
    return [install.binary, "--config", config_path, "--models_list", onnx_path, "--attributes_list", attr_path]


def run_togsim(install: TOGSimInstall, onnx_path: str, attr_path: str, config_path: str,
               folder: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> RunResult:
    """Run TOGSim once in `folder` (its log goes to `folder`/togsim.log) and classify the end."""
    command = command_for(install, onnx_path, attr_path, config_path)
    log_path = os.path.join(folder, LOG_NAME)
    started = time.monotonic()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            returncode = None
    seconds = time.monotonic() - started
    with open(log_path, "rb") as log:
        text = log.read().decode("utf-8", "replace")
    outcome, message, figures = classify(returncode, text, timeout_s)
    return RunResult(outcome, message, shlex.join(command), folder, round(seconds, 3), returncode,
                     figures, text[-2000:])


def classify(returncode: Optional[int], text: str, timeout_s: float) -> tuple:
    """(Outcome, one-line message, figures or None) for a run's exit status and log."""
    if returncode is None:
        return Outcome.HANG, f"no end within {timeout_s:g} s (killed)", None
    if returncode != 0:
        return Outcome.CRASH, crash_message(returncode, text), None
    try:
        return Outcome.OK, "ok", parse_log(text)
    except LogError as error:
        if error.line in (TOTAL_LINE, FINISHED):
            return Outcome.MISSING_TOTAL, f"exit 0 but {error}", None
        return Outcome.INCOMPLETE_LOG, str(error), None


def crash_message(returncode: int, text: str) -> str:
    """What killed it: the signal, and an assertion or exception text when the log has one."""
    if returncode < 0:
        what = f"killed by {_signal_name(-returncode)}"
    else:
        what = f"exit status {returncode}"
    for marker in ("Assertion", "terminate called", "[error]", "error:"):
        line = _first_line_with(text, marker)
        if line:
            return f"{what}: {line}"
    return what


def _first_line_with(text: str, marker: str) -> str:
    for line in text.splitlines():
        if marker in line:
            return line.strip()[:300]
    return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def simulate(install: TOGSimInstall, tog, hardware, folder: str,
             timeout_s: float = DEFAULT_TIMEOUT_S) -> RunResult:
    """Write `tog` (a `tog.TOG`) and the hardware config into `folder` and run TOGSim on them.
    `hardware` is a `HardwareConfig`; the install's own config file, when it has one, wins."""
    from torchsim_diff.timing.tog_writer import write_tog   # needs onnx (extra `togsim`)
    folder = os.path.abspath(folder)        # TOGSim runs in it: paths relative to here would miss
    onnx_path, attr_path = write_tog(tog, folder)
    config_path = install.config or hardware.write(os.path.join(folder, "config.json"))
    return run_togsim(install, onnx_path, attr_path, config_path, folder, timeout_s)
