"""The planted bugs. Each route runs the case's program eagerly with one fault, planted
either around the call (how inputs reach the kernel, how results come back) or inside it
through a TorchFunctionMode that changes what one op computes. No torch file is edited.

Register them for a process and its workers with `environment()` (TORCHSIM_DIFF_ROUTES).
"""
from __future__ import annotations

import os

import torch
from torch.overrides import TorchFunctionMode

from torchsim_diff.case.layout import contiguous_strides, storage_of
from torchsim_diff.routes.base import Compiled, Route


class _Planted(Route):
    """Eager, with `before` applied to the inputs and `mode` active during the program."""

    mode = None

    def before(self, inputs, ctx):
        return inputs

    def compile(self, program, example_inputs, ctx):
        route = self

        class _Run(Compiled):
            def __call__(self, inputs, ctx):
                args = route.before(list(inputs), ctx)
                if route.mode is None:
                    return program(*args)
                with route.mode():
                    return program(*args)
        return _Run()


# -- faults around the call ----------------------------------------------------------------
class LayoutDropped(_Planted):
    """Strided inputs are read as if contiguous from their storage offset."""

    name = "zoo-layout-dropped"

    def before(self, inputs, ctx):
        return [_as_contiguous_read(x) if _strided(x) else x for x in inputs]


def _strided(x) -> bool:
    real = [(n, st) for n, st in zip(x.shape, x.stride()) if n > 1]
    dense = [(n, st) for n, st in zip(x.shape, contiguous_strides(list(x.shape))) if n > 1]
    return all(st for _n, st in real) and real != dense


def _as_contiguous_read(x):
    storage = storage_of(x)
    if x.storage_offset() + x.numel() > storage.numel():
        return x
    return storage.as_strided(x.shape, contiguous_strides(list(x.shape)), x.storage_offset())


class Stride0PastStorage(_Planted):
    """A broadcast (stride-0) dimension is walked with stride 1, reading past the view."""

    name = "zoo-stride0-past-storage"

    def before(self, inputs, ctx):
        return [_walked(x) if any(st == 0 and n > 1 for n, st in zip(x.shape, x.stride())) else x for x in inputs]


def _walked(x):
    strides = [1 if st == 0 and n > 1 else st for n, st in zip(x.shape, x.stride())]
    storage = storage_of(x)
    reach = x.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(x.shape, strides))
    tail = torch.full((max(reach - storage.numel(), 0),), -30720, dtype=x.dtype)
    return torch.cat([storage, tail]).as_strided(x.shape, strides, x.storage_offset())


class OffsetDropped(_Planted):
    """A view's storage offset is lost: it is read from the start of its storage."""

    name = "zoo-offset-dropped"

    def before(self, inputs, ctx):
        return [storage_of(x).as_strided(x.shape, x.stride(), 0) if x.storage_offset() else x for x in inputs]


class InoutZeroSeeded(_Planted):
    """Mutated inputs are treated as pure outputs and seeded with zeros."""

    name = "zoo-inout-zero-seeded"

    def before(self, inputs, ctx):
        for spec, x in zip(ctx.case["inputs"], inputs):
            if spec.get("mutated"):
                x.zero_()
        return inputs


class LostMutation(_Planted):
    """In-place writes land in a copy: the caller's mutated inputs never change."""

    name = "zoo-lost-mutation"

    def before(self, inputs, ctx):
        return [x.clone() if spec.get("mutated") else x for spec, x in zip(ctx.case["inputs"], inputs)]


# -- faults inside one op ------------------------------------------------------------------
class _OpFault(TorchFunctionMode):
    """Calls of the functions in `faults` go to their replacement."""

    faults: dict = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        replacement = self.faults.get(func)
        if replacement is not None:     # (the mode is off while it handles a call)
            return replacement(func, *args, **kwargs)
        return func(*args, **kwargs)


def _sum_without_tail(func, x, dim=None, keepdim=False, **kw):
    """The last element along each reduced dimension of size >= 4 is dropped."""
    dims = range(x.dim()) if dim is None else [d % max(x.dim(), 1) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
    for d in dims:
        if x.dim() and x.shape[d] >= 4:
            x = x.narrow(d, 0, x.shape[d] - 1)
    return func(x, dim=dim, keepdim=keepdim, **kw) if dim is not None else func(x, **kw)


class ReductionTail(_Planted):
    name = "zoo-reduction-tail"
    mode = type("SumTail", (_OpFault,), {"faults": {torch.sum: _sum_without_tail}})


def _mm_without_k_tail(func, a, b, **kw):
    """K is rounded down to a multiple of 4."""
    k = a.shape[-1] - a.shape[-1] % 4
    if k == a.shape[-1]:
        return func(a, b, **kw)
    return func(a[..., :k], b[..., :k, :] if b.dim() > 1 else b[:k], **kw)


class KTailDropped(_Planted):
    name = "zoo-k-tail-dropped"
    mode = type("KTail", (_OpFault,), {"faults": {torch.mm: _mm_without_k_tail, torch.bmm: _mm_without_k_tail,
                                                  torch.matmul: _mm_without_k_tail}})


def _mul_scalar_branch(func, a, b, **kw):
    """An operand with a stride-0 dimension takes the scalar path: its first element only."""
    def scalarised(x):
        if isinstance(x, torch.Tensor) and x.numel() > 1 and any(st == 0 and n > 1 for n, st in zip(x.shape, x.stride())):
            return x.reshape(-1)[0]
        return x
    return func(scalarised(a), scalarised(b), **kw)


class BroadcastWrongBranch(_Planted):
    name = "zoo-broadcast-wrong-branch"
    mode = type("MulBranch", (_OpFault,), {"faults": {torch.mul: _mul_scalar_branch}})


def _floor_divide_truncating(func, a, b, **kw):
    """The quotient is rounded toward zero (C's integer division), not toward -inf."""
    return torch.div(a, b, rounding_mode="trunc", **kw)


class FloorDivTruncates(_Planted):
    name = "zoo-floor-div-truncates"
    mode = type("FloorTrunc", (_OpFault,), {"faults": {torch.floor_divide: _floor_divide_truncating}})


def _cat_swapped(func, tensors, dim=0, **kw):
    """The first two operands are exchanged."""
    tensors = list(tensors)
    if len(tensors) >= 2:
        tensors[0], tensors[1] = tensors[1], tensors[0]
    return func(tensors, dim=dim, **kw)


class SwappedVariadic(_Planted):
    name = "zoo-swapped-variadic"
    mode = type("CatSwap", (_OpFault,), {"faults": {torch.cat: _cat_swapped}})


ZOO = (LayoutDropped, Stride0PastStorage, InoutZeroSeeded, ReductionTail, KTailDropped, BroadcastWrongBranch,
       LostMutation, SwappedVariadic, OffsetDropped, FloorDivTruncates)


def environment() -> dict:
    """Environment variables that register the zoo's routes in this process and its workers."""
    from torchsim_diff.routes import EXTRA_ROUTES_ENV
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.bug_zoo.round2 import ROUND2
    from benchmarks.bug_zoo.shared_ops import SHARED_OP_ZOO
    routes = ",".join(f"{cls.name}={cls.__module__}:{cls.__name__}" for cls in ZOO + SHARED_OP_ZOO + ROUND2)
    extra = os.environ.get(EXTRA_ROUTES_ENV)
    return {EXTRA_ROUTES_ENV: ",".join(filter(None, [extra, routes])),
            "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
