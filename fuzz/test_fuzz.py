"""The fuzz campaign: `pytest -n auto fuzz/` runs every op family on every --routes route.

Items are route x dtype x family x shard, so pytest-xdist spreads a campaign over cores.
Each item draws graphs whose ops come from its family (plus pointwise ops to combine
with), runs each on the route, and raises the bucket's own exception for a new bug.
Under --fuzz-budget an item stops drawing when its share of the budget is spent, and
passes with what it ran (the plugin turns its BudgetSpent into a pass).
"""
import pytest
from hypothesis import given, seed

from torchsim_diff.ops import FAMILIES, ops_in
from torchsim_diff.generate.strategies import cases, no_local_constants


def _families(family: str) -> list:
    return [family] if family == "pointwise" else [family, "pointwise"]


@pytest.mark.parametrize("family", FAMILIES)
def test_fuzz(torchsim_session, fuzz_route, fuzz_dtype, fuzz_shard, family):
    if not any(op.family == family for op in ops_in([family], None, fuzz_dtype)):
        pytest.skip(f"no {family} op supports {fuzz_dtype}")
    torchsim_session.require(fuzz_route)
    strategy = cases(dtype=fuzz_dtype, families=_families(family), max_nodes=torchsim_session.max_nodes)

    @seed(torchsim_session.fuzz_seed(fuzz_route, fuzz_dtype, family, fuzz_shard))
    @torchsim_session.settings()
    @given(case=strategy)
    def run_case(case):
        torchsim_session.check(case, fuzz_route)

    with no_local_constants():      # the seed alone decides the cases, whatever ran before here
        run_case()
