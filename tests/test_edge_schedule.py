"""Edges reach the op (#50, items 2 and 3): an edge node plants the value, draws the layout or the
shape its cell needs at the op's own operands and records the cell in the case; the schedule over
(op, edge) cells is deterministic for a seed and means every cell within a few cases; every knob is
in one policy, printed and overridable."""
import dataclasses

import pytest
import torch

from torchsim_diff.case import layout, values
from torchsim_diff.case.validate import InvalidCase, validate_case
from torchsim_diff.generate.draws import first_cases
from torchsim_diff.generate.edge_reach import cells_met, declared_edges, meant_cells, meant_reached, operand_slots
from torchsim_diff.generate.policy import ENV, GenPolicy, InvalidPolicy, active_policy
from torchsim_diff.generate.edge_placement import EDGE_SLOT, EdgePlacement
from torchsim_diff.generate.schedules import ArgumentSchedule, CoverageSchedule
from torchsim_diff.generate.strategies import InvalidArgument, cases
from torchsim_diff.ops import all_ops, get_op
from torchsim_diff.ops.edges import FORMS, Form, Value, is_cell, met

ALWAYS = GenPolicy(edge_percent=100)


def _draw(count, seed=3, **kwargs):
    return first_cases(cases(**kwargs), seed_value=seed, count=count)


# -- planting ---------------------------------------------------------------------------------
PLANTS = [(name, dtype) for name in values.PLANTS if name not in ("duplicate", "all true", "all false")
          for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64) if values.plantable(name, dtype)]


@pytest.mark.parametrize("name,dtype", PLANTS, ids=[f"{n}-{d}".replace("torch.", "") for n, d in PLANTS])
def test_a_planted_class_is_met_in_the_inputs_own_dtype(name, dtype):
    spec = {"name": "x0", "shape": [3, 4], "dtype": layout.dtype_name(dtype), "domain": {"kind": "real"},
            "layout": {"classes": ["contiguous"], "strides": [4, 1], "offset": 0, "storage_size": 12}}
    plain = layout.materialize(spec, seed=1, position=0)
    planted = layout.materialize({**spec, "domain": {"kind": "real", "plant": [name]}}, seed=1, position=0)
    assert met(Value(0, name), [planted], {})
    assert not met(Value(0, name), [plain], {}) or name in ("negative", "+0")   # ordinary values hold these


def test_plants_take_elements_of_their_own_and_reach_a_strided_view():
    spec = {"name": "x0", "shape": [4, 3], "dtype": "float32", "domain": {"kind": "positive", "plant": ["nan", "-inf"]},
            "layout": {"classes": ["transposed"], "strides": [1, 4], "offset": 2, "storage_size": 16}}
    x = layout.materialize(spec, seed=1, position=0)
    assert met(Value(0, "nan"), [x], {}) and met(Value(0, "-inf"), [x], {})


@pytest.mark.parametrize("domain", [{"kind": "real", "plant": ["bogus"]}, {"kind": "index", "high": 3, "plant": ["nan"]},
                                    {"kind": "unique_index", "high": 3, "plant": ["duplicate"]}],
                         ids=["unknown class", "nan in an index", "duplicate in a unique index"])
def test_a_plant_an_input_cannot_hold_is_refused(domain):
    data = _draw(1, ops=["neg"], max_nodes=1)[0].to_dict()
    data["inputs"][0]["domain"] = domain
    with pytest.raises(InvalidCase, match="plant"):
        validate_case(data)


# -- meant cells ------------------------------------------------------------------------------
def test_a_meant_cell_is_recorded_in_the_case_and_reaches_the_op():
    drawn = _draw(8, ops=["reciprocal"], max_nodes=1, policy=ALWAYS)
    for case in drawn:
        meant = meant_reached(case)
        planted = case.inputs[0]["domain"].get("plant", [])
        # The first cell always finds an element; a second one in a 0-d input does not, and says so.
        assert meant and meant[0][2], case.to_json()
        assert all(reached == (label.split("=", 1)[1] in planted) for _, label, reached in meant), case.to_json()
    labels = {label for case in drawn for _, label, _ in meant_reached(case)}
    assert len(labels) >= 4            # not one cell over and over: the schedule goes round them


def test_a_planted_value_reaches_its_op_in_graphs_of_several_nodes():
    """An operand from the graph gives way to an input that holds the edge; a value planted in an
    input reaches the op that meant it (no op in between masks it)."""
    drawn = _draw(30, ops=["exp", "log", "add"], max_nodes=4, policy=ALWAYS)
    fed = 0
    for case in drawn:
        inputs = {spec["name"]: spec for spec in case.inputs}
        for (node_id, op, label), (_, _, reached) in zip(meant_cells(case), meant_reached(case)):
            node = next(n for n in case.nodes if n["id"] == node_id)
            operand, _, value = label.partition("=")
            slots = operand_slots(node)
            slot = slots[int(operand[1:])] if value and int(operand[1:]) < len(slots) else (None, None)
            name = node["args"][slot[1]] if slot[0] == "arg" else None
            if name in inputs and value in map(str, inputs[name]["domain"].get("plant", [])):
                fed += 1
                assert reached, (op, label, case.to_json())
    assert fed >= 10


def _meant_edges(case) -> dict:
    """node id -> the edges that node meant (labels read back through its op's declared edges)."""
    by_node = {}
    for node_id, op, label in meant_cells(case):
        edges = {edge.label: edge for edge in declared_edges(get_op(op))}
        by_node.setdefault(node_id, []).append(edges[label])
    return by_node


def test_a_node_means_one_form_per_operand_and_no_value_beside_a_whole_operand_class():
    """Two layouts of one operand, or "all true" beside "all false", cannot both reach the op: a
    node meaning both wasted one (contiguous meant stride 0 and permuted of its one operand)."""
    drawn = _draw(40, ops=["contiguous", "logical_or", "where", "mm"], max_nodes=2, policy=ALWAYS)
    pairs = 0
    for case in drawn:
        for edges in _meant_edges(case).values():
            forms = [edge.operand for edge in edges if isinstance(edge, Form)]
            assert len(forms) == len(set(forms)), (edges, case.to_json())
            whole = {edge.operand for edge in edges if isinstance(edge, Value) and edge.value in ("all true", "all false")}
            assert all(sum(1 for e in edges if isinstance(e, Value) and e.operand == o) == 1 for o in whole), edges
            pairs += len(edges) > 1
    assert pairs >= 20            # nodes meaning several cells were drawn


@pytest.mark.parametrize("op,label", [("le", "x1 scalar"), ("add", "x0 scalar"), ("where", "x2 scalar"),
                                      ("eq", "x1 int32"), ("cumsum", "x0 int32"),
                                      ("interpolate", "mode='nearest-exact'"), ("hardtanh", "min >= max")])
def test_a_meant_number_dtype_or_argument_is_put_at_the_op(op, label):
    """A Python number, an operand of another dtype or an argument value is placed, not hoped for
    from free builds (those met it in a few of ten tries or never)."""
    reached = [hit for case in _draw(30, ops=[op], max_nodes=1, policy=ALWAYS)
               for _, meant_label, hit in meant_reached(case) if meant_label == label]
    assert reached and sum(reached) >= len(reached) / 2, reached


def test_a_class_no_operand_of_the_cases_dtype_holds_is_no_cell():
    assert not is_cell(Value(0, "int min"), "float32") and is_cell(Value(0, "int min"), "int64")
    assert not is_cell(Value(0, "nan"), "int32") and is_cell(Value(0, "nan"), "bfloat16")
    assert is_cell(Form(1, "int32"), "float32")
    float_cases = _draw(20, ops=["abs", "neg"], max_nodes=2, policy=ALWAYS)
    assert not any(label == "x0=int min" for case in float_cases for _, _, label in meant_cells(case))


def test_edge_nodes_go_to_ops_with_cells_left():
    """An op whose every cell was met means almost none; the share it gives up goes to ops with
    cells left, up to twice the policy's; a share of none or all stays as the policy says."""
    class Placer(EdgePlacement):
        def __init__(self, policy):
            self.policy, self.arguments = policy, ArgumentSchedule(policy)

    placer = Placer(GenPolicy(edge_percent=30))
    placer.arguments.offer("relu:edge", ["x0=nan"])
    placer.arguments.offer("pow:edge", ["x0=nan", "x1=0.5"])
    placer.arguments.offer("exp:edge", ["x0=nan"])
    assert placer._edge_share("pow:edge") == 30                 # every op has cells left
    placer.arguments.record(None, [(EDGE_SLOT, False, f"node {i}") for i in range(10)])
    placer.arguments.record(None, [("relu:edge", "x0=nan", "met nan")])
    assert placer._edge_share("relu:edge") == 1
    assert placer._edge_share("pow:edge") == 45                  # 30 x 3 ops / 2 with cells left
    placer.arguments.record(None, [("exp:edge", "x0=nan", "met nan")])
    assert placer._edge_share("pow:edge") == 60                  # at most twice the policy's
    placer.arguments.record(None, [(EDGE_SLOT, True, f"edge node {i}") for i in range(4)])
    assert placer._edge_share("pow:edge") == 60                  # 4 of 14 nodes: under 30% x SHARE_SLACK
    placer.arguments.record(None, [(EDGE_SLOT, True, f"edge node {i}") for i in range(4, 6)])
    assert placer._edge_share("pow:edge") == 30                  # 6 of 16: the share is spent
    for share in (0, 100):
        placer.policy = GenPolicy(edge_percent=share)
        assert placer._edge_share("relu:edge") == share


def test_no_node_means_a_cell_at_edge_share_zero():
    drawn = _draw(5, ops=["reciprocal", "sum"], max_nodes=4, policy=GenPolicy(edge_percent=0))
    assert not any(case.values.get("meant") for case in drawn)
    assert not any("plant" in spec["domain"] for case in drawn for spec in case.inputs)


def test_edges_are_about_the_policys_share_of_nodes():
    drawn = _draw(40, families=["pointwise"])
    nodes = {(case.case_id, n["id"]) for case in drawn for n in case.nodes}
    edge_nodes = {(case.case_id, node_id) for case in drawn for node_id, _ in case.values.get("meant", [])}
    assert 0.2 <= len(edge_nodes) / len(nodes) <= 0.5


@pytest.mark.parametrize("op", ["fmod", "var", "roll", "where"])
def test_every_cell_of_an_op_is_met_or_meant_within_n_cases(op):
    """The schedule means the cells no node has reached yet (a cell reached by chance is not meant
    again), so within N cases every cell is reached or at least meant."""
    cells = {edge.label for edge in declared_edges(get_op(op))}
    met, meant = set(), set()
    for case in _draw(30, ops=[op], max_nodes=3):
        met |= {label for _, label in cells_met(case)}
        meant |= {label for _, _, label in meant_cells(case)}
    assert met | meant == cells, sorted(cells - met - meant)
    assert len(met) >= 0.8 * len(cells), sorted(cells - met)


# -- determinism ------------------------------------------------------------------------------
def test_a_seed_gives_the_same_cases_and_the_same_meant_cells():
    first = [case.to_json() for case in _draw(12, seed=7, families=["reduction", "pointwise"])]
    again = [case.to_json() for case in _draw(12, seed=7, families=["reduction", "pointwise"])]
    assert first == again
    assert any('"meant"' in text for text in first)


def test_the_op_schedule_does_not_depend_on_registry_order():
    ops = list(all_ops().values())
    forward, backward = CoverageSchedule(ops), CoverageSchedule(list(reversed(ops)))
    tickets = [f"ticket {i}" for i in range(60)]
    assert [forward.op_for(t).name for t in tickets] == [backward.op_for(t).name for t in tickets]


# -- the policy -------------------------------------------------------------------------------
def test_the_policy_line_names_every_knob_and_reads_back():
    policy = GenPolicy(edge_percent=50, sizes=(1, 3, 17))
    line = policy.describe()
    for field in dataclasses.fields(GenPolicy):
        assert f" {field.name}=" in line
    assert GenPolicy().with_overrides(line.removeprefix("policy: ").replace(" ", ",")) == policy


def test_the_policy_is_overridden_from_the_environment(monkeypatch):
    monkeypatch.setenv(ENV, "edge_percent=0, graph_nodes=3")
    assert (active_policy().edge_percent, active_policy().graph_nodes) == (0, 3)
    drawn = _draw(5, ops=["neg", "sum"])
    assert max(len(case.nodes) for case in drawn) <= 3 and not any(case.values.get("meant") for case in drawn)


@pytest.mark.parametrize("text,fragment", [("edge_share=3", "no knob=value"), ("edge_percent=lots", "must be int"),
                                           ("edge_percent=150", "percent"), ("sizes=1/x", "integers")])
def test_a_bad_override_names_the_knob(monkeypatch, text, fragment):
    monkeypatch.setenv(ENV, text)
    with pytest.raises(InvalidPolicy, match=fragment):
        active_policy()
    with pytest.raises(InvalidArgument, match=fragment):
        cases()


def test_forms_an_edge_node_makes_are_forms_the_census_knows():
    from torchsim_diff.generate.edge_placement import LAYOUT_FORMS, SHAPE_FORMS
    assert set(LAYOUT_FORMS) | set(SHAPE_FORMS) <= set(FORMS)
