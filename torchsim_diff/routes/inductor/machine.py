"""What Inductor's C++ backend works out once per machine, shared by every worker.

Each worker has its own Inductor cache folder (parallel workers never share one), so
whatever Inductor keeps there it rebuilt in every worker before its first case. Two
things in it depend on the machine alone and are shared through one folder instead:

- the precompiled C++ header (7-16 s per worker here);
- the CPU's vector ISA checks that passed: Inductor compiles a test library per ISA (and
  per feature: VNNI, bf16) and loads it in a child interpreter, in every process. That is
  4-9 s per worker start here, and about 40 s per process on torch 2.11, whose child
  imports torch.

The folder is `~/.cache/torchsim-diff/inductor-pch`, or TORCHSIM_DIFF_PCH_DIR (`off`: one
per worker, as Inductor does by itself, for measuring what sharing saves).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile

PCH_DIR_ENV = "TORCHSIM_DIFF_PCH_DIR"


def shared_folder() -> str | None:
    folder = os.environ.get(PCH_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "torchsim-diff", "inductor-pch")
    return None if folder == "off" else folder


def share_precompiled_headers() -> None:
    """A header's file name hashes the compiler, its flags and the preprocessed text, and it
    is built under a file lock: the first worker on a machine builds it, the others (and
    later campaigns) only read it."""
    from torch._inductor import codecache
    folder = shared_folder()
    if folder is None or not hasattr(codecache, "_HEADER_DIR"):
        return      # a torch without this layout keeps headers per worker: slower, same results
    codecache._HEADER_DIR = folder
    codecache._HEADER_LOCK_DIR = os.path.join(folder, "locks")


def share_vec_isa_checks() -> None:
    """Each ISA check (a test library for an ISA's compiler flags, loaded in a child) that
    passes on a machine is recorded there, keyed by torch, compiler, flags and test code; a
    later worker takes the recorded pass instead of compiling and loading again. A check
    that fails is never recorded (a probe can time out under load), so every worker
    repeats it, as Inductor does by itself. Either way Inductor gets the answer the check
    gives on this machine, and picks the same ISA and flags."""
    from torch._inductor import cpu_vec_isa
    folder = shared_folder()
    real_check = getattr(cpu_vec_isa.VecISA, "check_build", None)
    if folder is None or real_check is None or getattr(real_check, "shared", False):
        return      # switched off, a torch without this check (it checks as it does), or done

    def check_build(isa, code: str) -> bool:
        path = os.path.join(folder, f"vec-isa-{_check_key(str(isa), isa.build_arch_flags(), code)}.ok")
        if os.path.exists(path):
            return True
        passed = real_check(isa, code)
        if passed:
            _touch_atomically(path)
        return passed

    check_build.shared = True
    cpu_vec_isa.VecISA.check_build = check_build


def _check_key(*check: str) -> str:
    import torch
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or ""
    try:
        compiler_stamp = os.stat(os.path.realpath(compiler)).st_mtime_ns if compiler else 0
    except OSError:
        compiler_stamp = 0
    text = json.dumps([torch.__version__, sys.version, compiler, compiler_stamp, *check])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _touch_atomically(path: str) -> None:
    """Workers starting together may each record it; a reader sees the file whole or not at all."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, scratch = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        os.close(fd)
        os.replace(scratch, path)
    except OSError:
        pass        # a read-only home: each worker checks for itself, as without sharing
