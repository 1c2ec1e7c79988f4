"""The TOG of one real kernel launch of route `triton-spike`, from its captured launch.json.

Triton runs one program per tile: the launch's grid of programs becomes the TOG's outer loop
(`p`, one iteration per program, spread over cores as TOGSim spreads tiles). Each program
loads its share of every tensor it reads, computes, and stores its share of every tensor it
writes (`role` in launch.json: in, out, inout):

- addresses are real offsets: the launch's buffers are laid out one after another (as
  `tog_kernels.addresses` does), and an argument starts at its buffer's address plus its
  `storage_offset`; its tile walks the argument's own size and stride (in elements, so a
  transposed, sliced or broadcast (stride 0) view is read as the kernel reads it);
- a program's share is the view's leading dim (after merging dims that are contiguous in
  memory, and dropping size-1 dims) split evenly over the programs, rounded up: where the
  programs do not divide it, the last ones read past the view's end, a few more bytes of
  DRAM traffic than the kernel moves;
- the compute is one vector-unit node per program costing the instructions Spike retired for
  the whole grid walk (`spike_instret`) divided by the programs: a proxy for the cycles of one
  tile, not a cycle count (Spike retires one instruction per step and models no pipeline).
"""
from __future__ import annotations

import math

from torchsim_diff.timing.tog import ELEMENT_SIZES, MAX_TILE_DIMS, TOG, Compute, ComputeKind, Load, Loop, LoopKind, Store
from torchsim_diff.timing.tog_kernels import addresses

PROGRAM_INDEX = "p"
READS, WRITES = ("in", "inout"), ("out", "inout")


class NotTimed(ValueError):
    """A launch whose TOG cannot be written: the message says why (one line)."""


def launch_tog(launch: dict) -> TOG:
    """The TOG of a launch.json (kernels.capture's format, with `spike_instret`)."""
    instret = launch.get("spike_instret")
    if not isinstance(instret, int):
        raise NotTimed(f"{launch.get('kernel_name')}: no spike_instret (the launch did not run on Spike)")
    programs = math.prod(int(g) for g in launch["grid"])
    tensors = [a for a in launch["args"] if a["kind"] == "tensor"]
    placed = addresses({name: meta["nbytes"] for name, meta in launch["buffers"].items()}, 1)
    names = {id(arg): f"arg{i}" for i, arg in enumerate(tensors)}
    loads = tuple(_transfer(Load, arg, names[id(arg)], programs) for arg in tensors if arg["role"] in READS)
    stores = tuple(_transfer(Store, arg, names[id(arg)], programs) for arg in tensors if arg["role"] in WRITES)
    compute = Compute(max(1, instret // programs), ComputeKind.VECTOR)
    body = tuple(t for t in loads if t) + (compute,) + tuple(t for t in stores if t)
    return TOG(launch["kernel_name"], (Loop(PROGRAM_INDEX, programs, body, LoopKind.OUTER),),
               {names[id(arg)]: placed[arg["buffer"]] + arg["storage_offset"] * _element_bytes(arg)
                for arg in tensors})


def _transfer(kind, arg: dict, name: str, programs: int):
    """One program's Load or Store of `arg`, or None for an empty view."""
    if 0 in arg["size"]:
        return None
    dims = merged_dims(arg["size"], arg["stride"])
    (lead_size, lead_stride), rest = dims[0], dims[1:]
    rows = math.ceil(lead_size / programs)
    tile = ((rows, lead_stride),) + rest
    if len(tile) > MAX_TILE_DIMS:
        raise NotTimed(f"{arg['name']}: a view of {len(tile)} non-mergeable dims, more than TOGSim's "
                       f"{MAX_TILE_DIMS}-dim DMA tiles")
    size = _element_bytes(arg)
    return kind(name, tuple(s for s, _ in tile), tuple(st for _, st in tile), (PROGRAM_INDEX,),
                (rows * lead_stride * size,), (PROGRAM_INDEX,), (1,), size)


def merged_dims(size: list, stride: list) -> tuple:
    """(size, stride) pairs of a view with size-1 dims dropped and each dim merged into the one
    before it where the two are one run in memory (stride[i] == size[i+1] * stride[i+1])."""
    dims = [(s, st) for s, st in zip(size, stride) if s != 1] or [(1, 1)]
    merged = [dims[0]]
    for s, st in dims[1:]:
        outer_size, outer_stride = merged[-1]
        if outer_stride == s * st:
            merged[-1] = (outer_size * s, st)
        else:
            merged.append((s, st))
    return tuple(merged)


def _element_bytes(arg: dict) -> int:
    from torchsim_diff.kernels.capture import CaptureFormatError, torch_dtype
    try:
        size = torch_dtype(arg["dtype"]).itemsize
    except CaptureFormatError:
        size = None
    if size not in ELEMENT_SIZES:
        raise NotTimed(f"{arg['name']}: dtype {arg['dtype']} has no TOGSim element size (1, 2, 4 or 8 bytes)")
    return size
