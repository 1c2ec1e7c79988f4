"""TOGs of tiled kernels from a few numbers: a GEMM and an elementwise kernel.

The metamorphic checks need the same kernel at another size or tiling, so a kernel here is a
pure function of its parameters. Buffers are row-major with 4-byte elements by default, laid
out one after another from `BASE_ADDRESS`, each aligned to `ALIGNMENT` bytes. Compute cost is
stated per tile from the tile's work (`macs_per_cycle` multiply-adds per cycle for a GEMM,
`elements_per_cycle` for a vector op), so more work costs more.
"""
from __future__ import annotations

import dataclasses
import math

from torchsim_diff.timing.tog import TOG, Compute, ComputeKind, Load, Loop, LoopKind, Store, wait_for

BASE_ADDRESS = 0x1000_0000
ALIGNMENT = 4096


@dataclasses.dataclass(frozen=True)
class GemmTiling:
    """C[m, n] = A[m, k] @ B[k, n], tiled tm x tn x tk; `accumulate` loops over k tiles (else tk
    is all of k), `async_loads` loads A and B asynchronously and waits before the compute,
    `inner_splits` splits each tile's compute into that many inner-loop steps."""
    m: int
    n: int
    k: int
    tm: int
    tn: int
    tk: int
    accumulate: bool = True
    async_loads: bool = False
    inner_splits: int = 1
    macs_per_cycle: int = 256
    element_size: int = 4
    systolic_size: int = 128


def addresses(sizes: dict, element_size: int) -> dict:
    """Buffer name -> byte address, one after another, aligned."""
    placed, next_address = {}, BASE_ADDRESS
    for name, numel in sizes.items():
        placed[name] = next_address
        next_address += math.ceil(numel * element_size / ALIGNMENT) * ALIGNMENT
    return placed


def gemm(t: GemmTiling) -> TOG:
    es, tk = t.element_size, t.tk if t.accumulate else t.k
    a = Load("arg0", (t.tm, tk), (t.k, 1), ("m", "k") if t.accumulate else ("m",),
             (t.k * es, es) if t.accumulate else (t.k * es,), ("m",), (1,), es, t.async_loads)
    b = Load("arg1", (tk, t.tn), (t.n, 1), ("k", "n") if t.accumulate else ("n",),
             (t.n * es, es) if t.accumulate else (es,), ("n",), (1,), es, t.async_loads)
    cycles = max(1, math.ceil(t.tm * t.tn * tk / t.macs_per_cycle))
    step = _inner(Compute(max(1, cycles // t.inner_splits), ComputeKind.MATMUL), t.tm, t.inner_splits)
    loop_n = Loop("n", t.n, (), LoopKind.OUTER, stride=t.tn)
    loop_m = Loop("m", t.m, (), LoopKind.OUTER, stride=t.tm)
    loop_k = Loop("k", t.k, (), LoopKind.ACCUMULATION, stride=tk)
    enclosing = (loop_m, loop_n, loop_k) if t.accumulate else (loop_m, loop_n)
    waits = tuple(wait_for(load, enclosing, t.systolic_size) for load in (a, b)) if t.async_loads else ()
    tile = (a, b) + waits + (step,)
    store = Store("arg2", (t.tm, t.tn), (t.n, 1), ("m", "n"), (t.n * es, es), ("m",), (1,), es)
    inner = (dataclasses.replace(loop_k, body=tile),) if t.accumulate else tile
    body = (dataclasses.replace(loop_m, body=(dataclasses.replace(loop_n, body=inner + (store,)),)),)
    return TOG("gemm", body, addresses({"arg0": t.m * t.k, "arg1": t.k * t.n, "arg2": t.m * t.n}, es),
               t.systolic_size)


@dataclasses.dataclass(frozen=True)
class ElementwiseTiling:
    """out = f(in_0, ..., in_{inputs-1}) over an rows x cols array, tiled tr x tc."""
    rows: int
    cols: int
    tr: int
    tc: int
    inputs: int = 2
    elements_per_cycle: int = 64
    element_size: int = 4
    systolic_size: int = 128


def elementwise(t: ElementwiseTiling) -> TOG:
    es = t.element_size
    row_stride = (t.cols * es, es)
    loads = tuple(Load(f"arg{i}", (t.tr, t.tc), (t.cols, 1), ("r", "q"), row_stride, ("r", "q"), (1, 1), es)
                  for i in range(t.inputs))
    compute = Compute(max(1, math.ceil(t.tr * t.tc / t.elements_per_cycle)), ComputeKind.VECTOR)
    store = Store(f"arg{t.inputs}", (t.tr, t.tc), (t.cols, 1), ("r", "q"), row_stride, ("r",), (1,), es)
    loop_q = Loop("q", t.cols, loads + (compute, store), LoopKind.OUTER, stride=t.tc)
    sizes = {f"arg{i}": t.rows * t.cols for i in range(t.inputs + 1)}
    return TOG("elementwise", (Loop("r", t.rows, (loop_q,), LoopKind.OUTER, stride=t.tr),),
               addresses(sizes, es), t.systolic_size)


def _inner(compute: Compute, rows: int, splits: int):
    """The compute itself, or an inner loop running it `splits` times over the tile's rows."""
    if splits <= 1:
        return compute
    return Loop("i", rows, (compute,), LoopKind.INNER, stride=max(1, rows // splits))
