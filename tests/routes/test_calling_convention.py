"""Calling conventions of the routes that move data across their own boundary (mlir, spike):
outputs whose layout differs from their inputs' are compared with eager element by element,
every input's whole guarded storage must come back as eager leaves it (mutations written
back into the caller's strided views, nothing else touched). The prototype once read
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


def add_into_second(x0, x1):
    x1.add_(x0.t())
    return (x1 * 2.0,)


def scale_rows_in_place(x0):
    x0[1:3].mul_(2.0)
    return ()


@pytest.mark.parametrize("program, inputs", [
    (add_into_second, [spec("x0", [3, 4]), spec("x1", [4, 3], strides=[1, 4], offset=1, extra=2)]),
    (scale_rows_in_place, [spec("x0", [5, 3], strides=[6, 2], offset=1, extra=1)]),
], ids=["mutated-transposed-input", "mutated-slice-of-strided-input"])
def test_mutated_inputs_are_written_back(route, program, inputs, tmp_path):
    for outputs, *rest, _ in run_route(route, program, case_of(*inputs), tmp_path):
        assert_same_as_eager(outputs, *rest)
