"""Output whose reader may leave: `fuzz ... | head -1`, or a terminal that hung up.

Once the reader is gone, a write fails (EPIPE for a pipe, EIO for a terminal). The command
must still finish its work, write its report and end with its own exit status, so its
standard streams are wrapped: the first failed write turns the stream into one that
drops what it is given (its descriptor then points at /dev/null, so that what is still
buffered is dropped at exit too, instead of an error that changes the exit status).

    >>> with output_may_close():
    ...     return command(args)
"""
from __future__ import annotations

import contextlib
import errno
import os
import sys

GONE = (errno.EPIPE, errno.EIO)


class OutputThatMayClose:
    """A text stream that stops writing, silently, once its reader is gone."""

    def __init__(self, stream):
        self._stream = stream
        self.closed_early = False

    def write(self, text: str) -> int:
        self._guarded(self._stream.write, text)
        return len(text)

    def flush(self) -> None:
        self._guarded(self._stream.flush)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _guarded(self, call, *args) -> None:
        if self.closed_early:
            return
        try:
            call(*args)
        except OSError as exc:
            if exc.errno not in GONE:
                raise
            self._gone()

    def _gone(self) -> None:
        self.closed_early = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self._stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            pass                    # a stream without a descriptor (a test's capture): nothing is buffered


@contextlib.contextmanager
def output_may_close():
    """sys.stdout and sys.stderr wrapped (OutputThatMayClose) inside the block, flushed at its
    end (where a reader gone during the last lines is noticed) and put back."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = OutputThatMayClose(sys.stdout), OutputThatMayClose(sys.stderr)
    try:
        yield
    finally:
        for wrapped in (sys.stdout, sys.stderr):
            if isinstance(wrapped, OutputThatMayClose):
                wrapped.flush()
        sys.stdout, sys.stderr = streams
