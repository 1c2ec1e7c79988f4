"""Deterministic input values for each value domain.

A domain says which values an input may hold so that every op consuming it stays inside
its own domain (log gets positives, div gets divisors away from zero, indices stay in
range and are unique where duplicates would make eager itself nondeterministic).

Worker-side module: standard library and torch only.
"""
from __future__ import annotations

import base64
import math

import torch

# Float ranges per domain. Wide enough to exercise rounding, narrow enough that short
# op chains stay finite in float16.
FLOAT_RANGES = {
    "real": (-2.0, 2.0),
    "positive": (0.25, 2.0),
    "nonzero": (0.5, 2.0),
    "small": (-1.0, 1.0),
}
INT_RANGES = {"real": (-5, 5), "positive": (1, 5), "nonzero": (1, 5), "small": (-2, 2)}
SPECIAL_SHARE = 0.15
# Value tails (a case's inputs carry `"tail": name` in their domain): where compilers break.
# Each names the domains it may enter without leaving them (log keeps positives, div keeps
# divisors away from zero).
TAIL_SHARE = 0.3
TAIL_DOMAINS = {
    "near_overflow": {"real", "positive", "nonzero"},
    "denormal": {"real", "positive", "nonzero", "small"},
    "signed_zero": {"real", "small"},
    "ties": {"real", "positive", "nonzero", "small"},
    "cancellation": {"real"},
    "special": {"real", "positive", "nonzero", "small"},
}
# The tail of special values (NaN, +-Inf, -0.0, subnormals, huge magnitudes) in one input: the
# one tail that leaves every domain, as the case-wide `special` switch does for all inputs.
SPECIAL_TAIL = "special"


def stream_seed(seed: int, position: int) -> int:
    """Independent, stable generator seed for input number `position` of a case."""
    return (seed * 1_000_003 + position * 7_919 + 17) % (2**63 - 1)


def draw(domain: dict, shape, dtype: torch.dtype, gen: torch.Generator,
         special: bool = False) -> torch.Tensor:
    """Values of `shape` in `domain` as `dtype`, from generator `gen`."""
    kind = domain["kind"]
    if kind == "index":
        return torch.randint(0, int(domain["high"]), tuple(shape), generator=gen).to(dtype)
    if kind == "unique_index":
        return _unique_index(shape, int(domain["high"]), int(domain.get("dim", 0)), gen).to(dtype)
    if kind == "bool":
        return torch.rand(tuple(shape), generator=gen, dtype=torch.float64) < 0.5
    if dtype.is_floating_point:
        return _floats(kind, shape, dtype, gen, special, domain.get("tail"))
    return _ints(kind, shape, dtype, gen)


def _floats(kind, shape, dtype, gen, special, tail=None):
    lo, hi = FLOAT_RANGES[kind]
    x = torch.rand(tuple(shape), generator=gen, dtype=torch.float64) * (hi - lo) + lo
    if kind == "nonzero":
        sign = torch.rand(tuple(shape), generator=gen, dtype=torch.float64) < 0.5
        x = torch.where(sign, -x, x)
    if tail:
        x = _tail(tail, kind, x, dtype, gen)
    if special:
        x = _sprinkle_specials(x, torch.finfo(dtype), gen)
    return x.to(dtype)


def _tail(tail: str, kind: str, x: torch.Tensor, dtype: torch.dtype, gen) -> torch.Tensor:
    if tail not in TAIL_DOMAINS:
        raise ValueError(f"value tail {tail!r} is unknown; expected one of {sorted(TAIL_DOMAINS)}")
    if kind not in TAIL_DOMAINS[tail]:
        return x
    return _TAILS[tail](x, kind, torch.finfo(dtype), gen)


def _some(x: torch.Tensor, gen) -> torch.Tensor:
    return torch.rand(x.shape, generator=gen, dtype=torch.float64) < TAIL_SHARE


def _signs(x: torch.Tensor, kind: str, gen) -> torch.Tensor:
    if kind == "positive":
        return torch.ones_like(x)
    return torch.where(torch.rand(x.shape, generator=gen, dtype=torch.float64) < 0.5, -1.0, 1.0)


def _near_overflow(x, kind, info, gen):
    """Magnitudes at the edges of the dtype: exp's overflow threshold, the square root of
    the largest value (products, squares, norms) and a quarter of it (sums)."""
    edges = torch.tensor([math.log(info.max), math.log(info.max) * 0.98, math.sqrt(info.max),
                          info.max / 4], dtype=torch.float64)
    pick = edges[torch.randint(0, len(edges), x.shape, generator=gen)]
    return torch.where(_some(x, gen), pick * _signs(x, kind, gen), x)


def _denormal(x, kind, info, gen):
    """Subnormal magnitudes (flush-to-zero, denormal-unsafe fast paths)."""
    tiny = info.smallest_normal * torch.rand(x.shape, generator=gen, dtype=torch.float64).clamp_min(1 / 64)
    return torch.where(_some(x, gen), tiny * _signs(x, kind, gen), x)


def _signed_zero(x, kind, info, gen):
    zeros = torch.where(torch.rand(x.shape, generator=gen, dtype=torch.float64) < 0.5, -0.0, 0.0)
    return torch.where(_some(x, gen), zeros, x)


def _ties(x, kind, info, gen):
    """Values on a coarse grid: many ties for max/argmax/sort/topk."""
    grid = torch.round(x * 2) / 2
    return grid.clamp_min(0.5) if kind == "positive" else grid


def _cancellation(x, kind, info, gen):
    """Large values of both signs plus small ones: sums cancel almost everything."""
    big = 2.0 ** (round(-math.log2(info.eps)) // 2 + 3)
    return x + big * _signs(x, kind, gen)


def _special(x, kind, info, gen):
    """Special values in TAIL_SHARE of the elements, and each kind of them once at least
    (as many kinds as there are elements): one input meets NaN, both infinities and the rest."""
    return _sprinkle_specials(x, info, gen, TAIL_SHARE, every_kind=True)


_TAILS = {"near_overflow": _near_overflow, "denormal": _denormal, "signed_zero": _signed_zero,
          "ties": _ties, "cancellation": _cancellation, SPECIAL_TAIL: _special}


def _sprinkle_specials(x: torch.Tensor, info, gen, share: float = SPECIAL_SHARE,
                       every_kind: bool = False) -> torch.Tensor:
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0,
                             info.smallest_normal / 4, info.max / 4, -info.max / 4],
                            dtype=torch.float64)
    pick = torch.randint(0, len(specials), x.shape, generator=gen)
    chance = torch.rand(x.shape, generator=gen, dtype=torch.float64)
    where = chance < share
    if every_kind and x.numel():
        # The elements of least chance take the kinds in a random order, one each.
        first = chance.flatten().argsort()[:len(specials)]
        order = torch.randperm(len(specials), generator=gen)[:len(first)]
        pick = pick.flatten().index_put((first,), order).view(x.shape)
        where = where.flatten().index_put((first,), torch.tensor(True)).view(x.shape)
    return torch.where(where, specials[pick], x)


def _ints(kind, shape, dtype, gen):
    lo, hi = INT_RANGES[kind]
    x = torch.randint(lo, hi + 1, tuple(shape), generator=gen)
    if kind == "nonzero":
        sign = torch.randint(0, 2, tuple(shape), generator=gen) * 2 - 1
        x = x * sign
    return x.to(dtype)


def _unique_index(shape, high: int, dim: int, gen) -> torch.Tensor:
    """Indices in [0, high), distinct along `dim` (a prefix of a permutation per line)."""
    shape = list(shape)
    if not shape:
        return torch.randint(0, high, (), generator=gen)
    length = shape[dim]
    other = shape[:dim] + shape[dim + 1:]
    keys = torch.rand((*other, high), generator=gen, dtype=torch.float64)
    perm = keys.argsort(dim=-1)[..., :length]
    return perm.movedim(-1, dim).contiguous()


# Classes an input's domain may plant (`"plant": [...]`, besides exact numbers): the edges of
# ops.edges.VALUE_CLASSES, each made in the input's own dtype.
PLANTS = ("nan", "inf", "-inf", "+0", "-0", "subnormal", "negative", "max", "int min", "exp overflow",
          "exp underflow", "-exp overflow", "no fraction", "tie", "all true", "all false", "duplicate")
# Classes only a float dtype holds, and only an integer one.
FLOAT_PLANTS = frozenset({"nan", "inf", "-inf", "-0", "subnormal", "exp overflow", "exp underflow",
                          "-exp overflow", "no fraction", "tie"})
INT_PLANTS = frozenset({"int min"})


def plantable(plant, dtype: torch.dtype) -> bool:
    """Whether an input of `dtype` can hold `plant` (a PLANTS name or a number)."""
    if dtype == torch.bool:
        return plant in ("all true", "all false")
    if isinstance(plant, (int, float)) and not isinstance(plant, bool):
        return dtype.is_floating_point or float(plant).is_integer()
    if plant in FLOAT_PLANTS:
        return dtype.is_floating_point
    if plant in INT_PLANTS:
        return not dtype.is_floating_point
    return plant in PLANTS


def plant_value(plant, dtype: torch.dtype) -> float:
    """The element that puts an input of `dtype` in class `plant` (the dtype's own thresholds)."""
    if isinstance(plant, (int, float)):
        return plant
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return {"+0": 0, "negative": -3, "max": info.max, "int min": info.min}[plant]
    info = torch.finfo(dtype)
    return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "+0": 0.0, "-0": -0.0,
            "subnormal": info.tiny / 4, "negative": -1.5, "max": info.max,
            "exp overflow": math.log(info.max) + 1.0, "exp underflow": math.log(info.tiny) - 1.0,
            "-exp overflow": -math.log(info.max) - 1.0, "no fraction": 1.5 / info.eps, "tie": 2.5}[plant]


def plant(view: torch.Tensor, plants) -> None:
    """Write each of `plants` into `view` in place: plant number i at the i-th of evenly spread
    memory elements of the view (an op meets its edge at its own input, not only somewhere
    upstream; a broadcast view's elements share memory, so the spread is over distinct ones);
    "all true" / "all false" fill the view, "duplicate" copies one element onto the next."""
    if not view.numel():
        return
    elements = _distinct_elements(view)
    spread = max(len(elements) // max(len(plants), 1), 1)
    for i, name in enumerate(plants):
        at = elements[(i * spread) % len(elements)]
        if name in ("all true", "all false"):
            view.fill_(name == "all true")
        elif name == "duplicate":
            if len(elements) > 1:
                view[elements[(i * spread + 1) % len(elements)]] = view[at].clone()
        else:
            view[at] = plant_value(name, view.dtype)


def _distinct_elements(view: torch.Tensor) -> list:
    """An index of `view` for each distinct memory element it reads, in row-major order."""
    positions = torch.arange(view.numel())
    coords = torch.unravel_index(positions, view.shape) if view.dim() else ()
    offsets = sum((c * s for c, s in zip(coords, view.stride())), torch.zeros(view.numel(), dtype=torch.long))
    _, which = torch.unique(offsets, return_inverse=True)
    first = torch.full((int(which.max()) + 1,), view.numel()).scatter_reduce_(0, which, positions, "amin")
    first = first.sort().values
    return list(zip(*(c[first].tolist() for c in coords))) if coords else [()]


def encode(storage: torch.Tensor) -> str:
    """Explicit storage values, in row-major order, as base64 text (for reduced or hand-written cases)."""
    # A copy with strides of its own: contiguous() keeps a one-element expand's stride 0, which
    # the byte view refuses.
    storage = storage.reshape(-1).clone(memory_format=torch.contiguous_format)
    raw = storage.view(torch.uint8) if storage.dtype != torch.bool else storage.to(torch.uint8)
    return base64.b64encode(raw.numpy().tobytes()).decode("ascii")


def decode(text: str, dtype: torch.dtype, size: int) -> torch.Tensor:
    """Inverse of encode; raises ValueError when the data does not fit the storage."""
    raw = bytearray(base64.b64decode(text.encode("ascii"), validate=True))
    item = torch.empty((), dtype=dtype).element_size()
    if len(raw) != size * item:
        raise ValueError(f"explicit data holds {len(raw)} bytes; storage of {size} x {dtype} needs {size * item}")
    # frombuffer refuses an empty buffer, and a zero-size storage is a valid case
    flat = torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    if dtype == torch.bool:
        return flat.to(torch.bool).clone()
    return flat.view(dtype).clone()
