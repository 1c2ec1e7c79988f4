"""Asking a case which bug it is (buckets.which_cause): `replay` reduces each failure and names
the ledger cause whose entries share its cause signature, or says "new"."""
import json
import os

import pytest

from tests.conftest import REPO, make_case
from torchsim_diff.cli import main
from torchsim_diff.buckets.which_cause import NEW, CauseLedger

LEDGER = os.path.join(REPO, "corpora", "known")


def test_every_ledger_entry_is_named_as_its_own_cause():
    """A cause that stops matching its own entries (an entry's signature moved, or a cause
    folder became unreadable) fails here."""
    ledger = CauseLedger.read(LEDGER)
    assert not ledger.problems
    misnamed = []
    for matches in ledger.by_bucket.values():
        for cause, entry in matches:
            signature = next(e.cause for e in cause.entries if e.name == entry)
            if cause.name not in [c.name for c, _ in ledger.match(signature).causes]:
                misnamed.append(f"{cause.name}/{entry}")
    assert ledger.by_bucket and not misnamed


def test_a_signature_two_causes_hold_names_both():
    from types import SimpleNamespace
    from torchsim_diff.buckets.causes import Cause
    signature = "triton|wrong_values|mul|inf"
    first, second = (Cause(folder=f"known/{name}", title=name, project="pytorch",
                           entries=[SimpleNamespace(name=f"{name}-case", cause=signature)]) for name in ("one", "two"))
    identity = CauseLedger([first, second]).match(signature)
    assert identity.text() == "known, one of: one (pytorch, new) or two (pytorch, new) (their entries share this signature)"
    assert identity.fields()["matched entry"] == "one-case, two-case"
    assert CauseLedger([first, second]).match("triton|wrong_values|mul|nan").text() == NEW


def _case_file(tmp_path):
    case = make_case(nodes=[{"id": "v0", "op": "add", "args": ["x0", "x1"], "attrs": {}}],
                     inputs=[("x0", [4], [1], 0, 4, {}), ("x1", [4], [1], 0, 4, {})], outputs=["v0"])
    path = tmp_path / "case.json"
    path.write_text(case.to_json())
    return path


def _ledger_with(folder, signature: str, **cause):
    os.makedirs(folder / "planted-cause")
    (folder / "planted-cause" / "cause.json").write_text(json.dumps(
        {"title": "a planted cause", "project": "pytorch", "status": "reported",
         "upstream": "https://example.org/issue/1", **cause}))
    (folder / "planted-cause" / "entry.json").write_text(json.dumps(
        {"route": "double-wrong-element", "kind": "wrong_values", "bucket": "0000000000",
         "signature": "raw", "cause": signature, "note": "", "upstream": "",
         "case": json.loads((folder.parent / "case.json").read_text())}))
    return folder


def _replayed(capsys, path, ledger) -> dict:
    code = main(["replay", str(path), "--routes", "double-wrong-element", "--known-bugs", str(ledger), "--format", "json"])
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    assert code == 1 and len(rows) == 1
    assert f"[1/1] case on double-wrong-element: {rows[0]['got']}; {rows[0]['cause']}\n" in captured.err
    return rows[0]


def test_replay_says_new_then_names_the_cause_that_holds_its_signature(tmp_path, capsys, double_routes):
    path = _case_file(tmp_path)
    empty = tmp_path / "empty-ledger"
    empty.mkdir()
    first = _replayed(capsys, path, empty)
    assert first["cause"] == NEW
    assert first["cause signature"].startswith("double-wrong-element|wrong_values|")

    ledger = _ledger_with(tmp_path / "ledger", first["cause signature"])
    named = _replayed(capsys, path, ledger)
    assert named["cause"] == "known: planted-cause (pytorch, reported, https://example.org/issue/1)"
    assert named["matched entry"] == "entry" and named["cause signature"] == first["cause signature"]


def test_replay_without_a_ledger_is_one_line(tmp_path, capsys):
    code = main(["replay", str(_case_file(tmp_path)), "--routes", "eager", "--known-bugs", str(tmp_path / "nowhere")])
    err = capsys.readouterr().err
    assert code == 2 and "--known-bugs" in err and "no such folder" in err and err.count("\n") == 1


@pytest.mark.parametrize("fmt", ["plain", "html"])
def test_every_format_carries_the_cause(tmp_path, capsys, double_routes, fmt):
    code = main(["replay", str(_case_file(tmp_path)), "--routes", "double-wrong-element",
                 "--known-bugs", str(tmp_path), "--format", fmt])
    out = capsys.readouterr().out
    assert code == 1 and "cause signature" in out and "double-wrong-element|wrong_values|" in out


def test_reduce_names_the_cause_of_what_it_reduced(tmp_path, capsys, double_routes):
    path = _case_file(tmp_path)
    first = _replayed(capsys, path, tmp_path)
    ledger = _ledger_with(tmp_path / "ledger", first["cause signature"])
    code = main(["reduce", str(path), "--route", "double-wrong-element", "--known-bugs", str(ledger),
                 "--out", str(tmp_path / "out"), "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"cause: known: planted-cause (pytorch, reported, https://example.org/issue/1) " \
           f"(cause signature: {first['cause signature']})" in out


def _cheap_route_entries() -> list:
    """The ledger's entries on the in-process Inductor routes (the others take half an hour to
    reduce on two cores: benchmarks/resign_known.py re-signs them)."""
    from torchsim_diff.buckets.causes import read_causes
    causes, _problems = read_causes(LEDGER)
    return [pytest.param(cause.name, entry, id=f"{cause.name}/{entry.name}")
            for cause in causes for entry in cause.entries if entry.route in ("inductor", "triton") and entry.cause]


@pytest.mark.e2e
@pytest.mark.parametrize("cause_name,entry", _cheap_route_entries())
def test_a_ledger_entry_reduced_afresh_is_named_as_its_own_cause(cause_name, entry, route_checker):
    """A cause that stops matching its own entries is a failure: the entry's case is reduced
    again, its trigger read again, and the lookup must name its own cause."""
    from torchsim_diff.triage.refine import ReduceThenBucket
    verdict = route_checker.check(entry.case, entry.route)
    assert verdict.failed, f"{entry.name} no longer fails on {entry.route}"
    refiner = ReduceThenBucket(route_checker, budget_s=60)
    identity = CauseLedger.read(LEDGER).identify(refiner, verdict)
    assert cause_name in [c.name for c, _ in identity.causes], (identity.text(), identity.signature, entry.cause)
