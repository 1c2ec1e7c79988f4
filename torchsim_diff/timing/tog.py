"""A tile-operation graph (TOG): the program TOGSim times, as plain dataclasses.

A TOG is a loop nest over tiles. Its leaves are DMA loads and stores (a tile of a buffer at an
offset given by the enclosing loop indices), waits for asynchronous loads, and compute nodes
with a cost in cycles. TOGSim reads it as ONNX (`tog_writer.py`); this module holds the model
and the rules of the format that TOGSim relies on without checking them itself (it crashes,
aborts or silently mis-times when they are broken), so that a TOG we generate and a crash we
report are both known to follow the format.

Facts of the format (TOGSim's `TileGraphParser`): the outermost loops of type `outer_loop` span
the tiles that are distributed over cores; an `accumulation_loop` carries a partial result
(its index becomes part of a load's tag); an `inner_loop` unrolls into the enclosing tile; a
load is issued once per distinct tag within a tile, so a tag names a tile of a buffer.
"""
from __future__ import annotations

import dataclasses
import enum
import math
from typing import Iterator, Sequence, Union


class LoopKind(str, enum.Enum):
    """How TOGSim treats a loop (`torchsim_loop_type`)."""
    OUTER = "outer_loop"                 # parallel over tiles: one subgraph per iteration
    ACCUMULATION = "accumulation_loop"   # a reduction carried across iterations
    INNER = "inner_loop"                 # unrolled into the enclosing tile
    NORMAL = "loop"                      # sequential, one tile per iteration


class ComputeKind(enum.IntEnum):
    """Which unit a compute node occupies (`torchsim_compute_type`)."""
    VECTOR = 0
    MATMUL = 1
    PRELOAD = 2     # loading weights into the systolic array: a matmul-unit operation


ELEMENT_SIZES = (1, 2, 4, 8)
MAX_TILE_DIMS = 4               # TOGSim's DMA walks tiles of at most 4 dims
CONSTANT_INDEX_PREFIX = "c"     # a loop index "c5" means the constant 5 in TOGSim


class InvalidTOG(ValueError):
    """A TOG that breaks a rule of the format; the message names the node and the rule."""


@dataclasses.dataclass(frozen=True)
class Compute:
    """A compute node: `cycles` on one unit of `kind`; a matmul may overlap the previous one by
    `overlapping_cycles` (a systolic array's pipelining)."""
    cycles: int
    kind: ComputeKind = ComputeKind.VECTOR
    overlapping_cycles: int = 0

    def occupancy(self) -> int:
        """Cycles its unit is busy at least: its cost less what may overlap."""
        return max(self.cycles - self.overlapping_cycles, 0)


@dataclasses.dataclass(frozen=True)
class Transfer:
    """A DMA of one tile of `buffer` (an argument name, e.g. "arg0").

    The tile is `tile_size` elements per dim (at most 4 dims), `tile_stride` elements apart in
    DRAM; its start is the buffer's byte address plus sum(index * stride) over `loop_indices` /
    `loop_strides`, in bytes (TOGSim adds it to the address unscaled; an index is the loop's
    value, not its iteration count). `tag_indices` and `tag_strides` name which tile it is;
    loads with equal tags in one tile are issued once.
    """
    buffer: str
    tile_size: tuple
    tile_stride: tuple
    loop_indices: tuple
    loop_strides: tuple
    tag_indices: tuple
    tag_strides: tuple
    element_size: int = 4
    is_async: bool = False

    def tile_elements(self) -> int:
        return math.prod(self.tile_size)

    def tile_bytes(self) -> int:
        return self.tile_elements() * self.element_size


@dataclasses.dataclass(frozen=True)
class Load(Transfer):
    """DRAM -> scratchpad. An asynchronous load is waited for by a `Wait` on the same buffer."""


@dataclasses.dataclass(frozen=True)
class Store(Transfer):
    """Scratchpad -> DRAM. TOGSim gives every store one tag, so it takes exactly one."""


@dataclasses.dataclass(frozen=True)
class Wait:
    """Waits for the asynchronous load of `buffer` whose tag these indices give; an index of an
    accumulation loop takes stride -1 (TOGSim's marker for "part of the accumulation tag")."""
    buffer: str
    tag_indices: tuple
    tag_strides: tuple
    tag_dividers: tuple


@dataclasses.dataclass(frozen=True)
class Loop:
    """`for index in range(start, end, stride)` over `body`."""
    index: str
    end: int
    body: tuple
    kind: LoopKind = LoopKind.NORMAL
    start: int = 0
    stride: int = 1

    def trip_count(self) -> int:
        return len(range(self.start, self.end, self.stride))


Node = Union[Loop, Load, Store, Wait, Compute]


@dataclasses.dataclass(frozen=True)
class TOG:
    """A whole graph: its loop nest, the DRAM address of each buffer, and the systolic array
    size the graph was tiled for (TOGSim's metadata `systolic_size`)."""
    name: str
    body: tuple
    addresses: dict
    systolic_size: int = 128

    def walk(self) -> Iterator[tuple]:
        """Every node with the loops that enclose it, outermost first."""
        yield from _walk(self.body, ())

    def loops(self) -> list:
        return [node for node, _ in self.walk() if isinstance(node, Loop)]

    def compute_occupancy(self) -> dict:
        """Busy cycles per compute kind over the whole run: each compute's occupancy times the
        trip counts of its loops (what at least one unit of that kind must spend)."""
        return self._compute_totals(Compute.occupancy)

    def compute_work(self) -> dict:
        """Cycles of compute per kind over the whole run: each compute's whole cost times the
        trip counts of its loops (the most the units of that kind can be busy with it)."""
        return self._compute_totals(lambda node: node.cycles)

    def _compute_totals(self, cost) -> dict:
        totals = {kind: 0 for kind in ComputeKind}
        for node, loops in self.walk():
            if isinstance(node, Compute):
                totals[node.kind] += cost(node) * math.prod(l.trip_count() for l in loops)
        return totals

    def outer_tiles(self) -> int:
        """Tiles TOGSim distributes over cores: the product of the leading outer loops."""
        count, body = 1, self.body
        while len(body) >= 1 and isinstance(body[0], Loop) and body[0].kind is LoopKind.OUTER:
            count *= body[0].trip_count()
            body = body[0].body
        return count


def _walk(body: Sequence, loops: tuple) -> Iterator[tuple]:
    for node in body:
        yield node, loops
        if isinstance(node, Loop):
            yield from _walk(node.body, loops + (node,))


# -- validation ----------------------------------------------------------------------------
def validate(tog: TOG) -> TOG:
    """Return `tog` if it follows the format; raise InvalidTOG naming the first broken rule."""
    _require(tog.systolic_size > 0, f"systolic_size={tog.systolic_size!r} must be positive")
    _require(len(tog.body) == 1 and isinstance(tog.body[0], Loop) and tog.body[0].kind is LoopKind.OUTER,
             "the graph must be one outermost loop of kind outer_loop (TOGSim splits tiles "
             "over cores by its outer loops and indexes past the end without one)")
    seen_indices = set()
    for node, loops in tog.walk():
        _check_node(node, loops, tog, seen_indices)
    for node, _ in tog.walk():
        if isinstance(node, Loop):
            _check_waits_follow_async_loads(node.body)
    return tog


def _check_waits_follow_async_loads(body: tuple) -> None:
    """An asynchronous load needs a later Wait on its buffer in the same body, and a Wait needs
    an earlier asynchronous load: TOGSim waits forever on a tag no load registers."""
    pending = set()
    for node in body:
        if isinstance(node, Load) and node.is_async:
            pending.add(node.buffer)
        elif isinstance(node, Wait):
            _require(node.buffer in pending, f"wait on {node.buffer!r}: no asynchronous load of it before")
            pending.discard(node.buffer)
    if pending:
        raise InvalidTOG(f"asynchronous load of {sorted(pending)[0]!r} is never waited for")


def wait_for(load: Load, loops: Sequence, systolic_size: int) -> Wait:
    """The Wait that matches an asynchronous `load` inside `loops`: TOGSim keys a load by its
    accumulation-loop indices (from `loop_indices`) and its tag (each index divided by its
    loop's stride, capped at the systolic size); a wait marks accumulation indices with
    stride -1 and divides the others by `tag_dividers`."""
    by_index = {loop.index: loop for loop in loops}
    accumulation = tuple(i for i in load.loop_indices
                         if i in by_index and by_index[i].kind is LoopKind.ACCUMULATION)
    dividers = tuple(min(by_index[i].stride, systolic_size) for i in load.tag_indices)
    return Wait(load.buffer, accumulation + load.tag_indices,
                (-1,) * len(accumulation) + load.tag_strides, (1,) * len(accumulation) + dividers)


def _check_node(node, loops: tuple, tog: TOG, seen_indices: set) -> None:
    enclosing = {loop.index: loop for loop in loops}
    if isinstance(node, Loop):
        _check_loop(node, loops, seen_indices)
    elif isinstance(node, Compute):
        _require(node.cycles >= 0, f"compute cycles={node.cycles!r} must be >= 0")
        _require(0 <= node.overlapping_cycles <= node.cycles,
                 f"compute overlapping_cycles={node.overlapping_cycles!r} must be in 0..cycles={node.cycles}")
        _require(node.cycles < 2 ** 31, f"compute cycles={node.cycles!r} must fit an int32")
    elif isinstance(node, Wait):
        _check_wait(node, enclosing, tog)
    else:
        _check_transfer(node, enclosing, tog)


def _check_loop(loop: Loop, loops: tuple, seen_indices: set) -> None:
    name = f"loop {loop.index!r}"
    _require(bool(loop.index) and not loop.index.startswith(CONSTANT_INDEX_PREFIX),
             f"{name}: an index name must not be empty nor start with 'c' (TOGSim reads any "
             f"index starting with 'c' as a constant)")
    _require(loop.index not in seen_indices, f"{name}: index names must be unique in the graph")
    seen_indices.add(loop.index)
    _require(loop.stride > 0, f"{name}: stride={loop.stride!r} must be positive")
    _require(loop.end > loop.start >= 0, f"{name}: needs 0 <= start < end, got {loop.start}..{loop.end}")
    _require(len(loop.body) > 0, f"{name}: body must not be empty")
    if loop.kind is LoopKind.OUTER:
        _require(all(l.kind is LoopKind.OUTER for l in loops),
                 f"{name}: an outer_loop must be nested only in outer loops")
    if any(l.kind is LoopKind.INNER for l in loops):
        _require(loop.kind is LoopKind.INNER, f"{name}: only inner loops may sit inside an inner loop")


def _check_transfer(node: Transfer, enclosing: dict, tog: TOG) -> None:
    name = f"{type(node).__name__.lower()} of {node.buffer!r}"
    _require(node.buffer in tog.addresses, f"{name}: buffer has no address in the graph's addresses")
    _require(node.element_size in ELEMENT_SIZES, f"{name}: element_size={node.element_size!r} not in {ELEMENT_SIZES}")
    _require(0 < len(node.tile_size) == len(node.tile_stride) <= MAX_TILE_DIMS,
             f"{name}: tile_size and tile_stride must have the same length, 1..{MAX_TILE_DIMS}")
    _require(all(s > 0 for s in node.tile_size), f"{name}: tile_size={node.tile_size!r} must be positive")
    _require(all(s >= 0 for s in node.tile_stride), f"{name}: tile_stride={node.tile_stride!r} must be >= 0")
    _require(len(node.loop_indices) == len(node.loop_strides),
             f"{name}: loop_indices and loop_strides must have the same length")
    _require(len(node.tag_indices) == len(node.tag_strides),
             f"{name}: tag_indices and tag_strides must have the same length")
    for index in node.loop_indices:
        _require(index in enclosing or _is_constant_index(index),
                 f"{name}: loop index {index!r} is neither an enclosing loop nor a constant c<N>")
    for index in node.tag_indices:
        _require(index in enclosing, f"{name}: tag index {index!r} is not an enclosing loop")
    if isinstance(node, Load) and node.is_async:
        _require(not any(enclosing[i].kind is LoopKind.ACCUMULATION for i in node.tag_indices),
                 f"{name}: an asynchronous load's tag must not name an accumulation loop (its wait "
                 f"keys those apart from the tag, so the two never match)")
    if isinstance(node, Store):
        _require(len(node.tag_indices) == 1 and not node.is_async,
                 f"{name}: a store takes exactly one tag and is never asynchronous")
    if any(enclosing[i].kind is LoopKind.INNER for i in node.loop_indices if i in enclosing):
        _require(_inner_indices_last(node.loop_indices, enclosing),
                 f"{name}: indices of inner loops must come last in loop_indices")


def _check_wait(node: Wait, enclosing: dict, tog: TOG) -> None:
    name = f"wait on {node.buffer!r}"
    _require(node.buffer in tog.addresses, f"{name}: buffer has no address in the graph's addresses")
    _require(len(node.tag_indices) == len(node.tag_strides) == len(node.tag_dividers),
             f"{name}: tag_indices, tag_strides and tag_dividers must have the same length")
    for index, divider in zip(node.tag_indices, node.tag_dividers):
        _require(index in enclosing, f"{name}: tag index {index!r} is not an enclosing loop")
        _require(divider > 0, f"{name}: tag divider {divider!r} of {index!r} must be positive")


def _inner_indices_last(indices: tuple, enclosing: dict) -> bool:
    kinds = [enclosing[i].kind is LoopKind.INNER if i in enclosing else False for i in indices]
    first_inner = kinds.index(True)
    return all(kinds[first_inner:])


def _is_constant_index(index: str) -> bool:
    return index.startswith(CONSTANT_INDEX_PREFIX) and index[1:].isdigit()


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InvalidTOG(message)
