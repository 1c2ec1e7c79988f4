"""One job in flight on a background thread while the caller prepares the next.

A campaign draws its next case with Hypothesis (about 60 ms of pure Python) while the route
worker compiles the current one; done one after the other, the drawing was harness time on
every case. The thread only runs cases (it waits on the worker most of the time, without
the GIL); the caller alone writes what comes back, so an interrupted run writes nothing of
the case it abandoned.

    >>> pipe = OneAhead(run_cases)
    >>> for done in pipe.submit(batch):     # the previous batch's result, if any
    ...     write(done)
    >>> for done in pipe.drain():
    ...     write(done)
"""
from __future__ import annotations

import concurrent.futures


class OneAhead:
    """Runs `work(item)` for one item at a time on a background thread."""

    def __init__(self, work):
        self.work = work
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="torchsim-diff-cases")
        self._future = None

    def submit(self, item) -> list:
        """Start `item` once the previous one is done; [the previous one's result] or []."""
        done = self._finish()
        self._future = self._pool.submit(self.work, item)
        return done

    def drain(self) -> list:
        """Wait for the item in flight: [its result] or []."""
        done = self._finish()
        self._pool.shutdown(wait=True)
        return done

    def abandon(self) -> None:
        """Wait for the item in flight and drop its result (and any error it raised)."""
        if self._future is not None:
            concurrent.futures.wait([self._future])
            self._future = None
        self._pool.shutdown(wait=True)

    def _finish(self) -> list:
        if self._future is None:
            return []
        future, self._future = self._future, None
        return [future.result()]
