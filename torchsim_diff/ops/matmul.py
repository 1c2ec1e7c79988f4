"""mm, bmm, addmm and matmul."""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import EQUATION, NUMBER


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


register(OpSpec("mm", "matmul", lambda a, k: call("torch.mm", a), _build_mm, rounding="contraction"))
register(OpSpec("bmm", "matmul", lambda a, k: call("torch.bmm", a), _build_bmm, rounding="contraction"))
register(OpSpec("addmm", "matmul", lambda a, k: call("torch.addmm", a), _build_addmm, rounding="contraction"))
register(OpSpec("matmul", "matmul", lambda a, k: call("torch.matmul", a), _build_matmul, rounding="contraction"))


def _build_batched_add(batched: bool):
    def build(b):
        b1 = b.value(exact_rank=3)
        batch, n, m = b.shape(b1)
        b2 = b.value_of_shape([batch, m, b.draw_size(scale=batch * max(n, m))])
        p = b.shape(b2)[2]
        bias = b.broadcastable_to([batch, n, p] if batched else [n, p])
        return [bias, b1, b2], {"beta": b.draw_choice([1.0, 0.5, 0.0]), "alpha": b.draw_choice([1.0, -0.5, 2.0])}
    return build


register(OpSpec("baddbmm", "matmul", lambda a, k: call("torch.baddbmm", a, beta=k["beta"], alpha=k["alpha"]),
                _build_batched_add(True), rounding="contraction", signature={"beta": NUMBER, "alpha": NUMBER}))
register(OpSpec("addbmm", "matmul", lambda a, k: call("torch.addbmm", a, beta=k["beta"], alpha=k["alpha"]),
                _build_batched_add(False), rounding="contraction", signature={"beta": NUMBER, "alpha": NUMBER}))


def _build_linear(b):
    x = b.value(min_rank=1, max_rank=3)
    features = b.shape(x)[-1]
    out = b.draw_size(scale=max(b.numel(x), features))
    args = [x, b.value_of_shape([out, features])]
    if b.draw_bool():
        args.append(b.value_of_shape([out]))
    return args, {}


register(OpSpec("linear", "matmul", lambda a, k: call("torch.nn.functional.linear", a), _build_linear,
                rounding="contraction"))

# Contractions users write with einsum: matmul, batched and attention-shaped products,
# row-wise dots, outer products, diagonals and sums over an axis.
EINSUM_EQUATIONS = ("ij,jk->ik", "bij,bjk->bik", "ij,ij->i", "i,j->ij", "ij->ji", "ii->i",
                    "bhqd,bhkd->bhqk", "ijk->ik", "ij,kj->ik")


def _build_einsum(b):
    equation = b.draw_choice(EINSUM_EQUATIONS)
    operands = equation.split("->")[0].split(",")
    sizes, numel = {}, 1
    for letter in sorted(set("".join(operands))):
        sizes[letter] = b.draw_size(scale=numel)
        numel *= sizes[letter]
    return [b.value_of_shape([sizes[c] for c in term]) for term in operands], {"equation": equation}


register(OpSpec("einsum", "matmul", lambda a, k: f"torch.einsum({k['equation']!r}, {', '.join(a)})", _build_einsum,
                rounding="contraction", signature={"equation": EQUATION}))


# -- edges. Read from torch's docs (baddbmm / addbmm: with beta 0 the input is ignored, NaN and
# inf included), the decompositions (torch/_decomp/decompositions.py: matmul's 1-d and
# batch-broadcast cases; einsum's equations become permute + bmm or a plain sum) and Inductor's
# lowerings (kernel/mm.py: extern and template kernels read operand layouts, stride 0 and
# transposed ones included; addmm's bias is an epilogue; lowering.py: addbmm is a fallback).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, Value  # noqa: E402

# The layouts extern and template kernels read, and the degenerate products.
PRODUCT_EDGES = (Form(0, "stride 0"), Form(1, "stride 0"), Form(0, "permuted"), Form(1, "permuted"),
                 Form(0, "offset"), ArgShape("K == 1"), ArgShape("M or N == 1"), Value(0, "inf"), Value(1, "nan"))
BATCHED_ADD_EDGES = (ArgValue("beta", 0.0), ArgValue("alpha", 1.0), ArgValue("beta", 1.0), Value(0, "nan"),
                     Value(0, "inf"), Value(1, "inf"), Form(0, "stride 0"), Form(1, "permuted"), Form(2, "permuted"),
                     Form(1, "offset"), ArgShape("K == 1"))
# Equations that are no product: a diagonal, a transpose, an outer product, a plain sum.
EINSUM_EDGES = (*(ArgValue("equation", e) for e in ("ii->i", "ij->ji", "i,j->ij", "ijk->ik", "ij,ij->i",
                                                     "bhqd,bhkd->bhqk")),
                Form(0, "permuted"), Form(0, "stride 0"), Value(0, "inf"))
declare_edges({
    "mm": PRODUCT_EDGES,
    "bmm": PRODUCT_EDGES,
    "addmm": (Form(0, "stride 0"), Form(0, "0-d"), ArgShape("1-d operand"), Form(1, "permuted"), Form(2, "permuted"),
              Form(2, "stride 0"), ArgShape("K == 1"), ArgShape("M or N == 1"), Value(0, "nan"), Value(1, "inf")),
    "matmul": (ArgShape("1-d operand"), ArgShape("batch broadcast"), ArgShape("K == 1"), Form(0, "permuted"),
               Form(1, "permuted"), Form(1, "stride 0"), Value(0, "inf"), Value(1, "nan")),
    "baddbmm": BATCHED_ADD_EDGES,
    "addbmm": BATCHED_ADD_EDGES,
    "linear": (ArgShape("with bias"), ArgShape("1-d operand"), Form(0, "permuted"), Form(0, "stride 0"),
               Form(1, "permuted"), Value(0, "inf"), Value(1, "nan")),
    "einsum": EINSUM_EDGES,
})
