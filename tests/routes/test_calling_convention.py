"""Calling conventions of the routes that move data across their own boundary (mlir, spike):
outputs whose layout differs from their inputs' are compared with eager element by element,
and every input's whole guarded storage must come back unchanged. The prototype once read
the wrong buffer and returned 24/24 wrong elements without an error; this catches that.
"""
import pytest

from tests.routes.helpers import (
    assert_same_as_eager,
    case_of,
    permute_add,
    run_route,
    spec,
    two_layouts,
)
from torchsim_diff.routes import make_route

ROUTES = ["mlir", "spike"]


@pytest.fixture(scope="module", params=ROUTES)
def route(request):
    route = make_route(request.param)
    ok, reason = route.available()
    if not ok:
        pytest.skip(f"route {request.param} unavailable: {reason}")
    return route


@pytest.mark.parametrize("program, inputs", [
    (permute_add, [spec("x0", [2, 3, 4]), spec("x1", [2, 3])]),
    (permute_add, [spec("x0", [2, 3, 4], strides=[1, 2, 6], extra=3), spec("x1", [2, 3], strides=[1, 2])]),
    (two_layouts, [spec("x0", [3, 5], strides=[1, 3], offset=2, extra=4)]),
], ids=["permute-contiguous", "permute-strided-inputs", "transpose-and-same-layout-outputs"])
def test_calling_convention_matches_eager_element_by_element(route, program, inputs, tmp_path):
    for outputs, *rest, ctx in run_route(route, program, case_of(*inputs), tmp_path, seeds=(7, 8)):
        assert_same_as_eager(outputs, *rest)
