"""A route added in one file (tests/doubles/own_project_route.py) gets a whole reproducer bundle,
its ISSUE.md addressed to the route's own upstream project, in that project's template and words:
report/ asks the route (routes.base.ReportFacts) and keys on no route's name."""
import os

import pytest

from tests.doubles import own_project_route
from torchsim_diff.buckets.projects import PROJECTS
from torchsim_diff.report import bundles
from torchsim_diff.routes import EXTRA_ROUTES_ENV
from torchsim_diff.run.checker import Checker

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTE = own_project_route.OwnProjectRoute.name
PROJECT = own_project_route.TOYCC


@pytest.fixture
def own_route(monkeypatch):
    monkeypatch.setenv(EXTRA_ROUTES_ENV, f"{ROUTE}=tests.doubles.own_project_route:OwnProjectRoute")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))


@pytest.fixture
def failing_record(own_route, add_case, tmp_path):
    with Checker(out_dir=str(tmp_path / "run")) as checker:
        verdict = checker.check(add_case, ROUTE)
    assert verdict.failed and verdict.kind.value == "wrong_values", verdict.message
    return verdict.record()


def test_the_routes_project_is_none_of_the_built_in_ones():
    assert PROJECT.name not in PROJECTS          # else the test would not show a route's own upstream


@pytest.mark.e2e
def test_a_route_in_one_file_gets_a_bundle_and_an_issue_for_its_own_project(failing_record, tmp_path):
    bundle = bundles.write_bundle(failing_record, str(tmp_path / "bundle"), run=True)
    issue = open(os.path.join(bundle, "ISSUE.md")).read()
    title = issue.split("\n# ", 1)[1].splitlines()[0] if "\n# " in issue else issue.splitlines()[0]
    assert PROJECT.file_at in issue
    assert all(section in issue for section in PROJECT.sections), issue[:800]
    assert "toycc -O2: relu(" in title, title
    assert "REPRODUCES" in issue                     # repro.py ran, through torchsim-diff's checker
    assert {"repro.py", "case.json", "ISSUE.md"} <= set(os.listdir(bundle))
    status, _out, _err = bundles.run_repro(bundle)
    assert status == 1


@pytest.mark.e2e
def test_a_route_that_names_no_project_of_its_own_is_refused_a_project_it_does_not_know(failing_record, tmp_path):
    record = failing_record.with_fields(project="nowhere")
    with pytest.raises(bundles.BundleError, match="nowhere"):
        bundles.write_bundle(record, str(tmp_path / "bundle"))
