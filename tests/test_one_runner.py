"""The three front ends (fuzz, the pytest plugin, Ray's shards) run cases through one runner:
the same seeded cases give the same records, apart from timing fields."""
import json
import os

import pytest

from torchsim_diff.campaign import fuzz, ray_cluster
from torchsim_diff.campaign.fuzz import CampaignOptions
from torchsim_diff.generate.draws import first_cases
from torchsim_diff.generate.strategies import cases
from torchsim_diff.results.jsonl import find_results, read_records
from torchsim_diff.triage.session_refinements import apply_refinements

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
pytest_plugins = ["pytester"]

ROUTES = ["eager", "double-wrong-element"]
# Fields that measure time, or that depend on it (per-op figures are measured within a share
# of the route's time), or that name where this run put its files.
TIMING = {"t_compile", "t_run", "t_case", "t_harness", "t_start", "t_diagnose", "cost", "reduce_s", "op_errors",
          "op_local_errors", "artifacts", "reduced_artifacts", "node"}
PLUGIN_SUITE = """
import json
from torchsim_diff.case.graph import Case

def test_cases(torchsim_session):
    for data in json.load(open("cases.json")):
        for route in {routes!r}:
            try:
                torchsim_session.check(Case.from_dict(data), route)
            except Exception:
                pass            # a finding is raised; its record is written
"""


@pytest.fixture(scope="module")
def seeded_cases():
    return first_cases(cases(dtype="float32", max_nodes=3), seed_value=27, count=4)


def _comparable(records: list) -> list:
    return [{k: v for k, v in r.to_dict().items() if k not in TIMING} for r in records]


def _options(out_dir) -> CampaignOptions:
    return CampaignOptions(routes=ROUTES, out_dir=str(out_dir), max_examples=4, known_bugs=None)


def _through_fuzz(seeded, tmp_path, monkeypatch) -> list:
    def drawn(strategy, *, seed_value, count, visit):
        for case in seeded[:count]:
            visit(case)
    monkeypatch.setattr(fuzz, "for_each_case", drawn)
    return fuzz.run_campaign(_options(tmp_path / "fuzz")).records


def _through_ray_shards(seeded, tmp_path, monkeypatch) -> list:
    monkeypatch.setattr(ray_cluster, "draw_cases", lambda opts, seed_value, count: seeded[:count])
    return ray_cluster.run_shards_here(_options(tmp_path / "ray"), shards=1).records


def _through_pytest_plugin(seeded, pytester, monkeypatch) -> list:
    monkeypatch.chdir(pytester.path)
    pytester.makepyfile(test_suite=PLUGIN_SUITE.format(routes=ROUTES))
    (pytester.path / "cases.json").write_text(json.dumps([case.to_dict() for case in seeded]))
    (pytester.path / "known").mkdir()
    report_dir = pytester.path / "report"
    result = pytester.runpytest_subprocess("-p", "no:xdist", "--routes", ",".join(ROUTES), "--report-dir",
                                           str(report_dir), "--known-bugs", str(pytester.path / "known"))
    assert result.ret == 0, result.stdout.str()
    records = [r for path in find_results([str(report_dir)]) for r in read_records(path)]
    return [r.known_by_minimal_case(set()) for r in apply_refinements(records, str(report_dir))]


def test_fuzz_pytest_and_ray_give_the_same_records(seeded_cases, tmp_path, pytester, double_routes, monkeypatch):
    from_fuzz = _through_fuzz(seeded_cases, tmp_path, monkeypatch)
    from_ray = _through_ray_shards(seeded_cases, tmp_path, monkeypatch)
    from_pytest = _through_pytest_plugin(seeded_cases, pytester, monkeypatch)
    assert len(from_fuzz) == len(seeded_cases) * len(ROUTES)
    assert any(r.failed for r in from_fuzz) and any(r.reduced_case for r in from_fuzz)
    assert _differences(from_ray, from_fuzz) == []
    assert _differences(from_pytest, from_fuzz) == []


def _differences(records: list, expected: list) -> list:
    """(record index, field, got, expected) for every field that differs, timing aside."""
    assert len(records) == len(expected)
    found = []
    for i, (got, want) in enumerate(zip(_comparable(records), _comparable(expected))):
        found += [(i, key, got.get(key), want.get(key)) for key in sorted(set(got) | set(want))
                  if got.get(key) != want.get(key)]
    return found


def test_the_front_ends_hold_no_route_run_of_their_own():
    """Running a case is the runner's: no front end calls the checker or the reducer itself."""
    here = os.path.dirname(fuzz.__file__)
    for name in ("fuzz.py", "pytest_plugin.py", "pytest_worker.py", "pytest_controller.py", "ray_cluster.py"):
        text = open(os.path.join(here, name)).read()
        assert "checker.check(" not in text and ".refine(" not in text and "for_verdict(" not in text, name


def test_distinct_findings_of_one_item_are_each_told_short_and_anything_else_is_left_whole():
    """Hypothesis raises an exception group when one item meets distinct failures (a NaN mismatch
    and wrong values of one planted bug, say); each finding in it is told in its few lines, as a
    lone finding is. A group holding anything but findings is no campaign finding."""
    from torchsim_diff.buckets.signatures import finding_type
    from torchsim_diff.campaign.pytest_worker import _findings
    nan, wrong = finding_type("nonfinite_mismatch", "8aee4e4867")("a"), finding_type("wrong_values", "8aee4e4867")("b")
    assert _findings(nan) == [nan]
    assert _findings(ExceptionGroup("2 distinct failures", [nan, ExceptionGroup("nested", [wrong])])) == [nan, wrong]
    assert _findings(ExceptionGroup("mixed", [nan, ValueError("harness")])) == []
    assert _findings(ValueError("harness")) == []
