"""The oracle's rule on hand-made numbers: what must pass and what must fail."""
import math

import pytest
import torch

from torchsim_diff.judge import comparison, oracle
from torchsim_diff.judge.comparison import Where
from torchsim_diff.results.kinds import Kind
from torchsim_diff.case.program_check import load_program


def _compare(got, want, truth):
    return oracle.compare_values(got, want, truth, Where.output(0))


def test_fp16_reduction_with_large_eager_error_passes():
    torch.manual_seed(0)
    x = torch.rand(4096, dtype=torch.float64) * 2 - 1
    truth = x.sum().reshape(1)
    eager = x.half().sum().reshape(1)                           # fp16 eager: visible error
    route = (x.half().float().sum()).half().reshape(1)          # accumulate in fp32, round once
    assert float((eager.double() - truth).abs()) > 1e-3
    assert isinstance(_compare(route, eager, truth), comparison.Stats)


def test_one_ulp_exp_difference_in_fp32_passes():
    x = torch.linspace(-3, 3, 101, dtype=torch.float64)
    truth = x.exp()
    eager = truth.float()
    route = torch.nextafter(eager, torch.full_like(eager, math.inf))
    stats = _compare(route, eager, truth)
    assert isinstance(stats, comparison.Stats)
    assert 0.5 <= stats.max_ulp <= 2.0


def test_one_wrong_element_fails_with_its_index():
    truth = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7
    eager = truth.float()
    route = eager.clone()
    route[2, 1] += 1e-3
    kind, message = _compare(route, eager, truth)
    assert kind == Kind.WRONG_VALUES
    assert "Mismatched elements: 1 / 12" in message and "(2, 1)" in message


def test_nan_where_eager_is_finite_fails():
    truth = torch.ones(5, dtype=torch.float64)
    eager = truth.float()
    route = eager.clone()
    route[3] = float("nan")
    kind, message = _compare(route, eager, truth)
    assert kind == Kind.NONFINITE_MISMATCH
    assert "Mismatched elements: 1 / 5" in message


def test_inf_allowed_when_the_rounded_truth_overflows():
    truth = torch.tensor([70000.0, 1.0], dtype=torch.float64)     # overflows float16
    eager = torch.tensor([60000.0, 1.0], dtype=torch.float16)     # eager happened to stay finite
    route = torch.tensor([float("inf"), 1.0], dtype=torch.float16)
    assert isinstance(_compare(route, eager, truth), comparison.Stats)


def test_integer_results_must_match_exactly():
    want = torch.tensor([1, 2, 3])
    kind, _ = _compare(torch.tensor([1, 2, 4]), want, want)
    assert kind == Kind.WRONG_VALUES
    assert isinstance(_compare(want.clone(), want, want), comparison.Stats)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_ulp_is_the_spacing_of_the_dtype(dtype):
    t = torch.tensor([1.0, 3.0, 1024.0], dtype=torch.float64)
    spacing = (torch.nextafter(t.to(dtype), torch.full_like(t, math.inf).to(dtype)).double() - t)
    assert torch.equal(comparison.ulp(t, dtype), spacing)


def test_same_bits_distinguishes_negative_zero():
    a, b = torch.tensor([0.0, float("nan")]), torch.tensor([-0.0, float("nan")])
    assert comparison.same_bits(a, b).tolist() == [False, True]


def _layer_norm_of_constant_rows():
    from tests.conftest import make_case
    from torchsim_diff.case.graph import Case
    from torchsim_diff.case.values import encode
    case = make_case(nodes=[{"id": "v0", "op": "layer_norm", "args": ["x0"], "attrs": {"normalized_shape": [5]}}],
                     inputs=[("x0", [3, 5], [0, 0], 0, 1, {"classes": ["broadcast"]})], outputs=["v0"])
    data = case.to_dict()
    data["inputs"][0]["data"] = encode(torch.tensor([1.9], dtype=torch.float32))   # every element 1.9
    return Case.from_dict(data)


def _program(case):
    return load_program(case.program_source())


def test_ill_conditioned_output_allows_rounding_level_differences():
    case = _layer_norm_of_constant_rows()                  # variance 0: output amplifies rounding by 1/sqrt(eps)
    ref = oracle.reference(case, _program(case))
    assert torch.equal(ref.outputs[0], torch.zeros(3, 5))   # eager happens to be exact
    assert float(ref.output_sensitivity[0].max()) > 2e-5
    nudged = ref.outputs[0] - 7.5e-5                       # what Inductor's fp32 mean gave here
    assert oracle.judge_case(case, ref, [nudged], ref.storages)[0] is None
    broken = ref.outputs[0] + 0.1
    assert oracle.judge_case(case, ref, [broken], ref.storages)[0].kind == Kind.WRONG_VALUES


@pytest.mark.parametrize("dtype,numel,expected", [
    (torch.float32, 100, 2.0), (torch.float16, 100, 3.0), (torch.bfloat16, 100, 3.0),
    (torch.float32, 1, 4.0), (torch.float16, 10, 6.0),
])
def test_margin_by_dtype_and_size(dtype, numel, expected):
    assert comparison.margin(dtype, numel) == expected


def test_a_long_product_two_and_a_half_times_eagers_error_passes_as_a_scalar():
    truth = torch.tensor([1.59782e36], dtype=torch.float64)
    eager = (truth * (1 + 1.0e-6)).float()
    route = (truth * (1 - 4.2e-6)).float()
    assert isinstance(_compare(route, eager, truth), comparison.Stats)
    wide = truth.expand(100).clone()
    assert _compare(route.expand(100).clone(), eager.expand(100).clone(), wide)[0] == Kind.WRONG_VALUES


def test_needed_tolerances_are_the_smallest_that_pass_allclose():
    truth = torch.tensor([1.0, 100.0], dtype=torch.float64)
    eager = truth.float()
    route = torch.tensor([1.0 + 8e-6, 100.0 + 1e-4], dtype=torch.float32)
    stats = _compare(route, eager, truth)
    rtol, atol = comparison.TOLERANCES[torch.float32]
    err = (route.double() - truth).abs()
    assert stats.atol_needed == pytest.approx(float((err - rtol * truth).max()))
    assert stats.rtol_needed == pytest.approx(float(((err - atol) / truth).max()))
    assert torch.allclose(route.double(), truth, rtol=rtol, atol=stats.atol_needed * 1.0001)
    assert not torch.allclose(route.double(), truth, rtol=rtol, atol=stats.atol_needed * 0.9)
