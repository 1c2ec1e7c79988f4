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
