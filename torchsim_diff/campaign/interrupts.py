"""SIGTERM ends a run as Ctrl-C does: records kept, summary and report printed.

The command line and the pytest plugin both turn SIGTERM into `Terminated`, a
KeyboardInterrupt, raised in the main thread wherever the run is; a second SIGTERM ends the
process at once (the default handler is back by then).

    >>> with sigterm_as_interrupt():
    ...     run_campaign(opts)          # a SIGTERM raises Terminated here
"""
from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt (`signum` says which it was)."""

    signum = signal.SIGTERM


def _raise_terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_DFL)     # a second SIGTERM ends the process at once
    raise Terminated(f"{signal.Signals(signum).name} received")


@contextlib.contextmanager
def sigterm_as_interrupt(*, only_over_default: bool = False):
    """SIGTERM raises Terminated in the main thread inside the block; the handler before is put
    back after. only_over_default: leave SIGTERM alone when someone else already handles it
    (a test runner inside another program). Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread() or (
            only_over_default and signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
