"""What PyTorchSim's interpreter can import, asked of that interpreter in a subprocess.

The fuzzer runs under its own torch; PyTorchSim's environments pin other torch
versions (2.2, 2.8, 2.10). So `available()` cannot import PyTorchSim in-process: it
starts the configured interpreter once, with the device autoload switched off so the
probe is cheap, and reads back a JSON line.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess

PROBE_TIMEOUT_S = 120

# Modules each generation's route imports (found by importlib.util.find_spec only).
REQUIRED_MODULES = {
    "A": ("Scheduler.scheduler", "PyTorchSimFrontend"),
    "B": ("torch_openreg", "PyTorchSimFrontend"),
    "C1": ("torch_openreg", "PyTorchSimFrontend.triton_backend"),
    "C2": ("torch_openreg", "PyTorchSimCodegen"),
}

_PROBE_SOURCE = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[1])
found = {"python": sys.version.split()[0]}
try:
    import torch
    found["torch"] = torch.__version__
except Exception as exc:
    found["torch_error"] = repr(exc)
for name in sys.argv[2:]:
    try:
        found["module:" + name] = importlib.util.find_spec(name) is not None
    except Exception:
        found["module:" + name] = False
for name in ("triton", "numpy"):
    try:
        found[name] = __import__(name).__version__
    except Exception:
        pass
print("TORCHSIM_PROBE " + json.dumps(found))
"""


class ProbeFailed(Exception):
    """The interpreter could not be started or did not answer."""


@functools.lru_cache(maxsize=8)
def probe(python: str, torchsim_dir: str, modules: tuple) -> dict:
    """Versions and module availability as seen by `python` (cached per process)."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    try:
        done = subprocess.run([python, "-c", _PROBE_SOURCE, torchsim_dir, *modules],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeFailed(f"could not run TORCHSIM_PYTHON={python!r}: {exc}") from None
    for line in done.stdout.splitlines():
        if line.startswith("TORCHSIM_PROBE "):
            return json.loads(line[len("TORCHSIM_PROBE "):])
    tail = (done.stderr or done.stdout).strip()[-500:]
    raise ProbeFailed(f"TORCHSIM_PYTHON={python!r} exited with {done.returncode}: {tail}")


def missing_modules(found: dict, generation: str) -> list:
    """Required modules of `generation` that the probed interpreter cannot import."""
    return [m for m in REQUIRED_MODULES[generation] if not found.get("module:" + m)]
