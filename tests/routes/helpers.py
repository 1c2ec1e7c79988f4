"""Shared helpers for route tests: explicit input layouts, compile-once-run-many, and an
element-by-element comparison against eager over whole guarded storages."""
import torch

from torchsim_diff.case import layout
from torchsim_diff.routes.base import RunContext


def spec(name, shape, strides=None, offset=0, dtype="float32", extra=0):
    """Input spec with an explicit layout inside a storage `extra` elements larger than needed."""
    if strides is None:
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides)) if all(shape) else 0
    return {"name": name, "shape": list(shape), "dtype": dtype, "domain": {"kind": "real"},
            "layout": {"classes": [], "strides": list(strides), "offset": offset,
                       "storage_size": offset + span + extra}, "mutated": False}


def case_of(*inputs, seed=7):
    return {"schema": 1, "dtype": inputs[0]["dtype"], "inputs": list(inputs), "nodes": [], "outputs": [],
            "values": {"seed": seed, "special": False}}


def run_route(route, program, case, tmp_path, seeds=(7,), options=None):
    """Compile once, run for each seed; yield (outputs, route inputs, eager outputs, eager inputs, ctx)."""
    ctx = RunContext(artifact_dir=str(tmp_path), case=case, options=dict(options or {}))
    compiled = route.compile(program, layout.materialize_all(case), ctx)
    for seed in seeds:
        case = {**case, "values": {"seed": seed, "special": False}}
        route_inputs, eager_inputs = layout.materialize_all(case), layout.materialize_all(case)
        outputs = compiled(route_inputs, ctx)
        yield outputs, route_inputs, program(*eager_inputs), eager_inputs, ctx


def assert_same_as_eager(outputs, route_inputs, eager_outputs, eager_inputs, exact=True):
    assert len(outputs) == len(eager_outputs)
    for got, want in zip(outputs, eager_outputs):
        assert got.shape == want.shape and got.dtype == want.dtype
        if exact:
            wrong = (got != want).sum().item()
            assert wrong == 0, f"{wrong}/{want.numel()} elements differ from eager"
        else:
            torch.testing.assert_close(got, want)
    for got, want in zip(route_inputs, eager_inputs):  # whole storages: guards and mutations
        assert torch.equal(layout.storage_of(got), layout.storage_of(want))


def permute_add(x0, x1):
    """An output whose layout differs from its inputs'."""
    return (x0.permute(2, 0, 1) + x1,)


def two_layouts(x0):
    """Two outputs: one transposed, one in the input's own layout."""
    return (x0.t() * 2.0, x0 + 1.0)
