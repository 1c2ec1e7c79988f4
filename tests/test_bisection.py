"""CompilerBisector's ablation for torch.compile drafts (report.bisection); the real bisection
of a ledger cause runs in tests/test_cause_ledger.py (e2e: tens of compiles)."""
import ast

from torchsim_diff.report.bisection import Bisection, applies, bisect, bisect_script
from torchsim_diff.results.record import Record


def test_a_result_reads_as_maintainers_quote_it():
    found = Bisection(backend="inductor", subsystem="lowerings", bisect_number=4, debug_info="argmax")
    assert found.text() == "CompilerBisector: backend `inductor`, subsystem `lowerings`, application 4 (argmax)"
    assert Bisection(backend="aot_eager").text() == "CompilerBisector: backend `aot_eager`"
    assert "every backend and subsystem passes" in Bisection().text()
    assert Bisection(not_run="why").text() == "CompilerBisector: not run (why)"


def test_only_cpu_value_and_compile_failures_are_bisected(add_case):
    record = Record(route="inductor", kind="wrong_values", case=add_case.to_dict())
    assert applies(record) == ""
    assert "needs more than torch" in applies(Record(route="triton", kind="wrong_values"))
    assert "is not bisected" in applies(Record(route="inductor", kind="timeout"))
    # what does not apply is said, never run
    assert bisect(Record(route="mlir", kind="wrong_values"), add_case).not_run


def test_the_script_holds_the_program_inputs_settings_and_tolerances(add_case):
    record = Record(route="inductor", kind="wrong_values", case=add_case.to_dict())
    script = bisect_script(record, add_case)
    tree = ast.parse(script)
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {"program", "inputs", "passes"} <= defined
    assert "TOLERANCES = [dict(rtol=" in script and "CompilerBisector.do_bisect(passes)" in script
