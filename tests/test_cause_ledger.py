"""The known-bug ledger by root cause: corpora/known/<cause>/cause.json and its cases; the
`causes` listing, its checks on what a cause says, and a cause's export."""
import json
import os

import pytest

from tests.conftest import REPO
from torchsim_diff.cli import main
from torchsim_diff.report.issue_text import markdown_text
from torchsim_diff.buckets import causes as ledger
from torchsim_diff.report.cause_analysis import analysis
from torchsim_diff.buckets.corpus import iter_entries

KNOWN = os.path.join(REPO, "corpora", "known")
CAUSE = {"title": "Inductor C++: relu over a permuted view reads memory order", "project": "pytorch",
         "component": "Inductor C++ codegen", "status": "new", "upstream": "", "summary": "A planted summary."}


def _entry(case, route: str, bucket: str = "0123456789") -> dict:
    return {"route": route, "kind": "wrong_values", "bucket": bucket, "signature": f"{route}|wrong_values|relu|output",
            "cause": f"{route}|wrong_values|relu|strided", "note": "an internal note", "case": case.to_dict()}


def _ledger(tmp_path, add_case, cause=None, entries=None) -> str:
    folder = tmp_path / "known" / "relu-memory-order"
    folder.mkdir(parents=True)
    (folder / ledger.CAUSE_FILE).write_text(json.dumps(cause or CAUSE))
    for name, route in (entries or {"on-spike": "triton-spike", "on-inductor": "inductor"}).items():
        (folder / f"{name}.json").write_text(json.dumps(_entry(add_case, route)))
    return str(tmp_path / "known")


def test_a_cause_reads_with_its_cases_and_shows_its_plainest_one(tmp_path, add_case):
    causes, problems = ledger.read_causes(_ledger(tmp_path, add_case))
    assert problems == [] and len(causes) == 1
    cause = causes[0]
    assert (cause.name, cause.project, cause.status, cause.routes) == \
        ("relu-memory-order", "pytorch", "new", ["inductor", "triton-spike"])
    assert cause.representative().name == "on-inductor"       # torch alone beats the adapter chain
    text = analysis(cause, cause.representative())
    assert text.startswith("A planted summary.") and "(torch.compile (Inductor Triton kernels through triton-adapter-opt))" in text and "internal note" not in text


@pytest.mark.parametrize("change,fragment", [
    ({"status": "maybe"}, "status='maybe' is not one of new, reported, fixed"),
    ({"title": ""}, "needs a title"),
    ({"project": "numpy"}, "project='numpy' is not one of"),
    ({"status": "reported"}, "a reported cause names its upstream URL"),
    ({"upstream": "http://example.com/1"}, "https:// URL"),
    ({"summary": 7}, "summary must be text"),
])
def test_a_cause_that_says_something_wrong_is_one_line_and_the_others_still_read(tmp_path, add_case, change, fragment):
    known = _ledger(tmp_path, add_case, cause={**CAUSE, **change})
    good = os.path.join(known, "another")
    os.makedirs(good)
    with open(os.path.join(good, ledger.CAUSE_FILE), "w") as handle:
        json.dump(CAUSE, handle)
    causes, problems = ledger.read_causes(known)
    assert [c.name for c in causes] == ["another"]
    assert len(problems) == 1 and problems[0].startswith(os.path.join(known, "relu-memory-order")) and fragment in problems[0]


def test_an_entry_outside_a_cause_folder_is_a_problem(tmp_path, add_case):
    known = _ledger(tmp_path, add_case)
    with open(os.path.join(known, "loose.json"), "w") as handle:
        json.dump(_entry(add_case, "inductor"), handle)
    _causes, problems = ledger.read_causes(known)
    assert problems == [f"{os.path.join(known, 'loose.json')}: not in a cause folder "
                        f"(corpora/known/<cause>/{ledger.CAUSE_FILE})"]


def test_causes_lists_each_with_its_counts_and_a_problem_exits_1(tmp_path, add_case, capsys):
    known = _ledger(tmp_path, add_case)
    assert main(["causes", "--known-bugs", known, "--format", "json"]) == 0
    out = capsys.readouterr().out
    rows = json.loads(out.split("\n\n")[0])
    assert rows == [{"cause": "relu-memory-order", "project": "pytorch", "status": "new", "cases": 2,
                     "routes": "inductor,triton-spike", "upstream": "-", "title": CAUSE["title"]}]
    assert json.loads(out.split("\n\n")[1]) == [{"project": "pytorch", "causes": 1, "cases": 2, "new": 1,
                                                "reported": 0, "fixed": 0}]
    (tmp_path / "known" / "loose.json").write_text("{}")
    assert main(["causes", "--known-bugs", known]) == 1
    assert "loose.json: not in a cause folder" in capsys.readouterr().err


def _with_defect(known: str) -> dict:
    from torchsim_diff.buckets.known_defects import DEFECT_FILE
    defect = {"title": "TOGSim: a planted defect whose title is long" + " and longer" * 12, "project": "TOGSim",
              "status": "no upstream issue found", "upstream": "", "bucket": "togsim | units_busy | ok | planted"}
    os.makedirs(os.path.join(known, "togsim-planted"))
    with open(os.path.join(known, "togsim-planted", DEFECT_FILE), "w") as handle:
        json.dump(defect, handle)
    return defect


def test_causes_lists_togsim_defects_as_causes_of_their_own(tmp_path, add_case, capsys):
    known = _ledger(tmp_path, add_case)
    defect = _with_defect(known)
    assert main(["causes", "--known-bugs", known, "--format", "json"]) == 0
    rows, totals = (json.loads(part) for part in capsys.readouterr().out.split("\n\n")[:2])
    assert {"cause": "togsim-planted", "project": "TOGSim", "status": "no upstream issue found", "cases": 1,
            "routes": "togsim", "upstream": "-", "title": defect["title"]} in rows and len(rows) == 2
    assert {"project": "TOGSim", "causes": 1, "cases": 1, "new": 1, "reported": 0, "fixed": 0} in totals


@pytest.mark.parametrize("columns", [120, 400])
def test_plain_titles_are_as_wide_as_the_terminal(tmp_path, add_case, capsys, monkeypatch, columns):
    known = _ledger(tmp_path, add_case)
    title = _with_defect(known)["title"]
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["causes", "--known-bugs", known]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("togsim-planted"))
    if columns == 400:
        assert line.endswith(title)
    else:
        assert line.endswith("…") and len(line) <= max(columns, line.index("TOGSim: ") + 40)


def test_the_repository_ledger_lists_every_cause_and_defect(capsys):
    from torchsim_diff.buckets.known_defects import is_defect_folder
    folders = [n for n in os.listdir(KNOWN) if ledger.is_cause_folder(os.path.join(KNOWN, n))
               or is_defect_folder(os.path.join(KNOWN, n))]
    assert main(["causes", "--known-bugs", KNOWN, "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out.split("\n\n")[0])
    assert sorted(row["cause"] for row in rows) == sorted(folders)


def test_the_ledger_in_the_repository_is_whole():
    """Every known entry sits in a cause folder that reads clean; reported and fixed causes
    name their upstream; a cause's cases all fail on routes of its project's compilers."""
    causes, problems = ledger.read_causes(KNOWN)
    assert problems == []
    entries = [e for e, err in iter_entries([KNOWN])]
    assert sum(len(c.entries) for c in causes) == len(entries) > 0
    for cause in causes:
        assert cause.entries, cause.name
        assert cause.status == "new" or cause.upstream.startswith("https://"), cause.name


@pytest.mark.e2e
@pytest.mark.slow
def test_a_cause_exports_as_its_plainest_case_with_its_title_and_summary(tmp_path, capsys):
    causes, _ = ledger.read_causes(KNOWN)
    # a compiler's bug: eager's own (eager_bug) is shown eager against eager, with no ablation
    cause = next(c for c in causes if c.representative().route == "inductor" and c.status == "reported"
                 and not c.eager_bug)
    assert main(["export", cause.folder, "--to", str(tmp_path / "b")]) == 0
    issue = (tmp_path / "b" / "ISSUE.md").read_text()
    # outside a code fence, a '<' of the title is written as its entity ("Vectorized<float>" is no tag)
    assert issue.splitlines()[1] == f"# {markdown_text(cause.title)}"
    assert markdown_text(cause.summary.split(".")[0]) in issue
    # a reported cause's draft is a comment for its thread, not a new issue
    assert issue.startswith(f"<!-- A comment for {cause.upstream}") and "$ echo $?  # 1" in issue
    # the ablation PyTorch's template asks for, from CompilerBisector run on the bundle's case
    assert "Ablation: CompilerBisector: backend `inductor`, subsystem `" in issue, issue
    script = (tmp_path / "b" / "repro.py").read_text()
    assert script.startswith(f'"""{cause.title}') and len(script.splitlines()) <= 40


def test_resigning_with_simplify_keeps_the_minimal_case_and_its_raw_bucket(tmp_path, add_case, double_routes):
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.buckets.corpus import read_entry
    from torchsim_diff.triage.corpus_replay import replay_entry, resign
    from torchsim_diff.triage.refine import ReduceThenBucket
    with Checker(out_dir=str(tmp_path / "run"), timeout_s=60) as checker:
        verdict = checker.check(add_case, "double-wrong-element")
        path = tmp_path / "entry.json"
        path.write_text(json.dumps({"route": verdict.route, "kind": verdict.kind.value, "bucket": verdict.bucket,
                                    "signature": verdict.signature, "note": "n", "case": add_case.to_dict()}))
        entry = read_entry(str(path))
        refiner = ReduceThenBucket(checker, budget_s=20)
        kept, _ = resign(refiner, entry)
        simplified, what = resign(refiner, entry, simplify=True)
        assert kept["case"] == add_case.to_dict() and kept["cause"] == simplified["cause"], what
        smaller = simplified["case"]
        assert len(smaller["nodes"]) < len(add_case.nodes) and all("data" in spec for spec in smaller["inputs"])
        path.write_text(json.dumps(simplified))
        assert replay_entry(checker, read_entry(str(path)), "double-wrong-element").ok     # still its known bug


def test_a_cause_may_name_the_case_its_report_shows(tmp_path, add_case):
    known = _ledger(tmp_path, add_case, cause={**CAUSE, "shown": "on-spike"})
    (cause,), _ = ledger.read_causes(known)
    assert cause.representative().name == "on-spike"
    (tmp_path / "known" / "relu-memory-order" / ledger.CAUSE_FILE).write_text(json.dumps({**CAUSE, "shown": "gone"}))
    causes, (problem,) = ledger.read_causes(known)
    assert causes == [] and problem.endswith("shown='gone' is none of its cases")
