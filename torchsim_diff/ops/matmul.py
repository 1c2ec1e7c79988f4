"""mm, bmm, addmm and matmul."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register


def _build_mm(b):
    a = b.value(exact_rank=2)
    m, k = b.shape(a)
    n = b.draw_size(scale=max(m, k))
    return [a, b.value_of_shape([k, n])], {}


def _build_bmm(b):
    a = b.value(exact_rank=3)
    batch, m, k = b.shape(a)
    return [a, b.value_of_shape([batch, k, b.draw_size(scale=batch * max(m, k))])], {}


def _build_addmm(b):
    a = b.value(exact_rank=2)
    m, k = b.shape(a)
    n = b.draw_size(scale=max(m, k))
    mat2 = b.value_of_shape([k, n])
    bias = b.broadcastable_to([m, n])
    return [bias, a, mat2], {}


def _build_matmul(b):
    a = b.value(min_rank=1, max_rank=3)
    shape = b.shape(a)
    k = shape[-1]
    if len(shape) == 1 or b.draw_bool(0.3):
        rhs = [k]
    else:
        rhs = [k, b.draw_size(scale=b.numel(a))]
        if b.draw_bool(0.3):
            rhs = [b.draw_size(scale=b.numel(a) * rhs[1]), *rhs] if len(shape) == 2 else [shape[0], *rhs]
    return [a, b.value_of_shape(rhs)], {}


register(OpSpec("mm", "matmul", lambda a, k: call("torch.mm", a), _build_mm))
register(OpSpec("bmm", "matmul", lambda a, k: call("torch.bmm", a), _build_bmm))
register(OpSpec("addmm", "matmul", lambda a, k: call("torch.addmm", a), _build_addmm))
register(OpSpec("matmul", "matmul", lambda a, k: call("torch.matmul", a), _build_matmul))
