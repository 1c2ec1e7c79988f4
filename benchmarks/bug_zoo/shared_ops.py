"""Planted bugs in ops that already have known bugs (corpora/known): argmax, fmod, remainder,
roll and a softmax hang, each a cause of its own. Matched by cause, none of them may be taken
for a known bug of a real route (bench_known_by_cause, tests/test_cause.py); matched by raw
bucket (route, kind, op), each one was.

Each bug comes with a trigger case: a small case that fails on its route in the raw bucket a
real route's known entry has (the same kind, op and place).
"""
from __future__ import annotations

import time

import torch

from benchmarks.bug_zoo.planted import _OpFault, _Planted
from torchsim_diff.case import values
from torchsim_diff.case.graph import Case

HANG_S = 3600.0


def _argmax_inf_over_nan(func, x, dim=None, keepdim=False, **kw):
    """An input holding both a NaN and an Inf: the Inf's index comes back (eager: the NaN's)."""
    if bool(torch.isnan(x).any()) and bool(torch.isposinf(x).any()):
        x = torch.where(torch.isnan(x), float("-inf"), x)
    return func(x, dim=dim, keepdim=keepdim, **kw)


class ArgmaxInfOverNan(_Planted):
    name = "zoo-argmax-inf-over-nan"
    mode = type("ArgmaxNan", (_OpFault,), {"faults": {torch.argmax: _argmax_inf_over_nan}})


def _fmod_as_remainder(func, a, b, **kw):
    """The result takes the divisor's sign (Python's %), not the dividend's."""
    return torch.remainder(a, b, **kw)


class FmodSignOfDivisor(_Planted):
    name = "zoo-fmod-sign-of-divisor"
    mode = type("FmodSign", (_OpFault,), {"faults": {torch.fmod: _fmod_as_remainder}})


def _remainder_as_fmod(func, a, b, **kw):
    """The result takes the dividend's sign (C's %), not the divisor's."""
    return torch.fmod(a, b, **kw)


class RemainderTruncates(_Planted):
    name = "zoo-remainder-truncates"
    mode = type("RemTrunc", (_OpFault,), {"faults": {torch.remainder: _remainder_as_fmod}})


def _roll_sign_dropped(func, x, shifts, dims=None, **kw):
    """A negative shift rolls the other way (its sign is lost)."""
    shifts = tuple(abs(s) for s in shifts) if isinstance(shifts, (list, tuple)) else abs(shifts)
    return func(x, shifts=shifts, dims=dims, **kw)


class RollSignDropped(_Planted):
    name = "zoo-roll-sign-dropped"
    mode = type("RollSign", (_OpFault,), {"faults": {torch.roll: _roll_sign_dropped}})


def _softmax_hangs_on_long_dims(func, x, dim=None, **kw):
    """A softmax over a dimension of 3 or more elements never returns."""
    if x.dim() and x.shape[dim] >= 3:
        time.sleep(HANG_S)
    return func(x, dim=dim, **kw)


class SoftmaxLongDimHang(_Planted):
    name = "zoo-softmax-long-dim-hang"
    mode = type("SoftmaxHang", (_OpFault,), {"faults": {torch.softmax: _softmax_hangs_on_long_dims}})


SHARED_OP_ZOO = (ArgmaxInfOverNan, FmodSignOfDivisor, RemainderTruncates, RollSignDropped, SoftmaxLongDimHang)


# -- trigger cases ---------------------------------------------------------------------------
def _input(name: str, data: list, domain: str = "real") -> dict:
    storage = torch.tensor(data, dtype=torch.float32)
    return {"name": name, "shape": [len(data)], "dtype": "float32", "domain": {"kind": domain},
            "layout": {"classes": ["contiguous"], "strides": [1], "offset": 0, "storage_size": len(data)},
            "mutated": False, "data": values.encode(storage)}


def _one_node(op: str, inputs: list, attrs: dict) -> Case:
    return Case.from_dict({"schema": 1, "dtype": "float32", "inputs": inputs,
                           "nodes": [{"id": "v0", "op": op, "args": [i["name"] for i in inputs], "attrs": attrs}],
                           "outputs": ["v0"], "values": {"seed": 0}})


def trigger_cases() -> dict:
    """route name -> a case that fails there in the raw bucket of a real route's known entry."""
    nan, inf = float("nan"), float("inf")
    mixed_signs = [_input("x0", [5.0, -5.0, 7.5, -7.5]), _input("x1", [-3.0, 3.0, 2.0, -2.0], "nonzero")]
    return {
        ArgmaxInfOverNan.name: _one_node("argmax", [_input("x0", [1.0, nan, inf, 2.0])], {}),
        FmodSignOfDivisor.name: _one_node("fmod", mixed_signs, {}),
        RemainderTruncates.name: _one_node("remainder", mixed_signs, {}),
        RollSignDropped.name: _one_node("roll", [_input("x0", [1.0, 2.0, 3.0, 4.0, 5.0])], {"shifts": [-2], "dims": [0]}),
        SoftmaxLongDimHang.name: _one_node("softmax", [_input("x0", [0.5, 1.0, 2.0, 4.0])], {"dim": 0}),
    }



