"""Per-op error figures come from each op's own value, not from the case's worst output."""
import pytest
import torch

from tests.conftest import make_case
from torchsim_diff.report import tables
from torchsim_diff.run.checker import Checker
from torchsim_diff.case.graph import Case
from torchsim_diff.run.op_figures import OpFigures
from torchsim_diff.case.values import encode
from torchsim_diff.judge import comparison

pytestmark = pytest.mark.slow
X0 = ("x0", [8], [1], 0, 8, {})
TANH = {"id": "v0", "op": "tanh", "args": ["x0"], "attrs": {}}


def _tanh_beside_a_long_product() -> Case:
    """tanh(x0), and prod over 64 broadcast copies of 1.7: fp32 rounding grows to ~1e9 there."""
    case = make_case(nodes=[TANH, {"id": "v1", "op": "prod", "args": ["x1"], "attrs": {}}],
                     inputs=[X0, ("x1", [64], [0], 0, 1, {"classes": ["broadcast"]})], outputs=["v0", "v1"])
    data = case.to_dict()
    data["inputs"][1]["data"] = encode(torch.tensor([1.7], dtype=torch.float32))
    return Case.from_dict(data)


def test_an_op_beside_an_ill_conditioned_one_keeps_its_own_figures(tmp_path):
    both, alone = _tanh_beside_a_long_product(), make_case(nodes=[TANH], inputs=[X0], outputs=["v0"])
    with Checker(out_dir=str(tmp_path)) as checker:
        verdict = checker.check(both, "eager")
        errors = OpFigures().for_verdict(checker, verdict)
        tanh_alone = checker.check(alone, "eager")
    figures = errors.carried
    assert verdict.stats.max_abs_err > 1e3                      # the case's worst: the product's
    assert figures["tanh"]["max_abs_err"] == tanh_alone.stats.max_abs_err < 1e-6
    assert figures["tanh"]["max_ulp"] == tanh_alone.stats.max_ulp
    assert figures["prod"]["max_abs_err"] == verdict.stats.max_abs_err
    assert errors.local["tanh"]["max_abs_err"] == tanh_alone.stats.max_abs_err    # its inputs are the case's
    record = verdict.record().with_fields(**errors.fields())
    rows = {row["op"]: row for row in tables.tolerance_rows([record])}
    assert rows["tanh"]["atol needed max"] == errors.local["tanh"]["atol_needed"]
    assert rows["tanh"]["carried atol needed max"] == figures["tanh"]["atol_needed"]


def test_a_route_summing_in_float16_charges_the_sum_alone(tmp_path, double_routes):
    """The planted route (tests/route_doubles.HalfSumRoute) through its worker: its sum needs
    more than float16's default tolerance, the ops reading the sum do not."""
    from tests.test_tolerance import DOWNSTREAM, _chain
    rtol, atol = comparison.TOLERANCES[torch.float16]
    with Checker(out_dir=str(tmp_path)) as checker:
        verdict = checker.check(_chain(3), "double-half-sum")
        errors = OpFigures().for_verdict(checker, verdict)
    assert verdict.status == "pass"
    assert errors.local["sum"]["atol_needed"] > atol
    assert all(errors.local[op]["atol_needed"] <= atol < errors.carried[op]["atol_needed"] for op in DOWNSTREAM)
