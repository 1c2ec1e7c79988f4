"""The edge census reads an op's own operands in eager (generate/edge_reach.py): a Python number
in its place in the call, the written view of an in-place op, the values that reach the op; and
every declared edge can be checked on what the generator draws for its op."""
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from torchsim_diff.case.graph import Case
from torchsim_diff.case.values import encode
from torchsim_diff.generate.edge_reach import cells_met, declared_edges, operands_of
from torchsim_diff.generate.strategies import cases
from torchsim_diff.ops import all_ops

OPS = all_ops()


def test_operands_are_the_ops_own_a_number_in_its_place_and_the_written_view():
    cond, x = torch.tensor([True]), torch.ones(2, 3)
    where = {"op": "where", "args": ["c", "x"], "attrs": {"scalar": 2.0, "scalar_side": "left"}}
    assert operands_of(where, {"c": cond, "x": x})[1] == 2.0
    pow_ = {"op": "pow", "args": ["x"], "attrs": {"scalar": 0.5, "scalar_side": "right"}}
    assert operands_of(pow_, {"x": x})[1:] == [0.5]
    add_ = {"op": "add_", "args": ["t", "x"], "attrs": {"view": {"kind": "transpose", "dim0": 0, "dim1": 1}}}
    assert operands_of(add_, {"t": x, "x": x})[0].stride() == (1, 3)


def _reciprocal_of(values) -> Case:
    """A one-node reciprocal case whose input holds `values`."""
    drawn = []

    @settings(max_examples=1, database=None, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(ops=["reciprocal"], min_nodes=1, max_nodes=1))
    def take(case):
        drawn.append(case.to_dict())
    take()
    data = drawn[0]
    spec = next(s for s in data["inputs"] if s["name"] == data["nodes"][0]["args"][0])
    spec.update(shape=[len(values)], data=encode(torch.tensor(values, dtype=torch.float32)),
                layout={"classes": ["contiguous"], "strides": [1], "offset": 0, "storage_size": len(values)})
    return Case.from_dict(data)


def test_the_census_reads_the_values_that_reach_the_op():
    assert ("reciprocal", "x0=+0") in cells_met(_reciprocal_of([0.0, 1.0]))
    assert ("reciprocal", "x0=-0") not in cells_met(_reciprocal_of([0.0, 1.0]))
    assert not {cell for cell in cells_met(_reciprocal_of([0.5, 1.0])) if cell[0] == "reciprocal"}


@pytest.mark.parametrize("name", list(OPS))
def test_every_declared_edge_can_be_checked_on_the_ops_real_operands(name):
    """Each edge's check runs on what the generator draws for the op (a check that raises on an
    operand it meets is a tool bug, found here rather than in the census)."""
    spec = OPS[name]
    seen = []

    @settings(max_examples=2, deadline=None, database=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=cases(ops=[name], min_nodes=1, max_nodes=1, dtype="int64" if spec.dtypes == "int" else "float32"))
    def check(case):
        seen.append(cells_met(case))
    check()
    labels = {edge.label for edge in declared_edges(spec)}
    assert all(op == name and label in labels for cells in seen for op, label in cells)
