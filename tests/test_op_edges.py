"""Ops declare their edges (`OpSpec.edges`: where their semantics change regime), as they declare
their rounding rule: an op with neither edges nor a stated reason fails here. Each value class,
form and argument condition is checked on inputs planted on either side of it."""
import math

import pytest
import torch

from torchsim_diff.ops import OpSpec, UnknownOp, all_ops, declare_edges, register
from torchsim_diff.ops.edges import (ARG_CONDITIONS, FORMS, VALUE_CLASSES, ArgShape, ArgValue, Form, NoEdges, Value,
                                     met)

OPS = all_ops()
F16_MAX = torch.finfo(torch.float16).max
SUBNORMAL = torch.finfo(torch.float32).tiny / 4


@pytest.mark.parametrize("name", list(OPS))
def test_each_op_declares_its_edges_or_why_it_has_none(name):
    edges = OPS[name].edges
    assert edges is not None, (f"op {name!r} declares no edges: give OpSpec(..., edges=(...)) the values, arguments "
                               f"and operand forms where it changes regime, or NoEdges('why it has none')")
    assert isinstance(edges, NoEdges) or len(edges) >= 2, f"op {name!r} declares a single edge: {edges}"


def test_most_ops_have_edges_and_those_without_say_why():
    without = {name: spec.edges.reason for name, spec in OPS.items() if isinstance(spec.edges, NoEdges)}
    assert len(without) <= len(OPS) // 10, f"too many ops say they have no edges: {sorted(without)}"
    assert all("view" in reason for reason in without.values()), without


def test_every_word_of_the_vocabulary_is_some_ops_edge():
    declared = [edge for spec in OPS.values() if not isinstance(spec.edges, NoEdges) for edge in spec.edges]
    for kind, field, vocabulary in ((Value, "value", VALUE_CLASSES), (Form, "form", FORMS),
                                    (ArgShape, "condition", ARG_CONDITIONS)):
        used = {getattr(edge, field) for edge in declared if isinstance(edge, kind)}
        assert not set(vocabulary) - used, f"{kind.__name__} words no op declares: {sorted(set(vocabulary) - used)}"


BAD_EDGES = {
    "empty tuple": ((), "non-empty tuple"),
    "a list": ([Value(0, "nan")], "non-empty tuple"),
    "unknown value class": ((Value(0, "nan"), Value(0, "huge")), "value='huge' is not one of"),
    "unknown form": ((Form(0, "tiled"),), "form='tiled' is not one of"),
    "unknown condition": ((ArgShape("shift past the moon"),), "condition='shift past the moon'"),
    "not an edge": (("nan",), "is not one of"),
    "twice": ((Value(0, "nan"), Value(0, "nan")), "declared twice"),
    "no reason": (NoEdges(" "), "needs a reason"),
}


@pytest.mark.parametrize("label", list(BAD_EDGES))
def test_a_malformed_declaration_is_refused_at_registration(label):
    edges, message = BAD_EDGES[label]
    spec = OPS["add"]
    with pytest.raises(ValueError, match="op 'add2'.*" + message.replace("(", r"\(")):
        register(OpSpec("add2", "pointwise", spec.emit, spec.build, rounding="pointwise", edges=edges))


def test_edges_are_declared_once_and_for_registered_ops_only():
    with pytest.raises(UnknownOp, match="edges for op 'no_such_op'"):
        declare_edges({"no_such_op": (Value(0, "nan"), Value(0, "inf"))})
    with pytest.raises(ValueError, match="op 'relu': its edges are declared twice"):
        declare_edges({"relu": (Value(0, "nan"), Value(0, "inf"))})


def _f32(*values):
    return torch.tensor(values, dtype=torch.float32)


# class -> (an operand in it, one just outside it)
VALUE_EXAMPLES = {
    "nan": (_f32(1.0, math.nan), _f32(1.0, math.inf)),
    "inf": (_f32(math.inf), _f32(-math.inf)),
    "-inf": (_f32(-math.inf), _f32(math.inf)),
    "+0": (_f32(0.0), _f32(-0.0)),
    "-0": (_f32(-0.0), _f32(0.0)),
    "subnormal": (_f32(SUBNORMAL), _f32(torch.finfo(torch.float32).tiny)),
    "negative": (_f32(-0.5), _f32(-0.0)),
    "max": (torch.tensor([-F16_MAX], dtype=torch.float16), _f32(F16_MAX)),
    "int min": (torch.tensor([-2**31], dtype=torch.int32), torch.tensor([-2**31], dtype=torch.int64)),
    "exp overflow": (torch.tensor([11.1], dtype=torch.float16), _f32(11.1)),
    "exp underflow": (_f32(-88.0), _f32(-87.0)),
    "-exp overflow": (_f32(-89.0), _f32(-88.0)),
    "no fraction": (torch.tensor([2049.0], dtype=torch.float16), _f32(2049.0)),
    "tie": (_f32(-2.5), _f32(2.25)),
    "all true": (torch.tensor([True, True]), torch.tensor([True, False])),
    "all false": (torch.tensor([False]), torch.tensor([False, True])),
    "duplicate": (torch.tensor([1, 0, 1]), torch.tensor([1, 0, 2])),
}


def test_every_value_class_has_an_example():
    assert sorted(VALUE_EXAMPLES) == sorted(VALUE_CLASSES)


@pytest.mark.parametrize("value", list(VALUE_EXAMPLES))
def test_a_value_class_is_met_inside_it_and_not_just_outside(value):
    inside, outside = VALUE_EXAMPLES[value]
    assert met(Value(0, value), [inside], {}) and not met(Value(0, value), [outside], {})
    assert not met(Value(1, value), [inside], {}), "an operand the op does not have"


def test_an_exact_value_and_a_python_number_operand():
    assert met(Value(1, 0.5), [_f32(1.0), 0.5], {}) and not met(Value(1, 0.5), [_f32(0.5), 0.25], {})
    assert met(Form(1, "scalar"), [_f32(1.0), 2], {}) and not met(Form(1, "scalar"), [_f32(1.0), _f32(2.0)], {})


BASE = torch.arange(12.0).reshape(3, 4)
# form -> (an operand in it, one not)
FORM_EXAMPLES = {
    "stride 0": (torch.ones(3, 1).expand(3, 4), torch.ones(1, 4)),
    "permuted": (BASE.t(), BASE[:, ::2]),
    "non-contiguous": (BASE[:, ::2], BASE),
    "offset": (BASE[1:], BASE[:2]),
    "0-d": (torch.tensor(1.0), torch.ones(1)),
    "one element": (torch.ones(1, 1), torch.ones(2)),
    "size-1 dim": (torch.ones(2, 1), torch.ones(2)),
    "scalar": (3, torch.tensor(3)),
    "int64": (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int32)),
    "int32": (torch.ones(2, dtype=torch.int32), torch.ones(2, dtype=torch.int64)),
    "float16": (torch.ones(2, dtype=torch.float16), torch.ones(2, dtype=torch.bfloat16)),
    "float32": (torch.ones(2), torch.ones(2, dtype=torch.float64)),
}


def test_every_form_has_an_example():
    assert sorted(FORM_EXAMPLES) == sorted(FORMS)


@pytest.mark.parametrize("form", list(FORM_EXAMPLES))
def test_a_form_is_met_by_its_operand_only(form):
    inside, outside = FORM_EXAMPLES[form]
    assert met(Form(0, form), [inside], {}) and not met(Form(0, form), [outside], {})


X = torch.zeros(2, 3)
# condition -> (attrs, operands) meeting it, then (attrs, operands) just missing it
CONDITION_EXAMPLES = {
    "shift >= size": (({"shifts": [-3], "dims": [1]}, [X]), ({"shifts": [2], "dims": [1]}, [X])),
    "one element reduced": (({"dim": [0]}, [torch.zeros(1, 3)]), ({"dim": [0]}, [X])),
    "correction >= count": (({"dim": [0], "correction": 2}, [X]), ({"dim": [1], "correction": 2}, [X])),
    "min >= max": (({"min_val": 1.0, "max_val": 1.0}, [X]), ({"min": 0.5, "max": None}, [X])),
    "diagonal past the size": (({"diagonal": -2}, [X]), ({"diagonal": 2}, [X])),
    "k == size": (({"k": 3, "dim": -1}, [X]), ({"k": 2, "dim": -1}, [X])),
    "output divides input": (({"output_size": [1, 3]}, [X]), ({"output_size": [2, 2]}, [X])),
    "ceil adds a window": (({"kernel": [2], "stride": [2], "padding": [0], "ceil_mode": True}, [X]),
                           ({"kernel": [2], "stride": [2], "padding": [0], "ceil_mode": False}, [X])),
    "K == 1": (({}, [torch.zeros(2, 1), torch.zeros(1, 3)]), ({}, [X, torch.zeros(3, 1)])),
    "index at the end": (({"dim": 1}, [X, torch.tensor([2])]), ({"dim": 0}, [X, torch.tensor([2])])),
    "write through a view": (({"view": {"kind": "transpose", "dim0": 0, "dim1": 1}}, [X]), ({"view": None}, [X])),
}


@pytest.mark.parametrize("condition", list(CONDITION_EXAMPLES))
def test_an_argument_condition_holds_against_the_shapes(condition):
    (attrs, operands), (other_attrs, other_operands) = CONDITION_EXAMPLES[condition]
    assert met(ArgShape(condition), operands, attrs) and not met(ArgShape(condition), other_operands, other_attrs)


def test_an_argument_value_is_that_value_not_a_bool_equal_to_it():
    assert met(ArgValue("k", 1), [], {"k": 1}) and not met(ArgValue("k", 1), [], {"k": True})
    assert met(ArgValue("stop", None), [], {"stop": None}) and not met(ArgValue("stop", None), [], {})
