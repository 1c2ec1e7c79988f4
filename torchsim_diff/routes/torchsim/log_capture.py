"""The case's log: everything PyTorchSim and its simulators print, captured at the fd level.

PyTorchSim reports through Python logging (a StreamHandler on stderr), print() and the
output of Spike / gem5 / TOGSim subprocesses. Redirecting file descriptors 1 and 2
catches all of them, including output of children that inherit the descriptors, and the
file survives a crash of the worker itself (it is written as it goes, into the case's
artifact folder). The worker's protocol does not use fds 1/2, so this is safe.
"""
from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def captured_output(path: str):
    """Send fds 1 and 2 to `path` (appended) for the duration of the block.

    One line on the original stderr names the file first, so a worker that dies inside
    the block (a simulator crashing the process) leaves a pointer in the worker's log.
    """
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.write(2, f"torchsim-diff: PyTorchSim output of this case goes to {path}\n".encode())
    saved = [os.dup(1), os.dup(2)]
    saved_streams = sys.stdout, sys.stderr
    with open(path, "ab", buffering=0) as log:
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            # print() goes through sys.stdout/sys.stderr, which a host (pytest) may have
            # replaced with objects that are not fds 1/2: point them at the fds too.
            sys.stdout = open(1, "w", buffering=1, closefd=False, errors="replace")
            sys.stderr = open(2, "w", buffering=1, closefd=False, errors="replace")
            yield path
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            sys.stdout, sys.stderr = saved_streams
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def read_text(path: str, limit: int = 4 << 20) -> str:
    """The last `limit` bytes of a log, decoded leniently ("" when absent)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
