"""Failure kinds carry their facts: one table on the enum, asked by every module.

The table below is written out again, on purpose, rather than read from kinds.py: a change to
a kind's meaning must change both, so that it is a decision and not an accident.
"""
import ast
import enum
import os
import pickle
import sys

import pytest

from torchsim_diff.results import kinds
from torchsim_diff.results.kinds import FACTS, Kind, Status
from torchsim_diff.results.record import Record
from torchsim_diff.judge.comparison import Where

Y, N = True, False
#                                    is_bug fails_run reducible value_failure no_values localised
#                                    tolerance_figures lost_worker reduces_as
EXPECTED = {
    "compile_error":      dict(zip(FACTS, (Y, Y, Y, N, Y, N, N, N, "compile_error"))),
    "runtime_error":      dict(zip(FACTS, (Y, Y, Y, N, Y, N, N, N, "runtime_error"))),
    "crash":              dict(zip(FACTS, (Y, Y, Y, N, Y, N, N, Y, "crash"))),
    "timeout":            dict(zip(FACTS, (Y, Y, Y, N, Y, N, N, Y, "timeout"))),
    "wrong_values":       dict(zip(FACTS, (Y, Y, Y, Y, N, Y, Y, N, "wrong_values"))),
    "nonfinite_mismatch": dict(zip(FACTS, (Y, Y, Y, Y, N, Y, N, N, "wrong_values"))),
    "guard_violation":    dict(zip(FACTS, (Y, Y, Y, Y, N, Y, N, N, "guard_violation"))),
    "shape_mismatch":     dict(zip(FACTS, (Y, Y, Y, Y, N, N, N, N, "shape_mismatch"))),
    "dtype_mismatch":     dict(zip(FACTS, (Y, Y, Y, Y, N, N, N, N, "dtype_mismatch"))),
    "nondeterministic":   dict(zip(FACTS, (Y, Y, Y, Y, N, N, N, N, "nondeterministic"))),
    "unsupported":        dict(zip(FACTS, (N, N, N, N, N, N, N, N, "unsupported"))),
    "invalid_case":       dict(zip(FACTS, (N, Y, N, N, N, N, N, N, "invalid_case"))),
    "tool_error":         dict(zip(FACTS, (N, Y, N, N, N, N, N, N, "tool_error"))),
}


def test_the_facts_are_these_columns():
    assert FACTS == ("is_bug", "fails_run", "reducible", "value_failure", "no_values", "localised",
                     "tolerance_figures", "lost_worker", "reduces_as")


def test_every_kind_is_in_the_table_and_nothing_else():
    assert [k.value for k in Kind] == list(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("fact", FACTS)
def test_each_kind_states_each_fact(name, fact):
    got = getattr(Kind(name), fact)
    want = EXPECTED[name][fact]
    if fact == "reduces_as":
        assert got is Kind(want)
    else:
        assert got is want, f"{name}.{fact} is {got}, the table says {want}"


@pytest.mark.parametrize("fact", [f for f in FACTS if f != "reduces_as"])
def test_values_where_names_the_kinds_a_fact_holds_for(fact):
    assert Kind.values_where(fact) == {name for name, facts in EXPECTED.items() if facts[fact]}


def test_values_where_refuses_a_fact_that_is_not_a_column():
    with pytest.raises(ValueError, match="not one of the kind facts"):
        Kind.values_where("is_fun")


def test_the_facts_hang_together():
    for kind in Kind:
        assert not (kind.value_failure and kind.no_values), kind      # values wrong, or none at all
        assert kind.value_failure or kind.no_values or not kind.is_bug, kind   # every bug is one or the other
        assert not kind.reducible or kind.fails_run, kind              # only findings are reduced
        assert not kind.localised or kind.value_failure, kind
        assert not kind.tolerance_figures or kind.value_failure, kind
        assert kind.reduces_as.value_failure == kind.value_failure, kind


def test_a_row_must_have_every_column():
    """A table built with Kind's own member constructor refuses a row cut short."""
    def table(row):
        class Table(str, enum.Enum):
            __new__ = Kind._new_member_
            CRASH = row
        return Table
    whole = ("crash",) + (1,) * (len(FACTS) - 1) + ("crash",)
    assert table(whole).CRASH == "crash"
    with pytest.raises(TypeError, match="facts in its row"):
        table(("crash", 1, 1))


def test_kinds_are_the_same_words_as_before():
    """Members are their record text: equal to it, built from it, pickled by it."""
    assert Kind.WRONG_VALUES == "wrong_values" and Kind("crash") is Kind.CRASH
    assert Kind.TIMEOUT.value == "timeout" and Kind.TIMEOUT.title() == "Timeout"
    assert pickle.loads(pickle.dumps(Kind.NONFINITE_MISMATCH)) is Kind.NONFINITE_MISMATCH
    assert [s.value for s in Status] == ["pass", "fail", "unsupported", "skipped"]


def test_kinds_imports_only_the_standard_library():
    """Route workers run under other interpreters and import it without the package's dependencies."""
    tree = ast.parse(open(kinds.__file__, encoding="utf-8").read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add("." if node.level else node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


# -- the modules ask the enum -------------------------------------------------------------
# Wording, not meaning: an issue title quotes the message of a compile or runtime error.
WORDING = {"report/issue_title.py": "def _symptom("}


def test_no_module_keeps_its_own_set_of_kinds():
    """A tuple or set of two or more Kind members (or their names) outside kinds.py is a fact
    kept in a second place: ask the enum instead."""
    import torchsim_diff
    root = os.path.dirname(torchsim_diff.__file__)
    names = {k.value for k in Kind}
    found = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == kinds.__file__:
                continue
            text = open(path, encoding="utf-8").read()
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            for node in ast.walk(ast.parse(text)):
                if not isinstance(node, (ast.Tuple, ast.Set, ast.List)):
                    continue
                members = [e for e in node.elts if
                           (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "Kind")
                           or (isinstance(e, ast.Attribute) and isinstance(e.value, ast.Attribute)
                               and e.value.attr in names | {k.name for k in Kind} and isinstance(e.value.value, ast.Name)
                               and e.value.value.id == "Kind")
                           or (isinstance(e, ast.Constant) and e.value in names)]
                if len(members) >= 2 and not _in_wording(text, rel, node.lineno):
                    found.append(f"{rel}:{node.lineno}")
    assert not found, f"sets of kinds kept outside kinds.py: {found}"


def _in_wording(text: str, rel: str, lineno: int) -> bool:
    """Whether line `lineno` lies in the function WORDING allows for `rel`."""
    if rel not in WORDING:
        return False
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(WORDING[rel]))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("def ", "class "))), len(lines))
    return start < lineno <= end


def test_signatures_follow_value_failure_and_reduces_as():
    from torchsim_diff.buckets.signatures import record_signature, signature
    for kind in Kind:
        text = signature("r", kind, "boom 12", op="add", where=Where.output(0))
        assert (text == f"r|{kind.value}|add|output") is kind.value_failure, text
        record = Record(route="r", kind=kind.value, op="add", message="boom")
        assert record_signature(record).endswith("|add|any") is kind.value_failure


def test_reduction_key_keeps_the_kind_the_reducer_keeps():
    from torchsim_diff.run.checker import Verdict
    from torchsim_diff.buckets.signatures import reduction_key
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3], [1], 0, 3, {})], outputs=["v0"])
    for kind in Kind:
        key = reduction_key(Verdict(case, "r", Status.FAIL, kind, "compare", "boom", "exp", Where.output(0)))
        if kind.value_failure:
            assert key == f"r|{kind.reduces_as.value}|output"
        else:
            assert key == Verdict(case, "r", Status.FAIL, kind, "compare", "boom", "exp", Where.output(0)).signature


def test_a_failing_reply_is_recorded_as_its_kind_says():
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.worker.protocol import Outcome
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3], [1], 0, 3, {})], outputs=["v0"])
    for kind in Kind:
        verdict = Checker._judged(case, "r", None, Outcome.failed(kind, "run", "boom"))
        assert verdict.kind is kind
        assert verdict.status is (Status.FAIL if EXPECTED[kind.value]["fails_run"] else Status.UNSUPPORTED)
        assert (verdict.bucket is not None) is EXPECTED[kind.value]["fails_run"]


def test_bundles_name_every_output_only_when_there_are_no_values():
    from torchsim_diff.report.issue_title import failing_outputs
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}},
                            {"id": "v1", "op": "sin", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3], [1], 0, 3, {})], outputs=["v0", "v1"])
    for kind in Kind:
        outputs = failing_outputs(Record(kind=kind.value, message="boom"), case)
        assert outputs == (["v0", "v1"] if EXPECTED[kind.value]["no_values"] else ["v0"]), kind


def test_the_tolerance_table_takes_passes_and_the_kinds_that_say_so():
    from torchsim_diff.report.tables import tolerance_rows
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "exp", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [3], [1], 0, 3, {})], outputs=["v0"])
    figures = {"max_abs_err": 1e-6, "max_rel_err": 1e-6, "max_ulp": 1, "err_ratio": 1.0,
               "atol_needed": 1e-6, "rtol_needed": 1e-6}
    for kind in [None, *Kind]:
        record = Record(route="r", status="pass" if kind is None else "fail", kind=kind and kind.value,
                        ops=["exp"], case=case.to_dict(), **figures)
        counted = kind is None or EXPECTED[kind.value]["tolerance_figures"]
        assert bool(tolerance_rows([record])) is counted, kind
