"""Deterministic input values for each value domain.

A domain says which values an input may hold so that every op consuming it stays inside
its own domain (log gets positives, div gets divisors away from zero, indices stay in
range and are unique where duplicates would make eager itself nondeterministic).

Worker-side module: standard library and torch only.
"""
from __future__ import annotations

import base64

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
        return _floats(kind, shape, dtype, gen, special)
    return _ints(kind, shape, dtype, gen)


def _floats(kind, shape, dtype, gen, special):
    lo, hi = FLOAT_RANGES[kind]
    x = torch.rand(tuple(shape), generator=gen, dtype=torch.float64) * (hi - lo) + lo
    if kind == "nonzero":
        sign = torch.rand(tuple(shape), generator=gen, dtype=torch.float64) < 0.5
        x = torch.where(sign, -x, x)
    if special:
        x = _sprinkle_specials(x, dtype, gen)
    return x.to(dtype)


def _sprinkle_specials(x: torch.Tensor, dtype: torch.dtype, gen) -> torch.Tensor:
    info = torch.finfo(dtype)
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0,
                             info.smallest_normal / 4, info.max / 4, -info.max / 4],
                            dtype=torch.float64)
    pick = torch.randint(0, len(specials), x.shape, generator=gen)
    where = torch.rand(x.shape, generator=gen, dtype=torch.float64) < SPECIAL_SHARE
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


def encode(storage: torch.Tensor) -> str:
    """Explicit storage values as base64 text (for reduced or hand-written cases)."""
    raw = storage.contiguous().view(torch.uint8) if storage.dtype != torch.bool else storage.to(torch.uint8)
    return base64.b64encode(raw.numpy().tobytes()).decode("ascii")


def decode(text: str, dtype: torch.dtype, size: int) -> torch.Tensor:
    """Inverse of encode; raises ValueError when the data does not fit the storage."""
    raw = bytearray(base64.b64decode(text.encode("ascii"), validate=True))
    item = torch.empty((), dtype=dtype).element_size()
    if len(raw) != size * item:
        raise ValueError(f"explicit data holds {len(raw)} bytes; storage of {size} x {dtype} needs {size * item}")
    flat = torch.frombuffer(raw, dtype=torch.uint8)
    if dtype == torch.bool:
        return flat.to(torch.bool).clone()
    return flat.view(dtype).clone()
