"""Frames of a SQLite write-ahead log that SQLite will silently drop.

SQLite reads a WAL (the `-wal` file beside a database in WAL mode) frame by frame and stops
at the first frame whose checksum fails: that frame and every later one are ignored, with no
error. A damaged frame in a bucket history's log therefore reads as buckets that were never
recorded, and the next write resets the log, losing them for good. `dropped_frames` counts,
before SQLite opens the file, the frames of the log's current generation (those carrying
the header's salts) from the first one SQLite would reject up to the last commit frame after
it that is whole; 0 means SQLite reads every transaction that was committed. Each checksum runs
on from the one before, so a frame past a damaged one is judged from the checksum its
predecessor stored. Frames left over from an earlier generation (other salts) are normal, as
is a torn last transaction (a writer killed mid-commit, or one still writing while this reads):
no whole commit frame follows it, and it does not count.

The format is SQLite's (https://www.sqlite.org/fileformat2.html#walformat): a 32-byte
header, then frames of a 24-byte header and one page; each checksum runs on from the last.

    >>> dropped_frames(open("reports/buckets.sqlite-wal", "rb").read())
    0
"""
from __future__ import annotations

import struct

HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
MAGIC_LITTLE, MAGIC_BIG = 0x377F0682, 0x377F0683
_MASK = 0xFFFFFFFF


def dropped_frames(log: bytes) -> int:
    """Frames of the log (a `-wal` file's bytes) that SQLite will not read although they hold
    committed transactions; 0 when the log is empty or whole."""
    return _dropped(log) if len(log) > HEADER_BYTES else 0


def _dropped(data: bytes) -> int:
    magic, _version, page_size, _seq, salt1, salt2, check1, check2 = struct.unpack(">8I", data[:HEADER_BYTES])
    frames = (len(data) - HEADER_BYTES) // (FRAME_HEADER_BYTES + page_size) if _page_size_ok(page_size) else 0
    if magic not in (MAGIC_LITTLE, MAGIC_BIG) or not frames:
        return frames               # a header SQLite rejects: it reads none of the frames after it
    log = _Log(data, page_size, ">" if magic == MAGIC_BIG else "<", (salt1, salt2))
    sums = _checksum(data[:24], 0, 0, log.order)
    if sums != (check1, check2):
        return frames
    for index in range(frames):
        if not log.ours(index):
            return 0                # the rest is an earlier generation's, as SQLite leaves it
        sums = log.checksum(index, sums)
        if sums != log.stored(index):
            return log.committed_after(index, frames)
    return 0


class _Log:
    """The frames of one log: their headers, and each one's checksum run on from the one before."""

    def __init__(self, data: bytes, page_size: int, order: str, salts: tuple):
        self.data, self.frame_bytes, self.order, self.salts = data, FRAME_HEADER_BYTES + page_size, order, salts

    def head(self, index: int) -> tuple:
        start = HEADER_BYTES + index * self.frame_bytes
        return struct.unpack(">6I", self.data[start:start + FRAME_HEADER_BYTES])

    def ours(self, index: int) -> bool:
        return self.head(index)[2:4] == self.salts

    def stored(self, index: int) -> tuple:
        return self.head(index)[4:6]

    def checksum(self, index: int, sums: tuple) -> tuple:
        start = HEADER_BYTES + index * self.frame_bytes
        body = self.data[start:start + 8] + self.data[start + FRAME_HEADER_BYTES:start + self.frame_bytes]
        return _checksum(body, *sums, self.order)

    def committed_after(self, bad: int, frames: int) -> int:
        """Frames from `bad` up to the last commit frame after it that is whole (its checksum
        right when run on from the checksum its predecessor stored): data SQLite drops. 0 when
        none follows: a tail still being written, or a writer killed mid-commit."""
        last = None
        for index in range(bad + 1, frames):
            if not self.ours(index):
                break
            whole = self.checksum(index, self.stored(index - 1)) == self.stored(index)
            if whole and self.head(index)[1]:
                last = index
        return 0 if last is None else last - bad + 1


def _page_size_ok(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


def _checksum(data: bytes, s0: int, s1: int, order: str) -> tuple:
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & _MASK
        s1 = (s1 + words[i + 1] + s0) & _MASK
    return s0, s1
