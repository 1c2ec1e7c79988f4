"""Bytecode for the Pythons a campaign starts, where the environment says not to write it.

Container images often set PYTHONDONTWRITEBYTECODE=1 and ship their packages without
`__pycache__` folders (the lent GPU machine's torch has none). Every Python that imports
torch, triton and Inductor there compiles them from source first: 12-14 s of CPU each. A
16-worker campaign starts more than 33 of them (the controller, xdist workers, a route worker
per xdist worker, kernel replays), so on such a machine start-up alone took a quarter of a
two-minute window's CPU.

`redirect(env)` gives such an environment one machine-wide folder for bytecode instead
(PYTHONPYCACHEPREFIX): the first process to import a module writes its bytecode there and
the others read it, while the package folders stay as the variable asked, untouched. An
environment that lets Python write bytecode, or names its own prefix, is left alone.

The folder is `~/.cache/torchsim-diff/pycache`, or TORCHSIM_DIFF_PYCACHE_DIR (`off`: leave
every environment as it is).
"""
from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

DIR_ENV = "TORCHSIM_DIFF_PYCACHE_DIR"


def shared_folder(env: MutableMapping = os.environ) -> str | None:
    chosen = env.get(DIR_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "torchsim-diff", "pycache")
    return None if chosen == "off" else chosen


def redirect(env: MutableMapping) -> None:
    """Let the Pythons started with `env` keep their bytecode in the shared folder."""
    folder = shared_folder(env)
    if folder is None or not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return
    del env["PYTHONDONTWRITEBYTECODE"]
    env["PYTHONPYCACHEPREFIX"] = folder


def redirect_this_process() -> None:
    """The same for this process's later imports and, through os.environ, every process it
    starts (pytest-xdist's workers among them)."""
    had_prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    redirect(os.environ)
    if os.environ.get("PYTHONPYCACHEPREFIX") != had_prefix and sys.pycache_prefix is None:
        sys.pycache_prefix, sys.dont_write_bytecode = os.environ["PYTHONPYCACHEPREFIX"], False
