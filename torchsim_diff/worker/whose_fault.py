"""Whose fault an exception is: torchsim-diff's own code, or the compiler/runtime under test.

An exception is ours when it is one of Python's programming-error types (TypeError,
KeyError, AttributeError, ...) and the innermost frame is in this package: a slip in the
oracle, layout, harness or a route adapter. RuntimeError and ValueError stay the
compiler's even then: bindings of compiled code (torch ops, torch-mlir, Spike wrappers)
raise those from C++ through our adapter's frame. Exception classes this package defines
(RouteFailure, a route's TtirError) are deliberate reports of a compiler failure. Our
faults are `tool_error`, never a compiler finding.

Worker-side module: standard library only.
"""
from __future__ import annotations

import os
import traceback

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
TRACEBACK_FILE = "tool_error.txt"
PROGRAMMING_ERRORS = (TypeError, KeyError, AttributeError, NameError, IndexError, AssertionError,
                      ZeroDivisionError, UnboundLocalError)


def is_ours(exc: BaseException) -> bool:
    """True when `exc` is a Python error raised by torchsim-diff's own code."""
    if type(exc) not in PROGRAMMING_ERRORS:
        return False
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and os.path.abspath(frames[-1].filename).startswith(PACKAGE_DIR)


def describe_ours(exc: BaseException, artifact_dir: str | None) -> tuple:
    """(message, artifact file names) for a fault of ours; the full traceback goes to a file."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {os.path.relpath(where.filename, PACKAGE_DIR)}:{where.lineno}" if where else ""
    message = f"torchsim-diff bug, not a compiler finding: {type(exc).__name__}: {exc}{at}"
    if not artifact_dir:
        return message + "\n" + text, []
    try:
        os.makedirs(artifact_dir, exist_ok=True)
        with open(os.path.join(artifact_dir, TRACEBACK_FILE), "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError:
        return message + "\n" + text, []
    return f"{message} (traceback in {TRACEBACK_FILE})", [TRACEBACK_FILE]
