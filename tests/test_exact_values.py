"""Exact values everywhere: every float a case holds (-0.0, NaN, ±Inf, subnormals, the
largest finite value) comes back bit for bit from case JSON and from the text of repro.py."""
import pytest
import torch

from tests.conftest import inputs_built_by, make_case
from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case
from torchsim_diff.report.bundles import render_script
from torchsim_diff.results.record import Record

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = {"int32": torch.int32, "int64": torch.int64}
BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
        torch.float64: torch.int64, torch.int32: torch.int32, torch.int64: torch.int64}


def special_values(dtype: torch.dtype) -> torch.Tensor:
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return torch.tensor([0, 1, -1, info.max, info.min, info.max - 1], dtype=dtype)
    info = torch.finfo(dtype)
    subnormal = info.smallest_normal / 8
    numbers = [-0.0, 0.0, float("nan"), float("inf"), float("-inf"), subnormal, -subnormal, info.smallest_normal,
               info.max, -info.max, info.eps, 1 / 3, -71.2, 3.8147e-06]
    return torch.tensor(numbers, dtype=torch.float64).to(dtype)


def explicit_case(dtype_name: str) -> tuple:
    dtype = layout.dtype_of(dtype_name)
    data = special_values(dtype)
    n = data.numel()
    case = make_case([{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}}],
                     [("x0", [n], [1], 0, n, {"dtype": dtype_name})], ["v0"], dtype=dtype_name)
    spec = case.to_dict()
    spec["inputs"][0]["data"] = values.encode(data)
    return Case.from_dict(spec), data


def bits(x: torch.Tensor) -> list:
    return x.contiguous().view(BITS[x.dtype]).tolist()


@pytest.mark.parametrize("dtype_name", [*FLOAT_DTYPES, *INT_DTYPES])
def test_case_json_keeps_every_value_bit_exact(dtype_name):
    case, data = explicit_case(dtype_name)
    again = Case.from_json(case.to_json())
    view = layout.materialize(again.inputs[0], 0, 0, False)
    assert bits(view) == bits(data)


@pytest.mark.parametrize("dtype_name", [*FLOAT_DTYPES, *INT_DTYPES])
def test_repro_py_text_keeps_every_value_bit_exact(dtype_name):
    case, data = explicit_case(dtype_name)
    record = Record.from_dict({"route": "inductor", "status": "fail", "kind": "wrong_values", "bucket": "b",
                               "case_id": case.case_id, "ops": ["neg"], "case": case.to_dict()})
    (built,) = inputs_built_by(render_script(record, case))
    assert built["bits"] == bits(data)


@pytest.mark.parametrize("dtype_name", ["float32", "int64", "bool"])
def test_a_zero_size_input_with_explicit_data_materializes_empty(dtype_name):
    case = make_case([{"id": "v0", "op": "neg", "args": ["x0"], "attrs": {}}],
                     [("x0", [0], [1], 0, 0, {"dtype": dtype_name})], ["v0"], dtype="float32")
    spec = case.to_dict()
    spec["inputs"][0]["data"] = values.encode(torch.empty(0, dtype=layout.dtype_of(dtype_name)))
    view = layout.materialize(Case.from_dict(spec).inputs[0], 0, 0, False)
    assert view.shape == (0,) and view.dtype == layout.dtype_of(dtype_name)


def test_a_one_element_expand_is_written_as_its_value():
    """An eager result cut into an input (triage.graph_passes) may be a one-element expand:
    contiguous() keeps its stride 0, and the byte view refused it ("triage failed" in the zoo)."""
    expanded = torch.tensor(3.5).expand(1, 1).contiguous().reshape(-1)
    assert expanded.stride() == (0,)
    assert values.decode(values.encode(expanded), torch.float32, 1).tolist() == [3.5]
