"""Scans and orderings along one dim: cumsum/cumprod/logcumsumexp/cummax, sort, argsort, topk.

Orderings are drawn with ties in mind (the `ties` value tail): sort and argsort are
stable, so equal elements have one right answer; topk returns its values only, since
which of several tied indices it returns is unspecified.
"""
from __future__ import annotations

from torchsim_diff.ops import OpSpec, call, register
from torchsim_diff.ops.attrs import BOOL, INT


def _register(name, emit, build, rounding, dtypes="any", result_domain="real", signature=None):
    register(OpSpec(name, "reduction", emit, build, rounding=rounding, dtypes=dtypes, result_domain=result_domain,
                    signature=signature or {"dim": INT}))


def _build_scan(b):
    x = b.value(min_rank=1)
    return [x], {"dim": b.draw_int(-1, len(b.shape(x)) - 1)}


_register("cumsum", lambda a, k: call("torch.cumsum", a, dim=k["dim"]), _build_scan, "reduction")
_register("cumprod", lambda a, k: call("torch.cumprod", a, dim=k["dim"]), _build_scan, "reduction", dtypes="float")
_register("logcumsumexp", lambda a, k: call("torch.logcumsumexp", a, dim=k["dim"]), _build_scan, "reduction",
          dtypes="float")
_register("cummax", lambda a, k: f"{call('torch.cummax', a, dim=k['dim'])}.values", _build_scan, "exact",
          result_domain="same")


def _build_sort(b):
    x = b.value(min_rank=1)
    return [x], {"dim": b.draw_int(-1, len(b.shape(x)) - 1), "descending": b.draw_bool()}


_register("sort", lambda a, k: f"{call('torch.sort', a, dim=k['dim'], descending=k['descending'], stable=True)}.values",
          _build_sort, "exact", result_domain="same", signature={"dim": INT, "descending": BOOL})
_register("argsort", lambda a, k: call("torch.argsort", a, dim=k["dim"], descending=k["descending"], stable=True),
          _build_sort, "exact", result_domain="index", signature={"dim": INT, "descending": BOOL})


def _build_topk(b):
    x = b.value(min_rank=1)
    shape = b.shape(x)
    dim = b.draw_dim(len(shape))
    return [x], {"k": b.draw_int(1, shape[dim]), "dim": dim, "largest": b.draw_bool()}


_register("topk", lambda a, k: f"{call('torch.topk', a, k=k['k'], dim=k['dim'], largest=k['largest'])}.values",
          _build_topk, "exact", result_domain="same", signature={"k": INT, "dim": INT, "largest": BOOL})


# -- edges. Read from torch's docs (NaN's place in sort, stable ties) and Inductor's lowerings
# (lowering.py: cumsum / cumprod / logcumsumexp of a 0-d operand, and a scan it cannot generate
# falls back; sort and topk fall back unless decompose_sort_ops; cumsum of integers to int64).
from torchsim_diff.ops import declare_edges  # noqa: E402 - see declare_edges
from torchsim_diff.ops.edges import ArgShape, ArgValue, Form, values_of  # noqa: E402

# A scan along a size-1 dim or of a 0-d operand (a branch of its own in the lowering), a negative dim.
SCAN_EXTENT = (ArgShape("dim of size 1"), ArgShape("negative dim"), Form(0, "0-d"), Form(0, "permuted"))
SORT_EDGES = (ArgValue("descending", True), ArgShape("dim of size 1"), Form(0, "0-d"), Form(0, "permuted"),
              *values_of(0, "nan", "-0", "duplicate", "inf", "-inf"))
declare_edges({
    "cumsum": (*SCAN_EXTENT, *values_of(0, "inf", "-inf", "nan", "max"), Form(0, "int32")),
    "cumprod": (*SCAN_EXTENT, *values_of(0, "+0", "inf", "nan", "max")),
    "logcumsumexp": (*SCAN_EXTENT, *values_of(0, "exp overflow", "-inf", "inf", "nan")),
    "cummax": (*SCAN_EXTENT, *values_of(0, "nan", "-0", "duplicate", "-inf")),
    "sort": SORT_EDGES,
    "argsort": SORT_EDGES,
    "topk": (ArgShape("k == size"), ArgValue("k", 1), ArgValue("largest", False), ArgShape("dim of size 1"),
             *values_of(0, "nan", "duplicate", "-inf"), Form(0, "permuted")),
})
