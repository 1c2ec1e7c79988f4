"""TOGs of route `spike`'s kernels: one per linalg op of the case's lowered module.

The route compiles a whole graph into one function and never tiles it, so the tiling here is
ours, stated (docs/togsim.md, "The routes' real kernels"):

- a kernel is one linalg op (`linalg_text`); its loops are the op's iteration domain;
- tiles: the first parallel dim of more than one iteration is split into at most
  `MAX_OUTER_TILES` tiles (the TOG's outer loop, spread over cores); an op without one is one
  tile. The first reduction dim of more than one iteration is an accumulation loop of at most
  `MAX_ACCUMULATION_STEPS` steps. Other dims stay whole in every tile; where a split does not
  divide its dim, the last tile reads a little past it, as in `kernel_togs`;
- buffers: every tensor value has its own, row-major (the route passes contiguous copies):
  the function's arguments, then its returned values, as the harness declares them, then
  every other value in program order (`tog_kernels.addresses`);
- loads: each input operand and each output whose value was not made by `tensor.empty`
  (an accumulator's initial value), its tile walking its indexing map; stores: each output,
  into the buffer of the value the op defines. Values an op body reads by `tensor.extract`
  (a gather) are not loaded: the map does not say which elements;
- compute: one vector-unit node per tile step costing the case's instructions retired on
  Spike (the route's `cost`) times the op's share of all ops' iteration points, over its
  steps: **a proxy** (instret is a whole-graph count, and Spike models no pipeline).
"""
from __future__ import annotations

import dataclasses
import math
import re

from torchsim_diff.timing.kernel_togs import NotTimed, merged_dims
from torchsim_diff.timing.linalg_text import PARALLEL, REDUCTION, LinalgOp, Module, Operand, Unreadable
from torchsim_diff.timing.tog import MAX_TILE_DIMS, TOG, Compute, ComputeKind, Load, Loop, LoopKind, Store
from torchsim_diff.timing.tog_kernels import addresses

MAX_OUTER_TILES = 16
MAX_ACCUMULATION_STEPS = 8
TILE_INDEX, STEP_INDEX = "t", "r"


@dataclasses.dataclass(frozen=True)
class Split:
    """Which domain dim a loop splits (None: none) and how many elements a tile takes of it."""
    dim: int | None
    size: int
    tile: int

    @classmethod
    def of(cls, op: LinalgOp, kind: str, most: int) -> "Split":
        domain = op.domain()
        for dim, (iterator, size) in enumerate(zip(op.iterators, domain)):
            if iterator == kind and size > 1:
                return cls(dim, size, math.ceil(size / min(size, most)))
        return cls(None, 1, 1)

    def trips(self) -> int:
        return math.ceil(self.size / self.tile)


@dataclasses.dataclass(frozen=True)
class LinalgKernel:
    """One op's TOG and the instructions retired charged to it."""
    name: str
    tog: TOG
    instret: int


def module_kernels(module: Module, instret: int) -> tuple:
    """([LinalgKernel], [(op name, why not timed)]) of a parsed module and its measured instret."""
    placed = buffer_addresses(module)
    points = {id(op): _points(op) for op in module.ops}
    total = sum(p for p in points.values() if p) or 1
    kernels, skipped = [], []
    for number, op in enumerate(module.ops):
        name = f"op{number:02d}-{op.name.split('.')[-1]}"
        try:
            share = round(instret * points[id(op)] / total) if points[id(op)] else 0
            kernels.append(LinalgKernel(name, op_tog(name, op, module, placed, share), share))
        except (NotTimed, Unreadable) as why:
            skipped.append((name, str(why)))
    return kernels, skipped


def _points(op: LinalgOp) -> int:
    try:
        return op.points()
    except Unreadable:
        return 0


def buffer_addresses(module: Module) -> dict:
    """SSA value -> byte address: arguments, returned values, then the rest in program order."""
    order = [value for value, _ in module.arguments] + list(module.returned)
    for op in module.ops:
        order += [o.value for o in op.inputs + op.outputs] + list(op.results)
    sizes = {value: module.types[value].nbytes for value in dict.fromkeys(order) if value in module.types}
    return addresses(sizes, 1)


def op_tog(name: str, op: LinalgOp, module: Module, placed: dict, instret: int) -> TOG:
    """The TOG of one linalg op (see the module docstring for the tiling)."""
    tiles = Split.of(op, PARALLEL, MAX_OUTER_TILES)
    steps = Split.of(op, REDUCTION, MAX_ACCUMULATION_STEPS)
    operands = {}
    read = list(op.inputs) + [o for o in op.outputs if o.value not in module.empties]
    loads = tuple(_transfer(Load, o, _named(operands, o.value, placed), tiles, steps) for o in read)
    stores = tuple(_transfer(Store, dataclasses.replace(o, value=result), _named(operands, result, placed),
                             tiles, steps)
                   for o, result in zip(op.outputs, op.results))
    compute = Compute(max(1, instret // (tiles.trips() * steps.trips())), ComputeKind.VECTOR)
    step = loads + (compute,)
    if steps.dim is not None:
        step = (Loop(STEP_INDEX, steps.size, step, LoopKind.ACCUMULATION, stride=steps.tile),)
    outer = Loop(TILE_INDEX, tiles.size, step + stores, LoopKind.OUTER, stride=tiles.tile)
    return TOG(name, (outer,), {buffer: placed[value] for value, buffer in operands.items()})


def _named(operands: dict, value: str, placed: dict) -> str:
    """The TOG's buffer name of an SSA value (arg0, arg1, ... in first use)."""
    if value not in placed:
        raise NotTimed(f"value {value} has no buffer (not a tensor the module types)")
    return operands.setdefault(value, f"arg{len(operands)}")


def _transfer(kind, operand: Operand, buffer: str, tiles: Split, steps: Split):
    """A Load or Store of the tile of `operand` one step of the loops touches."""
    if 0 in operand.type.shape:
        raise NotTimed(f"{operand.value}: an empty tensor {operand.type.shape}")
    sizes, offsets = [], {}
    for expression, size, stride in zip(operand.indexing, operand.type.shape, operand.type.strides()):
        if re.fullmatch(r"\d+", expression):
            sizes.append((1, stride))
            continue
        if not re.fullmatch(r"d\d+", expression):
            raise NotTimed(f"{operand.value}: indexing expression {expression!r} is not a plain loop dim")
        dim = int(expression[1:])
        for split, index in ((tiles, TILE_INDEX), (steps, STEP_INDEX)):
            if dim == split.dim:
                size = split.tile
                offsets[index] = stride * operand.type.element_bytes
        sizes.append((size, stride))
    tile = merged_dims([s for s, _ in sizes], [st for _, st in sizes])
    if len(tile) > MAX_TILE_DIMS:
        raise NotTimed(f"{operand.value}: a tile of {len(tile)} non-mergeable dims, more than TOGSim's "
                       f"{MAX_TILE_DIMS}-dim DMA tiles")
    element = operand.type.element_bytes
    return kind(buffer, tuple(s for s, _ in tile), tuple(st for _, st in tile), tuple(offsets),
                tuple(offsets.values()), (TILE_INDEX,), (1,), element)
