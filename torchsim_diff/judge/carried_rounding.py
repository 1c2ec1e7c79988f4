"""Rounding carried through a program: the allowance each output (and each input's final
state) gets for the rounding a dtype computation may legitimately make at every node.

    allowance = carried(program, inputs_f64, torch.float32)   # once per case
    found, stats = compare(..., carried=allowance.outputs[0], sensitivity=allowance.sensitivity[0],
                           unstable=allowance.unstable[0], overflow=allowance.overflow[0])

`inputs_f64` are the program's inputs in float64 (never mutated here: each run gets
copies). Each node's local allowance (rounding_rules: about one ulp for pointwise ops,
sqrt(n)+2 ulps of the magnitude for a reduction of length n, up to n/2 where its addends
are equal) is carried to the outputs by rerunning the program in float64 with that node's
result moved by its allowance (random signs, SAMPLES times) and summing the per-node
movements. `sensitivity` is the same for the inputs' own precision.

A boolean or integer element computed from floats (comparisons, argmax/argmin, anything
derived from them) is judged only where that decision is stable: where the float64 margin
of its operands exceeds margin * their carried allowance (at least atol for a computed
operand). remainder and fmod jump by the divisor where their dividend may cross a multiple
of it: the jump is carried downstream like a flipped decision; where the dividend's room
spans the divisor the result may be anything in its period, and what reads it knows that.
The sign of a zero returned by a function that does not specify it (relu, clamps, max/min,
SIGN_UNSPECIFIED) is a decision too: flipped, it moves what turns that sign into another
answer (atan2 by 2 pi, 1/x from +Inf to -Inf: an infinite allowance, where any value
passes). Unstable elements are counted, never failed. Where a node feeding an element
passes through values that reach the dtype's max (`Carried.overflow`, PASSES_THROUGH),
partial sums overflow in some orders and the element may be any value (x / Inf = 0,
sign(NaN) = 0): it is not judged, and a decision on it is unstable. An Inf or NaN that an
elementwise op or a selection computes (1/0, log(0), inf // 1, neg(inf)) is exact, its sign
too, not at the overflow scale: what it feeds is judged.

Imports only the standard library and torch: reproducer bundles ship it.
"""
from __future__ import annotations

import dataclasses
import math
import re
import warnings

import torch
from torch.overrides import TorchFunctionMode

from .comparison import FEW_ELEMENTS, TOLERANCES, margin, same_bits, scale_ulp
from .rounding_rules import (ARG_EXTREMES, COMPARISONS, EXACT, JUMPS, PASSES_THROUGH, POINTWISE, ROUNDING,
                             SIGN_UNSPECIFIED, STEPS, op_name)

SAMPLES = 2                    # random-sign reruns per rounding node
PROBES = 8                     # reruns with every rounding node moved at once (decisions)
# each result element is one IEEE operation on its operands' elements, or a copy or selection of
# one: where it is Inf or NaN, the dtype gives the same in any order (sums and norms do not).
# Casts are left out: a compiler may skip a down-cast's rounding (Inductor without
# emulate_precision_casts), so what overflows the narrower type to Inf may stay finite.
ORDER_FREE = frozenset((*POINTWISE, *(s for s in STEPS if s != "to"), *JUMPS, *EXACT))


@dataclasses.dataclass
class _Call:
    func: object
    name: str
    args: tuple
    kwargs: dict
    result: torch.Tensor     # the live result (an in-place op's result is its input)
    value: torch.Tensor      # a copy taken when the call returned


# The float64 run repeats the case's own computation: torch's warnings about it (var of one
# element) are the case's semantics, not news, and are not shown (case.program_check too).
warnings.filterwarnings("ignore", category=UserWarning, module=re.escape(__name__) + "$")


class _Run(TorchFunctionMode):
    """Records every tensor-returning call of one float64 run; `after(index, call)` may
    change a result in place (inject rounding, flip a decision)."""

    def __init__(self, after=None):
        super().__init__()
        self.calls: list = []
        self.after = after

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        returned = _returned_tensor(result)
        if returned is not None:
            call = _Call(func, op_name(func), args, kwargs, returned, returned)
            if self.after is not None:
                self.after(len(self.calls), call)
            call.value = returned.detach().clone()
            self.calls.append(call)
        return result


def _returned_tensor(result):
    """The tensor a call returns: the result itself, or the values of a (values, indices) pair
    (max and min along a dim, sort, topk, cummax), which programs read on as `.values`."""
    if isinstance(result, torch.Tensor):
        return result
    values = getattr(result, "values", None) if isinstance(result, tuple) else None
    return values if isinstance(values, torch.Tensor) else None


@dataclasses.dataclass
class Carried:
    """Allowances of one program, per output and per input's final state (float64 tensors
    of their shapes; zero for integer and boolean results)."""

    outputs: list
    inputs: list
    sensitivity: list            # the inputs' own precision, per output
    input_sensitivity: list      # ... per input's final state
    unstable: list               # per output: bool mask of unstable discrete elements, or None
    by_op: dict                  # op -> largest allowance it adds to an output, in ulps
    overflow: list = dataclasses.field(default_factory=list)        # per output: bool mask (_may_overflow)
    input_overflow: list = dataclasses.field(default_factory=list)  # ... per input's final state


def _delta(a, b) -> torch.Tensor:
    """|a - b| in float64; NaN/Inf where the two agree count as 0, where not as inf."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return torch.zeros(b.shape if isinstance(b, torch.Tensor) else (), dtype=torch.float64)
    if not b.dtype.is_floating_point:
        return (a != b).double() * math.inf
    d = (a.double() - b.double()).abs()
    return torch.where(same_bits(a, b) | (a == b), torch.zeros_like(d), d.nan_to_num(nan=math.inf, posinf=math.inf))


class _Program:
    """One program and its float64 inputs, rerun as often as the allowance needs."""

    def __init__(self, program, inputs):
        self.program = program
        self.inputs = [x.detach() for x in inputs]

    def run(self, after=None, scale_inputs=None):
        dense = [x.clone() for x in self.inputs]
        if scale_inputs is not None:
            dense = [x * s if x.dtype.is_floating_point else x for x, s in zip(dense, scale_inputs)]
        mode = _Run(after)
        with mode:
            outputs = tuple(self.program(*dense))
        return mode.calls, [o.detach().clone() for o in outputs], dense


def carried(program, inputs, dtype: torch.dtype, *, seed: int = 0) -> Carried:
    """The rounding allowance of `program` on float64 `inputs` for a computation in `dtype`
    (see the module docstring). Integer dtypes get zero everywhere."""
    runner = _Program(program, inputs)
    calls, outputs, finals = runner.run()
    if not dtype.is_floating_point:
        zeros = [torch.zeros(o.shape, dtype=torch.float64) for o in outputs]
        izeros = [torch.zeros(f.shape, dtype=torch.float64) for f in finals]
        return Carried(zeros, izeros, zeros, izeros, [None] * len(outputs), {})
    gen = torch.Generator().manual_seed(seed)
    eps = torch.finfo(dtype).eps
    node, by_op = _node_allowances(runner, calls, outputs, finals, eps, gen, dtype)
    sens, input_sens = _sensitivity(runner, outputs, finals, eps, gen)
    overflow, input_overflow, overflow_fed = _may_overflow(runner, calls, outputs, finals, dtype)
    unstable_calls = _unstable_decisions(calls, node["calls"], dtype, overflow_fed)
    flipped_out, flipped_in, unstable = _flip(runner, calls, outputs, finals, unstable_calls)
    probed = _probe(runner, calls, outputs, eps, gen, dtype)
    unstable = [u if u is None else u | (a > 0) | p | o
                for u, a, p, o in zip(unstable, node["outputs"], probed, overflow)]
    out_allow = [torch.zeros_like(a) if u is not None else a + f
                 for a, f, u in zip(node["outputs"], flipped_out, unstable)]
    in_allow = [a + f for a, f in zip(node["inputs"], flipped_in)]
    return Carried(out_allow, in_allow, sens, input_sens, unstable, by_op, overflow, input_overflow)


def _node_allowances(runner, calls, outputs, finals, eps, gen, dtype):
    """Per call, output and input: the summed movement when each rounding node moves."""
    total = {"calls": [torch.zeros(c.value.shape, dtype=torch.float64) for c in calls],
             "outputs": [torch.zeros(o.shape, dtype=torch.float64) for o in outputs],
             "inputs": [torch.zeros(f.shape, dtype=torch.float64) for f in finals]}
    by_op: dict = {}
    for index, call in enumerate(calls):
        rule = ROUNDING.get(call.name)
        if rule is None or not call.value.dtype.is_floating_point:
            continue
        moved = _moved_by_node(runner, calls, outputs, finals, index, rule, eps, gen)
        for key in total:
            total[key] = [t + m for t, m in zip(total[key], moved[key])]
        ulps = [float(m.max() / scale_ulp(o.double(), dtype)) for m, o in zip(moved["outputs"], outputs)
                if o.dtype.is_floating_point and m.numel()]
        by_op[call.name] = max([by_op.get(call.name, 0.0), *ulps])
    return total, by_op


def _moved_by_node(runner, calls, outputs, finals, index, rule, eps, gen):
    moved = {"calls": [torch.zeros(c.value.shape, dtype=torch.float64) for c in calls],
             "outputs": [torch.zeros(o.shape, dtype=torch.float64) for o in outputs],
             "inputs": [torch.zeros(f.shape, dtype=torch.float64) for f in finals]}
    for _ in range(SAMPLES):
        def inject(i, call):
            if i != index:
                return
            sign = torch.randint(0, 2, call.result.shape, generator=gen, dtype=torch.float64) * 2 - 1
            _nudge(call.result, sign * _local(rule, call, eps))

        got_calls, got_out, got_in = runner.run(inject)
        _accumulate_max(moved["calls"], [c.value for c in got_calls], [c.value for c in calls])
        _accumulate_max(moved["outputs"], got_out, outputs)
        _accumulate_max(moved["inputs"], got_in, finals)
    return moved


def _nudge(result: torch.Tensor, delta: torch.Tensor) -> None:
    """Move a result in place; one whose elements share memory (an expanded view) stays put.
    Where it does not move, -0.0 is added: the identity (+0.0 would turn a -0.0 into +0.0)."""
    try:
        result.add_(torch.where(delta == 0, -0.0, delta).to(result.dtype))
    except RuntimeError:
        pass


def _local(rule, call, eps) -> torch.Tensor:
    """A node's local allowance, shaped like its result. A rule that cannot read this call's
    arguments (an op spelled another way) allows nothing rather than failing the case."""
    try:
        with torch.no_grad():
            local = rule(call.func, call.args, call.kwargs, call.result, eps)
        return torch.as_tensor(local, dtype=torch.float64).nan_to_num(nan=0.0, posinf=0.0).expand(call.result.shape)
    except (TypeError, ValueError, IndexError, KeyError, RuntimeError):
        return torch.zeros(call.result.shape, dtype=torch.float64)


def _may_overflow(runner, calls, outputs, finals, dtype):
    """(per output, per final input, per call) bool masks of the elements fed by a node that
    works at the dtype's overflow scale: its float64 result, or a value it passes through on
    the way (PASSES_THROUGH: partial sums and products, shifted exponents), reaches the
    dtype's max. In the dtype such a node gives +-Inf or NaN in some orders, and what it
    feeds may then be any value: non-finite, or finite where an op maps those to numbers
    (x / Inf = 0 in a normalisation whose variance overflows, sign(NaN) = 0), and a decision
    on it (a comparison of a sum that overflows) may go either way. Found by one rerun with
    those elements set to NaN: an element that differs from the clean run is fed."""
    top = torch.finfo(dtype).max

    def poison(i, call):
        if call.result.dtype.is_floating_point:
            reach = _at_overflow_scale(call, top)
            if bool(reach.any()):
                _nudge(call.result, torch.where(reach, math.nan, 0.0))

    poisoned, got_out, got_in = runner.run(poison)
    fed = [_newly_nan(p.value, c.value) for p, c in zip(poisoned, calls)]
    return ([_delta(g, o) > 0 for g, o in zip(got_out, outputs)],
            [_delta(g, f) > 0 for g, f in zip(got_in, finals)], fed)


def _newly_nan(poisoned: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    if not poisoned.dtype.is_floating_point or poisoned.shape != clean.shape:
        return torch.zeros(clean.shape, dtype=torch.bool)
    return torch.isnan(poisoned) & ~torch.isnan(clean)


def _at_overflow_scale(call, top) -> torch.Tensor:
    magnitude = call.result.detach().double().abs()
    reach = ~(magnitude < top) & ~_exact_nonfinite(call)     # beyond max, Inf or NaN in float64 already
    rule = PASSES_THROUGH.get(call.name)
    if rule is not None:
        try:
            with torch.no_grad():
                passed = torch.as_tensor(rule(call.func, call.args, call.kwargs, call.result), dtype=torch.float64)
            reach = reach | (passed >= top).expand(reach.shape)
        except (TypeError, ValueError, IndexError, KeyError, RuntimeError):
            pass
    return reach


def _exact_nonfinite(call) -> torch.Tensor:
    """Non-finite results of an order-free function (ORDER_FREE): a pole (1/0, log(0)),
    float64's own overflow (exp(1000)), or an Inf or NaN operand carried through (inf // 1 is
    NaN, -inf is neg(inf)). The dtype computes them alike in any order, their sign too, so they
    are not at the overflow scale: what they feed is judged. An operand that an order-dependent
    node overflowed to is caught at that node, which _may_overflow poisons."""
    result = call.result.detach()
    if call.name not in ORDER_FREE or not result.dtype.is_floating_point:
        return torch.zeros(result.shape, dtype=torch.bool)
    return ~torch.isfinite(result)


def _probe(runner, calls, outputs, eps, gen, dtype):
    """Discrete output elements that change when every rounding node moves at once by
    margin x its allowance (random signs, PROBES runs): decisions no rule above names
    (sort, topk, max with dim, remainder) are unstable where a probe changes them."""
    changed = [torch.zeros(o.shape, dtype=torch.bool) for o in outputs]
    scale = margin(dtype, FEW_ELEMENTS + 1)
    if not any(not o.dtype.is_floating_point for o in outputs):
        return changed

    def inject(i, call):
        rule = ROUNDING.get(call.name)
        if rule is None or not call.result.dtype.is_floating_point:
            return
        sign = torch.randint(0, 2, call.result.shape, generator=gen, dtype=torch.float64) * 2 - 1
        _nudge(call.result, scale * sign * _local(rule, call, eps))

    for _ in range(PROBES):
        _, got, _ = runner.run(inject)
        changed = [c | ((_delta(g, o) > 0) if not o.dtype.is_floating_point else c)
                   for c, g, o in zip(changed, got, outputs)]
    return changed


def _accumulate_max(into, got, clean):
    for i, (g, c) in enumerate(zip(got, clean)):
        if i < len(into) and g.shape == c.shape:
            into[i] = torch.maximum(into[i], _delta(g, c))


def _sensitivity(runner, outputs, finals, eps, gen):
    """Movement of outputs and final inputs when each float input moves by up to 1 ulp."""
    scales = []
    for x in runner.inputs:
        noise = torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1
        scales.append(1 + eps * noise)
    _, got_out, got_in = runner.run(scale_inputs=scales)
    return ([_delta(g, o) for g, o in zip(got_out, outputs)], [_delta(g, f) for g, f in zip(got_in, finals)])


def _unstable_decisions(calls, allowances, dtype, overflow_fed) -> dict:
    """call index -> (mask of elements rounding may flip, or zeros of unspecified sign, the
    flipped result).
    overflow_fed: per call, the elements fed by a node at the dtype's overflow scale; a
    decision on them may go either way too."""
    index_of: dict = {}

    def of_producer(per_call: list, default: torch.Tensor):
        """x -> per_call's entry for the call that produced x (default: an input or a scalar)."""
        def lookup(x):
            i = index_of.get(id(x)) if isinstance(x, torch.Tensor) else None
            return per_call[i] if i is not None and i < len(per_call) else default
        return lookup

    # a computed value may be off by the absolute tolerance (an output may: exp(x) - 1 for
    # expm1 loses a subnormal x), and a decision on it may go either way within it
    atol = TOLERANCES[dtype][1]
    floored = [torch.where(a > 0, a.clamp(min=atol), a) for a in allowances]
    allowance = of_producer(floored, torch.zeros((), dtype=torch.float64))
    overflowed = of_producer(overflow_fed, torch.zeros((), dtype=torch.bool))

    found = {}
    for i, call in enumerate(calls):
        index_of[id(call.result)] = i
        if call.name in COMPARISONS:
            found[i] = _unstable_comparison(call, allowance, overflowed, dtype)
        elif call.name in ARG_EXTREMES:
            found[i] = _unstable_extreme(call, allowance, dtype)
        elif call.name in STEPS:
            found[i] = _unstable_step(call, allowance, dtype)
        elif call.name in JUMPS:
            jump = _unstable_jump(call, allowance, dtype)
            if jump is not None:
                found[i], undetermined_by = jump[:2], jump[2]
                floored[i] = torch.maximum(floored[i], undetermined_by)   # what reads it sees the whole period
        elif call.name in SIGN_UNSPECIFIED:
            found[i] = _unspecified_zero_signs(call)
    return {i: v for i, v in found.items() if v is not None and bool(v[0].any())}


def _operand(x):
    return x.double() if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)


def _unstable_comparison(call, allowance, overflowed, dtype):
    a, b = call.args[0], call.args[1]
    if not any(isinstance(x, torch.Tensor) and x.dtype.is_floating_point for x in (a, b)):
        return None
    room = margin(dtype, call.value.numel()) * (allowance(a) + allowance(b))
    gap = (_operand(a) - _operand(b)).abs()
    mask = (((gap <= room) & (room > 0)) | overflowed(a) | overflowed(b)).expand(call.value.shape)
    return mask, torch.where(mask, ~call.value, call.value)


def _unstable_extreme(call, allowance, dtype):
    x = call.args[0]
    if not x.dtype.is_floating_point or x.numel() < 2:
        return None
    dim = call.kwargs.get("dim", call.args[1] if len(call.args) > 1 else None)
    signed = ARG_EXTREMES[call.name] * x.double()
    room = allowance(x).expand(x.shape)
    if dim is None:
        signed, room = signed.reshape(-1), room.reshape(-1)
        dim = 0
    if signed.shape[dim] < 2:
        return None
    top = signed.topk(2, dim=dim)
    gap = top.values.narrow(dim, 0, 1) - top.values.narrow(dim, 1, 1)
    spread = room.amax(dim=dim, keepdim=True) * 2 * margin(dtype, call.value.numel())
    mask = (gap <= spread) & (spread > 0) & ~signed.isnan().any(dim=dim, keepdim=True)
    mask, second = mask.reshape(call.value.shape), top.indices.narrow(dim, 1, 1).reshape(call.value.shape)
    return mask, torch.where(mask, second, call.value)


def _unstable_step(call, allowance, dtype):
    """A step function (floor, round, a cast to integers or to a coarser float) whose input
    may move across a step: the elements where it may, and the neighbouring step."""
    moved = _moved_both_ways(call, allowance, dtype)
    if moved is None or not _coarsens(call.args[0].dtype, call.value.dtype):
        return None
    x, room, up, down = moved
    up_moves, down_moves = ~same_bits(up, call.value), ~same_bits(down, call.value)
    mask = (up_moves | down_moves) & torch.isfinite(x)
    return mask, torch.where(mask, torch.where(up_moves, up, down), call.value)


def _unstable_jump(call, allowance, dtype):
    """remainder/fmod whose dividend may move across a multiple of the divisor, where the
    result jumps by the divisor: those elements, the value just across the jump (the moved
    result less the move: the slope is 1 on either side), and per element the divisor's
    magnitude where the dividend's room spans it (0 elsewhere). There the result is not
    determined at all (fmod(3.2e29, 1.5) in float32 is any value of the period), so what
    reads it gets the whole period as its allowance, and the flip moves it by as much."""
    moved = _moved_both_ways(call, allowance, dtype)
    if moved is None:
        return None
    x, room, up, down = moved
    value = call.value.double()
    period = _operand(call.args[1]).abs() if len(call.args) > 1 else torch.zeros((), dtype=torch.float64)
    undetermined = ((room >= period) & (period > 0) & torch.isfinite(x)).expand(value.shape)
    jumps_up, jumps_down = ((moved.double() - value).abs() > 2 * room for moved in (up, down))
    mask = ((jumps_up | jumps_down) & torch.isfinite(x)) | undetermined
    across = torch.where(jumps_up, up - room, down + room)
    across = torch.where(undetermined, value - torch.copysign(period.expand(value.shape), value), across)
    flipped = torch.where(mask, across.to(call.value.dtype), call.value)
    return mask, flipped, torch.where(undetermined, period, 0.0)


def _unspecified_zero_signs(call):
    """A function that does not specify the sign of its zeros (SIGN_UNSPECIFIED): every zero
    it returns, and the same zero of the other sign."""
    if not call.value.dtype.is_floating_point:
        return None
    zero = call.value == 0
    return zero, torch.where(zero, -call.value, call.value)


def _moved_both_ways(call, allowance, dtype):
    """(x, room, result at x + room, result at x - room) for a call on a float first operand
    x that may move by room = margin x its allowance; None where it cannot move."""
    x = call.args[0]
    if not (isinstance(x, torch.Tensor) and x.dtype.is_floating_point):
        return None
    room = margin(dtype, call.value.numel()) * allowance(x).expand(x.shape)
    if not bool((room > 0).any()):
        return None
    with torch.no_grad():
        up, down = (call.func(x + sign * room, *call.args[1:], **call.kwargs) for sign in (1.0, -1.0))
    return x, room, up, down


def _coarsens(source: torch.dtype, result: torch.dtype) -> bool:
    if not result.is_floating_point:
        return True
    return source == result or torch.finfo(result).eps > torch.finfo(source).eps


def _flip(runner, calls, outputs, finals, unstable_calls):
    """Rerun with every unstable decision flipped: how far that moves each float output
    and final input, and which discrete output elements change (unstable)."""
    if not unstable_calls:
        zeros = [torch.zeros(o.shape, dtype=torch.float64) for o in outputs]
        return zeros, [torch.zeros(f.shape, dtype=torch.float64) for f in finals], [
            torch.zeros(o.shape, dtype=torch.bool) if not o.dtype.is_floating_point else None for o in outputs]

    def flip(i, call):
        if i in unstable_calls:
            call.result.copy_(unstable_calls[i][1])

    _, got_out, got_in = runner.run(flip)
    out_moved, unstable = [], []
    for g, o in zip(got_out, outputs):
        d = _delta(g, o)
        floating = o.dtype.is_floating_point
        out_moved.append(d if floating else torch.zeros_like(d))
        unstable.append(None if floating else d > 0)
    return out_moved, [_delta(g, f) if f.dtype.is_floating_point else torch.zeros(f.shape, dtype=torch.float64)
                       for g, f in zip(got_in, finals)], unstable
