"""SIGTERM and SIGHUP end a run as Ctrl-C does: records kept, summary and report printed.

The command line and the pytest plugin both turn SIGTERM, and SIGHUP (the terminal closed),
into `Terminated`, a KeyboardInterrupt, raised in the main thread wherever the run is; a
second signal of the same kind ends the process at once (the default handler is back by
then). A SIGHUP that is ignored when the block begins (`nohup`) stays ignored.

    >>> with sigterm_as_interrupt():
    ...     run_campaign(opts)          # a SIGTERM or SIGHUP raises Terminated here

The exit status of a run a signal ended is 128 + the signal's number, as a shell gives:
130 for Ctrl-C (SIGINT), 143 for SIGTERM, 129 for SIGHUP (`exit_status`).
"""
from __future__ import annotations

import contextlib
import signal
import threading

HANDLED = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C raises KeyboardInterrupt (`signum` says which)."""

    def __init__(self, message: str = "", signum: int = signal.SIGTERM):
        super().__init__(message)
        self.signum = signum


def exit_status(signum: int) -> int:
    """The status of a command a signal ended, as a shell reports it (128 + its number)."""
    return 128 + int(signum)


def signal_of(exc: KeyboardInterrupt) -> int:
    """Which signal an interrupt stands for: Terminated's, else SIGINT (Ctrl-C)."""
    return getattr(exc, "signum", signal.SIGINT)


def _raise_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)     # a second one ends the process at once
    raise Terminated(f"{signal.Signals(signum).name} received", signum)


def _takes_over(signum: int, only_over_default: bool) -> bool:
    current = signal.getsignal(signum)
    if signum == signal.SIGHUP and current is signal.SIG_IGN:
        return False                          # nohup: hangups are to be ignored
    return not only_over_default or current is signal.SIG_DFL


@contextlib.contextmanager
def sigterm_as_interrupt(*, only_over_default: bool = False):
    """SIGTERM and SIGHUP raise Terminated in the main thread inside the block; the handlers
    before are put back after. only_over_default: leave a signal alone when someone else
    already handles it (a test runner inside another program). Outside the main thread
    nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_terminated)
                for signum in HANDLED if _takes_over(signum, only_over_default)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
