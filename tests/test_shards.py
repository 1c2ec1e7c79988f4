"""Shards as a Ray actor runs them, here in one process (no Ray needed): failures are
reduced beside the route worker before their record leaves, and --budget stops the shards."""
from torchsim_diff.campaign import CampaignOptions
from torchsim_diff.ray_campaign import run_shards_here


def test_failures_are_reduced_before_their_records_leave_the_shard(tmp_path, double_routes):
    opts = CampaignOptions(routes=["double-wrong-element"], out_dir=str(tmp_path), max_examples=3, seed=1,
                           max_nodes=3, reduce_budget_s=20)
    result = run_shards_here(opts, shards=1)
    failing = [r for r in result.records if r["status"] == "fail"]
    assert failing, "the planted bug was not met"
    assert all("raw_bucket" in r for r in failing), "a failure left its shard unreduced"
    assert len({r["bucket"] for r in failing}) == 1, "one planted bug gave several buckets after reduction"


def test_budget_stops_drawing_and_says_so(tmp_path):
    opts = CampaignOptions(routes=["eager"], out_dir=str(tmp_path), max_examples=400, seed=2, max_nodes=2,
                           budget_s=2.0)
    result = run_shards_here(opts, shards=40)
    assert 0 < result.cases < 400
    assert any("--budget" in note for note in result.notes)
