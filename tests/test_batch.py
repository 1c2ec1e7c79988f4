"""Batching (torchsim_diff.run.batch): cases compiled together keep the verdicts they get alone."""
import pytest

from torchsim_diff.run.batch import check_batch, combine
from torchsim_diff.campaign.fuzz import CampaignOptions
from torchsim_diff.run.checker import Checker
from torchsim_diff.case.layout import materialize_all, storage_of
from torchsim_diff.campaign.fuzz import case_strategy
from torchsim_diff.generate.draws import first_cases
from tests.conftest import make_case


@pytest.fixture(scope="module")
def cases():
    return first_cases(case_strategy(CampaignOptions(routes=["eager"], out_dir=".", max_nodes=3)), seed_value=3, count=6)


def _verdicts(verdicts):
    return [(v.case.case_id, v.status, v.kind, v.bucket) for v in verdicts]


def test_combined_inputs_hold_each_case_s_own_bits(cases):
    combined = combine(cases)
    assert len(combined.outputs) == sum(len(c.outputs) for c in cases)
    together = iter(materialize_all(combined.to_dict()))
    for case in cases:
        for alone in materialize_all(case.to_dict()):
            joint = next(together)
            assert joint.shape == alone.shape and joint.stride() == alone.stride()
            assert storage_of(joint).view(-1).numpy().tobytes() == storage_of(alone).view(-1).numpy().tobytes()


@pytest.mark.slow
def test_passes_come_from_the_batch_with_the_solo_verdicts(cases, tmp_path):
    with Checker(out_dir=str(tmp_path)) as checker:
        solo = [checker.check(c, "eager") for c in cases]
        batched = check_batch(checker, cases, "eager")
    assert _verdicts(batched) == _verdicts(solo)
    assert all(v.metrics.batch == len(cases) for v in batched)


@pytest.mark.slow
def test_a_case_failing_in_its_batch_gets_its_solo_verdict(cases, tmp_path, double_routes):
    # this double corrupts output 0 of whatever program it compiles: in a batch, the first case's
    with Checker(out_dir=str(tmp_path)) as checker:
        solo = checker.check(cases[0], "double-wrong-element")
        batched = check_batch(checker, cases, "double-wrong-element")
    assert solo.failed and batched[0].metrics.batch is None
    assert _verdicts(batched[:1]) == _verdicts([solo])


@pytest.mark.slow
def test_a_batch_that_does_not_compile_is_rerun_case_by_case(cases, tmp_path, double_routes):
    with_exp = make_case(nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
                         inputs=[("x0", [2, 3], [3, 1], 0, 6, {})], outputs=["v0"])
    batch = list(cases[:3]) + [with_exp]
    with Checker(out_dir=str(tmp_path)) as checker:
        solo = [checker.check(c, "double-wrong-unless-exp") for c in batch]
        batched = check_batch(checker, batch, "double-wrong-unless-exp")
    assert solo[-1].kind.value == "compile_error"
    assert _verdicts(batched) == _verdicts(solo)
    assert not any(v.metrics.batch for v in batched)


@pytest.mark.slow
@pytest.mark.e2e
def test_a_batched_campaign_runs_the_same_cases_with_the_same_verdicts(tmp_path):
    from torchsim_diff.campaign.fuzz import run_campaign
    runs = [run_campaign(CampaignOptions(routes=["eager"], out_dir=str(tmp_path / str(b)), max_examples=7, seed=4,
                                         max_nodes=3, batch=b)) for b in (1, 3)]
    assert [r.cases for r in runs] == [7, 7]
    one, batched = ([(r.case_id, r.status, r.bucket) for r in run.records] for run in runs)
    assert sorted(one) == sorted(batched) and len(one) == 7
