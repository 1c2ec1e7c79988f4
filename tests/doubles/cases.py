"""Helpers for the triton route's tests: build small cases and run them in-process next to
eager, keeping the artifacts (kernel captures) for inspection."""
from __future__ import annotations

import math
import os
import tempfile

import torch

from torchsim_diff.case import layout
from torchsim_diff.routes import make_route
from torchsim_diff.routes.base import RunContext


def tensor_spec(name, shape, *, strides=None, offset=0, storage=None, dtype="float32",
                domain=None, mutated=False):
    """A case input; contiguous strides by default, storage just large enough plus `offset`."""
    if strides is None:
        strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return {"name": name, "shape": list(shape), "dtype": dtype, "domain": domain or {"kind": "real"},
            "layout": {"classes": [], "strides": list(strides), "offset": offset,
                       "storage_size": storage or offset + span},
            "mutated": mutated}


def make_case(*inputs, seed=1234):
    return {"schema": 1, "dtype": "float32", "inputs": list(inputs), "nodes": [], "outputs": [],
            "values": {"seed": seed, "special": False}}


def program_from(source: str):
    namespace = {}
    exec(source, namespace)
    return namespace["program"]


class CaseRun:
    """Outputs and final input storages of one case on a route and on eager."""

    def __init__(self, route, source, case, artifact_dir=None):
        self.program = program_from(source)
        self.artifact_dir = artifact_dir or tempfile.mkdtemp(prefix="torchsim_triton_test_")
        os.makedirs(self.artifact_dir, exist_ok=True)
        self.ctx = RunContext(artifact_dir=self.artifact_dir, case=case)
        compiled = route.compile(self.program, layout.materialize_all(case), self.ctx)
        self.route_inputs = layout.materialize_all(case)
        self.route_outputs = compiled(self.route_inputs, self.ctx)
        self.eager_inputs = layout.materialize_all(case)
        self.eager_outputs = self.program(*self.eager_inputs)

    def matches_eager(self) -> bool:
        """True when outputs and every input storage agree with eager (torch.testing tolerances)."""
        pairs = list(zip(self.route_outputs, self.eager_outputs))
        pairs += [(layout.storage_of(a), layout.storage_of(b)) for a, b in zip(self.route_inputs, self.eager_inputs)]
        if len(self.route_outputs) != len(self.eager_outputs):
            return False
        try:
            for got, want in pairs:
                torch.testing.assert_close(got, want, equal_nan=True)
        except AssertionError:
            return False
        return True

    def kernels(self):
        """Captured launch folders, in launch order."""
        folder = os.path.join(self.artifact_dir, "kernels")
        return sorted(n for n in os.listdir(folder) if os.path.isdir(os.path.join(folder, n)))


def interpreter_route(launcher=None):
    """A set-up `triton` route in this process (skipped, with the reason, when unavailable)."""
    route = make_route("triton", {"launcher": launcher} if launcher else None)
    ok, reason = route.available()
    if not ok:
        import pytest
        pytest.skip(reason)
    route.setup()
    return route
