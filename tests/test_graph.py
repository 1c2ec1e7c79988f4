"""Case JSON: round trips, determinism, and one clear line for every malformed case."""
import copy
import json

import pytest
import torch

from torchsim_diff.case import layout
from torchsim_diff.case.graph import Case, CaseError


def test_json_round_trip_keeps_identity(add_case):
    again = Case.from_json(add_case.to_json())
    assert again.to_dict() == add_case.to_dict()
    assert again.case_id == add_case.case_id and again.graph_hash == add_case.graph_hash


def test_same_json_builds_the_same_values(add_case):
    first = layout.materialize_all(add_case.to_dict())
    second = layout.materialize_all(Case.from_json(add_case.to_json()).to_dict())
    for a, b in zip(first, second):
        assert a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
        assert torch.equal(layout.storage_of(a), layout.storage_of(b))


def test_other_seed_other_values_same_graph(add_case):
    other = Case.from_dict({**add_case.to_dict(), "values": {"seed": 99}})
    assert other.graph_hash == add_case.graph_hash and other.case_id != add_case.case_id
    assert not torch.equal(layout.materialize_all(other.to_dict())[0], layout.materialize_all(add_case.to_dict())[0])


def test_program_source_is_runnable_python(add_case):
    source = add_case.program_source()
    assert "torch.transpose(x0, dim0=0, dim1=1)" in source
    namespace = {}
    exec(source, namespace)
    (out,) = namespace["program"](*layout.materialize_all(add_case.to_dict()))
    x0, x1 = layout.materialize_all(add_case.to_dict())
    assert torch.equal(out, torch.relu(x0.t() + x1))


def test_guards_surround_the_view(add_case):
    x0 = layout.materialize_all(add_case.to_dict())[0]
    storage = layout.storage_of(x0)
    mask = layout.covered_mask([3, 5], [1, 3], 2, 20)
    assert (storage[~mask] == layout.GUARD["float"]).all()
    assert not (storage[mask] == layout.GUARD["float"]).any()


def _broken(mutate):
    def make(case):
        data = copy.deepcopy(case.to_dict())
        mutate(data)
        return json.dumps(data)
    return make


MALFORMED = {
    "not json": (lambda c: "{nope", "not valid JSON"),
    "missing field": (_broken(lambda d: d.pop("nodes")), "missing the field 'nodes'"),
    "bad schema": (_broken(lambda d: d.update(schema=9)), "schema=9"),
    "unknown dtype": (_broken(lambda d: d.update(dtype="float8")), "dtype='float8'"),
    "unknown op": (_broken(lambda d: d["nodes"][0].update(op="frobnicate")), "unknown op 'frobnicate'"),
    "undefined argument": (_broken(lambda d: d["nodes"][1].update(args=["v9", "x1"])), "'v9' is not defined"),
    "storage too small": (_broken(lambda d: d["inputs"][0]["layout"].update(storage_size=3)), "storage_size=3"),
    "strides rank": (_broken(lambda d: d["inputs"][0]["layout"].update(strides=[1])), "strides=[1]"),
    "unknown output": (_broken(lambda d: d.update(outputs=["zz"])), "output 'zz'"),
    "bad name": (_broken(lambda d: d["inputs"][0].update(name="1x")), "'1x'"),
    "mutated broadcast": (_broken(lambda d: d["inputs"][1].update(
        mutated=True, layout={"strides": [0, 1], "offset": 0, "storage_size": 3})), "mutated input"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_case_gives_one_line_naming_the_problem(add_case, name):
    make, fragment = MALFORMED[name]
    with pytest.raises(CaseError) as info:
        Case.from_json(make(add_case))
    message = str(info.value)
    assert fragment in message and "\n" not in message


@pytest.mark.parametrize("shape,strides,offset,mutated,expected", [
    ([3, 4], [4, 1], 0, False, ["contiguous"]),
    ([3, 4], [1, 3], 0, False, ["transposed"]),
    ([3, 4], [8, 2], 0, False, ["sliced"]),
    ([3, 4], [4, 1], 5, False, ["offset"]),
    ([3, 4], [0, 1], 0, False, ["broadcast"]),
    ([3, 4], [2, 1], 0, False, ["overlapping"]),
    ([2, 3, 4, 5], [60, 1, 15, 3], 0, False, ["channels_last"]),
    ([3, 4], [4, 1], 0, True, ["inout"]),
])
def test_layout_classes_follow_the_geometry(shape, strides, offset, mutated, expected):
    assert layout.layout_classes(shape, strides, offset, 100, mutated) == expected


def test_the_case_byte_limit_follows_the_environment(monkeypatch, add_case):
    from torchsim_diff.case.validate import MAX_CASE_BYTES_ENV, InvalidCase, Limits, validate_case
    assert Limits.for_this_machine().case_bytes >= 2**26
    validate_case(add_case.to_dict())
    monkeypatch.setenv(MAX_CASE_BYTES_ENV, "200")
    with pytest.raises(InvalidCase, match="over the limit of 200"):
        validate_case(add_case.to_dict())
    monkeypatch.setenv(MAX_CASE_BYTES_ENV, "lots")
    with pytest.raises(InvalidCase, match="must be a positive number of bytes"):
        validate_case(add_case.to_dict())
