"""The generator: valid by construction, layouts as recorded, arguments checked eagerly."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from torchsim_diff import layout
from torchsim_diff.graph import Case
from torchsim_diff.ops import all_ops, get_op
from torchsim_diff.strategies import InvalidArgument, cases

FAST = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def _run_eager(case):
    namespace = {}
    exec(case.program_source(), namespace)
    return namespace["program"](*layout.materialize_all(case.to_dict()))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
def test_every_generated_case_runs_in_eager_and_round_trips(dtype):
    @FAST
    @given(case=cases(dtype=dtype))
    def check(case):
        assert Case.from_json(case.to_json()).to_dict() == case.to_dict()
        _run_eager(case)
    check()


@FAST
@given(case=cases())
def test_recorded_layouts_are_the_materialised_ones(case):
    for spec, tensor in zip(case.inputs, layout.materialize_all(case.to_dict())):
        assert list(tensor.shape) == spec["shape"]
        assert list(tensor.stride()) == spec["layout"]["strides"]
        assert tensor.storage_offset() == spec["layout"]["offset"]
        geometry = spec["layout"]
        assert geometry["classes"] == layout.layout_classes(spec["shape"], geometry["strides"], geometry["offset"],
                                                            geometry["storage_size"], spec["mutated"])


@FAST
@given(case=cases(families=["inplace"]))
def test_mutated_inputs_are_written_and_never_aliased(case):
    assert case.mutated
    for spec in case.inputs:
        if spec["mutated"]:
            assert not layout.is_overlapping(spec["shape"], spec["layout"]["strides"])
            assert "inout" in spec["layout"]["classes"]


@FAST
@given(case=cases(ops=["index_put_", "index_copy_", "scatter_"]))
def test_indices_without_accumulate_are_distinct(case):
    tensors = layout.materialize_all(case.to_dict())
    for node in case.nodes:
        if node["op"] == "index_put_" and node["attrs"]["accumulate"]:
            continue
        idx = tensors[[i["name"] for i in case.inputs].index(node["args"][1])]
        dim = node["attrs"].get("dim", 0) if node["op"] == "scatter_" else 0
        lines = idx.movedim(dim, -1).reshape(-1, idx.shape[dim]) if idx.dim() else idx.reshape(1, 1)
        for line in lines:
            assert line.unique().numel() == line.numel()


def test_special_values_appear_when_asked():
    seen = []

    @FAST
    @given(case=cases(special_values=True, ops=["relu"]))
    def check(case):
        seen.append(any((~torch.isfinite(t)).any() for t in layout.materialize_all(case.to_dict())))
    check()
    assert any(seen)


def test_every_registered_op_is_reachable():
    for name, spec in all_ops().items():
        @settings(max_examples=3, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=cases(ops=[name], max_nodes=2, dtype="float32" if spec.dtypes == "float" else "int64"))
        def check(case):
            assert name in case.ops
            _run_eager(case)
        check()


def test_duplicate_op_registration_is_refused():
    from torchsim_diff.ops import DuplicateOp, register
    with pytest.raises(DuplicateOp, match="'add' is registered twice"):
        register(get_op("add"))


@pytest.mark.parametrize("kwargs,fragment", [
    ({"dtype": "float8"}, "dtype='float8'"),
    ({"min_nodes": 0}, "min_nodes=0"),
    ({"min_nodes": 5, "max_nodes": 2}, "max_nodes=2"),
    ({"ops": ["nope"]}, "ops=['nope']"),
    ({"families": ["magic"]}, "families=['magic']"),
    ({"layouts": ["diagonal"]}, "layouts=['diagonal']"),
    ({"dtype": "int32", "families": ["matmul"]}, "no registered op supports dtype='int32'"),
    ({"max_numel": 0}, "max_numel=0"),
], ids=lambda v: str(v) if isinstance(v, dict) else None)
def test_bad_arguments_fail_at_once_naming_the_value(kwargs, fragment):
    with pytest.raises(InvalidArgument, match=None) as info:
        cases(**kwargs)
    assert fragment in str(info.value)
