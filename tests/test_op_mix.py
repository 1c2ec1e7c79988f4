"""The mix table's balance figures: Gini of nodes per op, min/median/max, tail shares."""
import pytest

from torchsim_diff.report.tables import gini, mix_rows
from torchsim_diff.results.record import Record


@pytest.mark.parametrize("counts,expected", [([5, 5, 5, 5], 0.0), ([0, 0, 0, 12], 0.75), ([], 0.0), ([1, 3], 0.25)])
def test_gini(counts, expected):
    assert gini(counts) == pytest.approx(expected)


def _record(case_id, ops, tails=()):
    nodes = [{"id": f"v{i}", "op": op, "args": [], "attrs": {}} for i, op in enumerate(ops)]
    case = {"dtype": "int64", "nodes": nodes, "values": {"seed": 1, "tails": list(tails)}}
    return Record(case_id=case_id, ops=sorted(set(ops)), layouts=["contiguous"], case=case)


def test_mix_row_counts_nodes_per_op_and_tail_shares():
    from torchsim_diff.ops import ops_in
    names = [op.name for op in ops_in(None, None, "int64")]
    records = [_record("a", names + [names[0]], ["ties"]), _record("b", names, ["odd_sizes"]),
               _record("b", names, ["odd_sizes"]), _record("c", names[:1])]
    row = mix_rows(records)[0]
    assert row["op nodes min/median/max"] == "2/2/4"
    assert row["value tail %"] == pytest.approx(33.3) and row["odd sizes %"] == pytest.approx(33.3)
    assert 0 < row["op Gini"] < 0.1


def test_mix_row_shows_the_dynamic_share_of_compiled_records():
    records = [_record(c, ["add"]).with_fields(dynamic=d, second_size=s) for c, d, s in
               [("a", True, {"shapes": {"x0": [4]}}), ("b", True, {"shapes": None}), ("c", False, None),
                ("d", None, None)]]
    row = mix_rows(records)[0]
    assert row["dynamic %"] == pytest.approx(66.7) and row["second size % of dynamic"] == 50.0
    assert "dynamic %" not in mix_rows([_record("e", ["add"])])[0]


def test_every_family_is_registered_even_when_one_family_module_is_imported_first():
    """Importing ops.pointwise first (for its OPERAND_FORMS) once left all_ops() with pointwise alone."""
    import subprocess
    import sys
    code = ("import torchsim_diff.ops.pointwise\nfrom torchsim_diff.ops import FAMILIES, all_ops\n"
            "print(sorted({s.family for s in all_ops().values()}) == sorted(FAMILIES))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stderr
