"""Campaigns on a real Ray cluster: a head and a second node, both started here on loopback.

The Ray run must give the single-process run's verdicts case for case, and a node killed
mid-run must lose nothing: its unfinished shard is rerun on the head and the summary says so.
"""
import dataclasses
import os

import pytest

from torchsim_diff.campaign import CampaignOptions
from torchsim_diff.ray_campaign import Driver, plan_shards, run_ray_campaign, run_shards_here, shard_seed

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'torchsim-diff[ray]'")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow
CASES, SHARDS = 200, 8
STABLE = ("case_id", "graph_hash", "route", "status", "kind", "bucket", "max_abs_err", "max_ulp")
NODE_ARGS = {"num_cpus": 1, "object_store_memory": 80 << 20}


def _verdicts(records):
    return sorted(tuple(r[k] for k in STABLE) for r in records)


@pytest.fixture(scope="module")
def cluster():
    # a loaded 2-core machine takes longer than Ray's default to register a node
    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    head = cluster_utils.Cluster(initialize_head=True, head_node_args=dict(NODE_ARGS, include_dashboard=False))
    second = head.add_node(**NODE_ARGS)
    head.wait_for_nodes()
    yield head, second
    ray.shutdown()
    head.shutdown()


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    return CampaignOptions(routes=["eager"], out_dir=str(tmp_path_factory.mktemp("here")), max_examples=CASES,
                           seed=5)


@pytest.fixture(scope="module")
def single_process(options):
    result = run_shards_here(options, SHARDS)
    assert result.cases == CASES
    return result


def test_shards_are_fixed_by_seed_and_count():
    plan = plan_shards(5, CASES, SHARDS)
    assert [s.budget for s in plan] == [25] * SHARDS
    assert plan == plan_shards(5, CASES, SHARDS) and plan != plan_shards(6, CASES, SHARDS)
    assert len({shard_seed(5, i) for i in range(SHARDS)}) == SHARDS


def test_two_nodes_give_the_single_process_verdicts(cluster, options, single_process, tmp_path):
    result = run_ray_campaign(dataclasses.replace(options, out_dir=str(tmp_path)), cluster[0].address, SHARDS)
    assert result.cases == CASES and not result.notes
    assert _verdicts(result.records) == _verdicts(single_process.records)
    assert len({r["node"] for r in result.records}) == 2


def test_a_node_killed_mid_run_loses_nothing(cluster, options, single_process, tmp_path, monkeypatch):
    head, second = cluster
    accept = Driver.accept
    from_second = []

    def accept_then_kill(driver, records, node):
        accept(driver, records, node)
        # killed mid-shard, once it has sent a few cases: however late its actor started
        if node.endswith(second.node_id[:6]):
            from_second.append(node)
            if len(from_second) == 3:
                head.remove_node(second, allow_graceful=False)

    monkeypatch.setattr(Driver, "accept", accept_then_kill)
    result = run_ray_campaign(dataclasses.replace(options, out_dir=str(tmp_path)), head.address, SHARDS)
    assert len(from_second) >= 3, "the second node ran no case before the end"
    assert any("rerun on another node" in note for note in result.notes)
    assert result.cases == CASES
    assert _verdicts(result.records) == _verdicts(single_process.records)


def test_budget_stops_the_cluster_and_says_so(cluster, options, tmp_path):
    short = dataclasses.replace(options, out_dir=str(tmp_path), budget_s=3.0)
    result = run_ray_campaign(short, cluster[0].address, SHARDS)
    assert 0 < result.cases < CASES
    assert any("--budget" in note for note in result.notes)


def test_an_actor_that_is_never_placed_does_not_stall_the_campaign(cluster, options, tmp_path, monkeypatch):
    # Right after a node dies the cluster's CPU count may still include it, so actors are asked
    # for that can never be placed: the campaign runs on those that start.
    placeable = int(sum(n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]))
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": float(placeable + 2)})
    small = dataclasses.replace(options, out_dir=str(tmp_path), max_examples=24)
    result = run_ray_campaign(small, cluster[0].address, SHARDS)
    assert result.cases == 24 and not result.notes
