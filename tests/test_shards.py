"""Shards as a Ray actor runs them, here in one process (no Ray needed): failures are
reduced beside the route worker before their record leaves, and --budget stops the shards."""
import pytest

from torchsim_diff.campaign.fuzz import CampaignOptions
from torchsim_diff.campaign.ray_cluster import run_shards_here


@pytest.mark.e2e
def test_failures_are_reduced_before_their_records_leave_the_shard(tmp_path, double_routes, no_planted_edges):
    opts = CampaignOptions(routes=["double-wrong-element"], out_dir=str(tmp_path), max_examples=3, seed=1,
                           max_nodes=3, reduce_budget_s=20)
    result = run_shards_here(opts, shards=1)
    failing = [r for r in result.records if r.failed]
    assert failing, "the planted bug was not met"
    assert all(r.raw_bucket is not None for r in failing), "a failure left its shard unreduced"
    assert len({r.bucket for r in failing}) == 1, "one planted bug gave several buckets after reduction"


def test_budget_stops_drawing_and_says_so(tmp_path):
    opts = CampaignOptions(routes=["eager"], out_dir=str(tmp_path), max_examples=400, seed=2, max_nodes=2,
                           budget_s=2.0)
    result = run_shards_here(opts, shards=40)
    assert 0 < result.cases < 400
    assert any("--budget" in note for note in result.notes)


def test_progress_shows_cases_per_second_per_node():
    import io

    from torchsim_diff.campaign.ray_cluster import NodeProgress, RayCampaignResult
    stream = io.StringIO()
    progress = NodeProgress(10, stream)
    result = RayCampaignResult(cases=3)
    for node in ("hostA/1a2b3c", "hostA/1a2b3c", "hostB/4d5e6f"):
        progress.count(node)
    progress.update(result, force=True)
    line = stream.getvalue()
    assert line.startswith("[3/10]") and "hostA/1a2b3c " in line and "hostB/4d5e6f " in line
    assert line.count("/s") == 3, line
