"""Signed zeros as decisions. The sign of a zero that relu, clamps, max/min, pooling by max,
orderings and sums return is unspecified (the judge's SIGN_UNSPECIFIED): a route whose answer
differs from eager only through that sign passes, as one whose comparison rounding may flip
does. Ops that define a zero's sign (neg, mul, sub, add, abs: IEEE 754) must keep it: a route
that gets it wrong still fails wherever the sign changes an answer (atan2, 1/x, copysign, pow,
signbit).

Each route here is the program with one op computed another way, in float32, as a compiler
lowers it: an alternative that differs from eager only in the sign of the op's zeros, or a
rewrite that is wrong under signed zeros (x * -1 as 0 - x, x + 0 folded to x)."""
import math

import pytest
import torch

from torchsim_diff.judge import carried_rounding, comparison
from torchsim_diff.judge.rounding_rules import (ARG_EXTREMES, COMPARISONS, EXACT, JUMPS, ROUNDING, SIGN_UNSPECIFIED,
                                                STEPS)

F = torch.nn.functional
DTYPE = torch.float32

# +0.0 and -0.0 tied in every pairing the alternatives below use: x[k] with x[k + 4] (two rows
# swapped), x[2j] with x[2j + 1] (pooling windows reversed), x[k] with x[7 - k] (flip)
ZERO_TIES = [0.0, -0.0, -0.0, 0.0, -0.0, 0.0, 0.0, -0.0]
MIXED = [-0.0, 0.0, -2.0, 1.5, -0.5, 3.0]
# x[k] with x[3 - k]: short enough for eager's scalar loop in float32 and float64 alike (its
# vector loop returns maximum's other operand: from 16 float32s or 8 float64s on AVX2)
FLIPPED_PAIRS = [0.0, 0.0, -0.0, -0.0]

# op -> (eager's spelling, another lowering that differs only in the sign of the op's zeros, input)
UNSPECIFIED = {
    "relu-as-select": (torch.relu, lambda x: torch.where(x > 0, x, 0.0), MIXED),       # torch._refs, torch-mlir
    "relu-as-product": (torch.relu, lambda x: x * (x > 0), MIXED),                     # -0.0 for every x < 0
    "clamp-min": (lambda x: torch.clamp(x, min=0.0), lambda x: torch.maximum(torch.zeros_like(x), x), MIXED),
    "hardtanh": (lambda x: F.hardtanh(x, 0.0, 1.0),
                 lambda x: torch.minimum(torch.maximum(torch.zeros_like(x), x), torch.ones_like(x)), MIXED),
    "elu": (F.elu, lambda x: torch.where(x > 0, x, torch.exp(x) - 1), MIXED),          # torch-mlir: exp(x) - 1
    "maximum": (lambda x: torch.maximum(x, x.flip(0)), lambda x: torch.maximum(x.flip(0), x), FLIPPED_PAIRS),
    "minimum": (lambda x: torch.minimum(x, x.flip(0)), lambda x: torch.minimum(x.flip(0), x), FLIPPED_PAIRS),
    "amax": (lambda x: x.reshape(2, 4).amax(0), lambda x: x.reshape(2, 4).flip(0).amax(0), ZERO_TIES),
    "amin": (lambda x: x.reshape(2, 4).amin(0), lambda x: x.reshape(2, 4).flip(0).amin(0), ZERO_TIES),
    "max-dim": (lambda x: torch.max(x.reshape(2, 4), 0).values,
                lambda x: torch.max(x.reshape(2, 4).flip(0), 0).values, ZERO_TIES),
    "max_pool1d": (lambda x: F.max_pool1d(x.reshape(1, 1, 8), 2).reshape(4),
                   lambda x: F.max_pool1d(x.flip(0).reshape(1, 1, 8), 2).reshape(4).flip(0), ZERO_TIES),
    "sort": (lambda x: torch.sort(x, stable=True).values, lambda x: torch.sort(x.flip(0), stable=True).values,
             ZERO_TIES),
    "sum-of-one": (lambda x: x.reshape(-1, 1).sum(1), lambda x: x.reshape(-1, 1)[:, 0], MIXED),   # eager: +0.0
}

# op -> (the op, a rewrite that is wrong under signed zeros, input)
DEFINED = {
    "neg": (torch.neg, lambda x: 0.0 - x, [0.0, -0.0, -1.5, 2.0]),                     # neg(+0) = -0
    "mul-by-minus-one": (lambda x: x * -1.0, lambda x: 0.0 - x, [0.0, -0.0, -1.5, 2.0]),
    "mul-by-zero": (lambda x: x * 0.0, lambda x: torch.zeros_like(x), [-1.5, 2.0, -0.25, 0.0]),   # -1.5 * 0 = -0
    "add-zero": (lambda x: x + 0.0, lambda x: x, [-0.0, 1.5, 0.0, -2.0]),                # -0 + 0 = +0
    "sub": (lambda x: x - x.flip(0), lambda x: -(x.flip(0) - x), [0.0, -0.0, 1.5, 0.0]),   # x - y as -(y - x)
    "abs": (torch.abs, lambda x: torch.where(x < 0, -x, x), [-0.0, 1.5, -2.0, 0.0]),     # abs(-0) = +0
}

# what turns a zero's sign into another answer
CONSUMERS = {
    "atan2": lambda v: torch.atan2(v, -torch.ones_like(v)),           # +-pi
    "reciprocal": torch.reciprocal,                                   # +-Inf
    "copysign": lambda v: torch.copysign(torch.ones_like(v), v),      # +-1
    "pow": lambda v: torch.pow(v, -3.0),                              # +-Inf
    "signbit": torch.signbit,                                         # a boolean output
}


def _run(op, consumer):
    return lambda x: (consumer(op(x)),)


def _judge(program, route, values, *, rule=True, monkeypatch=None):
    """The judge's verdict (Mismatch or None, Stats) on `route`'s float32 output, against eager
    and float64 runs of `program` on `values`; rule=False judges without SIGN_UNSPECIFIED."""
    x = torch.tensor(values, dtype=torch.float64)
    (truth,), (eager,) = program(x), program(x.to(DTYPE))
    if not rule:
        monkeypatch.setattr(carried_rounding, "SIGN_UNSPECIFIED", ())
    allowance = carried_rounding.carried(program, [x], DTYPE)
    (got,) = route(x.to(DTYPE))
    assert (~comparison.same_bits(got, eager)).any(), "the route must differ from eager for the case to test anything"
    return comparison.compare(got, eager, truth, carried=allowance.outputs[0], sensitivity=allowance.sensitivity[0],
                              unstable=allowance.unstable[0], overflow=allowance.overflow[0])


def _same_zero_signs(a, b) -> bool:
    zero = a == 0
    return torch.equal(torch.signbit(a[zero]), torch.signbit(b[zero]))


# -- a zero of unspecified sign: either sign passes ------------------------------------------------
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("op", list(UNSPECIFIED))
def test_a_route_that_differs_only_in_the_sign_of_an_unspecified_zero_passes(op, consumer, monkeypatch):
    eager_op, other_lowering, values = UNSPECIFIED[op]
    program, route = _run(eager_op, CONSUMERS[consumer]), _run(other_lowering, CONSUMERS[consumer])
    assert _judge(program, route, values)[0] is None
    found, _ = _judge(program, route, values, rule=False, monkeypatch=monkeypatch)
    x = torch.tensor(values, dtype=torch.float64)
    if _same_zero_signs(eager_op(x), eager_op(x.to(DTYPE))):
        assert found is not None and found.kind in ("wrong_values", "nonfinite_mismatch")   # what it passes by
    # else eager's own zeros differ from float64's (a vector loop's maximum, above), and eager's
    # error allows the route as much


def test_the_campaigns_atan2_of_relu_passes_with_either_sign():
    # mlir, wrong_values: atan2(relu(x), x) at x = -0.0 is -pi in eager (relu(-0.0) is -0.0), +pi
    # where relu returns +0.0
    def program(x):
        return (torch.atan2(torch.relu(x), x),)

    def route(x):
        return (torch.atan2(torch.where(x > 0, x, 0.0), x),)
    found, _ = _judge(program, route, [-0.0, 2.0, -3.0])
    assert found is None


def test_a_sign_defined_by_an_op_after_the_unspecified_zero_follows_it():
    # neg defines the sign of its result, from its operand's: a relu zero of either sign, negated
    def program(x):
        return (torch.atan2(torch.neg(torch.relu(x)), -torch.ones_like(x)),)

    def route(x):
        return (torch.atan2(torch.neg(torch.where(x > 0, x, 0.0)), -torch.ones_like(x)),)
    assert _judge(program, route, MIXED)[0] is None


def test_a_signbit_of_an_unspecified_zero_is_unstable_and_any_other_is_judged():
    def program(x):
        return (torch.signbit(torch.relu(x)),)
    x = torch.tensor(MIXED, dtype=torch.float64)
    allowance = carried_rounding.carried(program, [x], DTYPE)
    assert allowance.unstable[0].tolist() == (x <= 0).tolist()            # every zero relu returns
    (truth,) = program(x)
    flipped_zeros, flipped_positive = truth.clone(), truth.clone()
    flipped_zeros[x <= 0] = ~truth[x <= 0]
    flipped_positive[3] = True                                           # signbit(relu(1.5)) is False
    found, stats = comparison.compare(flipped_zeros, truth, truth, unstable=allowance.unstable[0])
    assert found is None and stats.unstable == int((x <= 0).sum())
    found, _ = comparison.compare(flipped_positive, truth, truth, unstable=allowance.unstable[0])
    assert found.kind == "wrong_values"


def test_a_route_wrong_beside_an_unspecified_zero_still_fails():
    def program(x):
        return (torch.atan2(torch.relu(x), -torch.ones_like(x)),)

    def route(x):
        (right,) = program(torch.where(x > 0, x, 0.0))
        right[3] += 0.01                                                 # atan2(1.5, -1) off by 0.01
        return (right,)
    found, _ = _judge(program, route, MIXED)
    assert found.kind == "wrong_values" and "Mismatched elements: 1 / 6" in found.message and "(3,)" in found.message


# -- a zero whose sign an op defines: the wrong sign fails ----------------------------------------
@pytest.mark.parametrize("consumer", list(CONSUMERS))
@pytest.mark.parametrize("op", list(DEFINED))
def test_a_wrong_sign_from_an_op_that_defines_it_fails(op, consumer):
    defined, wrong_rewrite, values = DEFINED[op]
    program, route = _run(defined, CONSUMERS[consumer]), _run(wrong_rewrite, CONSUMERS[consumer])
    found, _ = _judge(program, route, values)
    assert found is not None and found.kind in ("wrong_values", "nonfinite_mismatch")


def test_an_input_zero_passed_through_unchanged_keeps_its_sign():
    def program(x):
        return (torch.reciprocal(torch.clone(x)),)

    def route(x):
        return (torch.reciprocal(x.abs() * torch.sign(x) + 0.0),)         # -0.0 comes back +0.0
    found, _ = _judge(program, route, [-0.0, 2.0])
    assert found.kind == "nonfinite_mismatch"


def test_an_infinity_from_a_pole_is_exact_and_a_value_beyond_the_dtypes_max_is_not():
    # 1/-0.0 is -Inf in every dtype and order; exp(100) is finite in float64, Inf in float32
    def program(x):
        return (torch.reciprocal(x), torch.exp(x) * 0.0)
    x = torch.tensor([-0.0, 100.0], dtype=torch.float64)
    allowance = carried_rounding.carried(program, [x], DTYPE)
    assert allowance.overflow[0].tolist() == [False, False] and allowance.overflow[1].tolist() == [False, True]


# -- the table ----------------------------------------------------------------------------------
def test_the_unspecified_sign_table_names_known_functions_and_none_that_define_a_zeros_sign():
    assert set(SIGN_UNSPECIFIED) <= set(EXACT) | set(ROUNDING)
    assert not set(SIGN_UNSPECIFIED) & {*COMPARISONS, *ARG_EXTREMES, *STEPS, *JUMPS}
    assert not set(SIGN_UNSPECIFIED) & {"neg", "abs", "mul", "div", "add", "sub", "sqrt", "floor", "round", "where",
                                        "clone", "copy", "nan_to_num"}


@pytest.mark.parametrize("op", list(UNSPECIFIED))
def test_each_unspecified_op_is_in_the_table_as_the_judge_records_it(op):
    eager_op, _, values = UNSPECIFIED[op]
    with carried_rounding._Run() as run:
        eager_op(torch.tensor(values, dtype=torch.float64))
    assert any(call.name in SIGN_UNSPECIFIED for call in run.calls), [call.name for call in run.calls]


# -- the campaign's case through the oracle and on the route that reported it --------------------
def _atan2_of_relu_case():
    from tests.conftest import make_case
    from torchsim_diff.case.graph import Case
    from torchsim_diff.case.values import encode
    nodes = [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}},
             {"id": "v1", "op": "atan2", "args": ["v0", "x0"], "attrs": {}}]
    data = make_case(nodes=nodes, inputs=[("x0", [4], [1], 0, 4, {})], outputs=["v1"]).to_dict()
    data["inputs"][0]["data"] = encode(torch.tensor([-0.0, 0.0, -1.0, 2.0]))
    return Case.from_dict(data)


def test_the_oracle_passes_a_relu_zero_of_the_other_sign_and_fails_a_wrong_value():
    from torchsim_diff.case.program_check import load_program
    from torchsim_diff.judge import oracle
    case = _atan2_of_relu_case()
    ref = oracle.reference(case, load_program(case.program_source()))
    assert float(ref.outputs[0][0]) == pytest.approx(-math.pi)                 # eager: relu(-0.0) is -0.0
    other_sign = ref.outputs[0].clone()
    other_sign[0] = -other_sign[0]                                             # +pi: relu returned +0.0
    assert oracle.judge_case(case, ref, [other_sign], ref.storages)[0] is None
    wrong = ref.outputs[0].clone()
    wrong[3] = 1.0                                                             # atan2(2, 2) is pi / 4
    assert oracle.judge_case(case, ref, [wrong], ref.storages)[0].kind.value == "wrong_values"


@pytest.mark.slow
@pytest.mark.parametrize("route", ["mlir", "inductor"])
def test_atan2_of_relu_at_negative_zero_passes_on_the_routes(route_checker, route):
    available, reason, _ = route_checker.availability(route)
    if not available:
        pytest.skip(f"{route}: {reason}")
    verdict = route_checker.check(_atan2_of_relu_case(), route)
    assert verdict.status.value == "pass", verdict.message
