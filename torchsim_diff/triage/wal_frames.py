"""Frames of a SQLite write-ahead log that SQLite will silently drop.

SQLite reads a WAL (the `-wal` file beside a database in WAL mode) frame by frame and stops
at the first frame whose checksum fails: that frame and every later one are ignored, with no
error. A damaged frame in a bucket history's log therefore reads as buckets that were never
recorded, and the next write resets the log, losing them for good. `dropped_frames` counts,
before SQLite opens the file, the frames of the log's current generation (those carrying
the header's salts) that lie past a frame SQLite would reject; 0 means SQLite reads all it
was given. Frames left over from an earlier generation (other salts) are normal, as is a
last transaction without its commit frame (a writer killed mid-commit): neither counts.

The format is SQLite's (https://www.sqlite.org/fileformat2.html#walformat): a 32-byte
header, then frames of a 24-byte header and one page; each checksum runs on from the last.

    >>> dropped_frames("reports/buckets.sqlite-wal")
    0
"""
from __future__ import annotations

import struct

HEADER_BYTES = 32
FRAME_HEADER_BYTES = 24
MAGIC_LITTLE, MAGIC_BIG = 0x377F0682, 0x377F0683
_MASK = 0xFFFFFFFF


def dropped_frames(wal_path: str, max_bytes: int) -> int:
    """Frames of the log at `wal_path` that SQLite will not read although they belong to it;
    0 when the log is absent, empty or whole. A log larger than `max_bytes` is not read (0)."""
    try:
        with open(wal_path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        return 0
    if len(data) <= HEADER_BYTES or len(data) > max_bytes:
        return 0
    return _dropped(data)


def _dropped(data: bytes) -> int:
    magic, _version, page_size, _seq, salt1, salt2, check1, check2 = struct.unpack(">8I", data[:HEADER_BYTES])
    frame_bytes = FRAME_HEADER_BYTES + page_size
    frames = (len(data) - HEADER_BYTES) // frame_bytes if _page_size_ok(page_size) else 0
    if magic not in (MAGIC_LITTLE, MAGIC_BIG) or not frames:
        return frames               # a header SQLite rejects: it reads none of the frames after it
    order = ">" if magic == MAGIC_BIG else "<"
    sums = _checksum(data[:24], 0, 0, order)
    if sums != (check1, check2):
        return frames
    for index in range(frames):
        start = HEADER_BYTES + index * frame_bytes
        head = data[start:start + FRAME_HEADER_BYTES]
        _page, _commit, f_salt1, f_salt2, f_check1, f_check2 = struct.unpack(">6I", head)
        if (f_salt1, f_salt2) != (salt1, salt2):
            return 0                # the rest is an earlier generation's, as SQLite leaves it
        sums = _checksum(head[:8] + data[start + FRAME_HEADER_BYTES:start + frame_bytes], *sums, order)
        if sums != (f_check1, f_check2):
            return _same_generation(data, index, frames, frame_bytes, (salt1, salt2))
    return 0


def _same_generation(data: bytes, first_bad: int, frames: int, frame_bytes: int, salts: tuple) -> int:
    """Frames from `first_bad` on that carry this generation's salts."""
    count = 0
    for index in range(first_bad, frames):
        start = HEADER_BYTES + index * frame_bytes
        if struct.unpack(">2I", data[start + 8:start + 16]) == salts:
            count += 1
    return count


def _page_size_ok(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


def _checksum(data: bytes, s0: int, s1: int, order: str) -> tuple:
    words = struct.unpack(f"{order}{len(data) // 4}I", data)
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & _MASK
        s1 = (s1 + words[i + 1] + s0) & _MASK
    return s0, s1
