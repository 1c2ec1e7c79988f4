"""An op is one entry: its OpSpec in the registry (torchsim_diff/ops). The two other lists
that name what ops write are torch *function* names, not op names, and each is checked against
the registry here, op by op, on the programs drawn for that op:

- the program gate's vocabulary (case/program_check ATTRIBUTES): every program the op's code
  writes passes the gate, or the test names the attribute it lacks;
- the judge's rounding tables (judge/rounding_rules): every torch function the op's code calls,
  as the judge sees them (its TorchFunctionMode on a float64 run, as carried() reruns programs),
  has a rule, and that rule is the one the op declares (`OpSpec.rounding`).

A new op, or an op calling a function a list lacks, fails here instead of being refused at run
time or silently getting no rounding allowance."""
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from torchsim_diff.case import layout
from torchsim_diff.case.program_check import ProgramRejected, load_program
from torchsim_diff.generate.strategies import cases
from torchsim_diff.judge.carried_rounding import _Run
from torchsim_diff.judge.rounding_rules import (ARG_EXTREMES, COMPARISONS, EXACT, FUNCTIONS_BY_RULE, JUMPS,
                                                PASSES_THROUGH, ROUNDING, STEPS, UNMODELLED, rule_of)
from torchsim_diff.ops.rule_names import RULES
from torchsim_diff.ops import OpSpec, all_ops, register

EXAMPLES = 3          # cases per op: attributes change which functions an op's code calls
OPS = all_ops()


def test_the_judges_tables_name_each_rule_and_give_each_function_one():
    assert list(FUNCTIONS_BY_RULE) == list(RULES)
    listed = [name for names in FUNCTIONS_BY_RULE.values() for name in names]
    assert sorted(listed) == sorted(set(listed)), "a function under two rules"
    rounding = {name for rule in ("pointwise", "reduction", "contraction", "normalization")
                for name in FUNCTIONS_BY_RULE[rule]}
    assert rounding == set(ROUNDING) and set(PASSES_THROUGH) <= rounding
    assert set(FUNCTIONS_BY_RULE["decision"]) == {*COMPARISONS, *ARG_EXTREMES, *STEPS}
    assert set(FUNCTIONS_BY_RULE["jump"]) == set(JUMPS)
    assert not (set(EXACT) | set(UNMODELLED)) & set(ROUNDING)       # both allowed nothing
    assert rule_of("add") == "pointwise" and rule_of("transpose") == "exact" and rule_of("no_such_op") is None


def test_an_op_without_a_rule_or_with_an_unknown_one_is_refused():
    spec = OPS["add"]
    with pytest.raises(TypeError, match="rounding"):
        OpSpec("add2", "pointwise", spec.emit, spec.build)
    with pytest.raises(ValueError, match="rounding='approximate' is not one of the judge's rules"):
        register(OpSpec("add2", "pointwise", spec.emit, spec.build, rounding="approximate"))


def _calls(case) -> list:
    """Names (op_name's) of the tensor-returning torch functions the case's program calls, as
    the judge records them on its float64 run."""
    program = load_program(case.program_source())
    floating = layout.dtype_of(case.dtype).is_floating_point
    inputs = layout.materialize_all(case.to_dict(), torch.float64 if floating else None)
    with _Run() as run:
        program(*inputs)
    return [call.name for call in run.calls]


@pytest.mark.parametrize("name", list(OPS))
def test_each_ops_programs_pass_the_gate_and_its_rule_is_the_judges_rule_for_the_functions_it_calls(name):
    spec = OPS[name]
    assert spec.rounding in RULES, f"op {name!r} declares rounding={spec.rounding!r}, not one of {tuple(RULES)}"
    seen = set()

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(ops=[name], min_nodes=1, max_nodes=1, dtype="int64" if spec.dtypes == "int" else "float32"))
    def record(case):
        seen.update(_calls(case))

    try:
        record()        # a case's program is checked by the gate as it is written (case.graph)
    except ProgramRejected as exc:
        pytest.fail(f"op {name!r} writes a program the gate refuses ({exc}): add the name to the program "
                    f"vocabulary (case/program_check ATTRIBUTES)")
    unclassified = sorted(f for f in seen if rule_of(f) is None)
    assert not unclassified, (f"op {name!r} calls {unclassified}, which no table of the judge lists: give each a "
                              f"rule in the judge's rounding_rules module (EXACT where it rounds nothing)")
    found = {rule_of(f) for f in seen} - {"exact"} or {"exact"}
    assert found == {spec.rounding}, (f"op {name!r} declares rounding={spec.rounding!r}, but the judge's tables give "
                                      f"the functions it calls {sorted((f, rule_of(f)) for f in seen)}")
