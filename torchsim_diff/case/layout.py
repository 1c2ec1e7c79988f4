"""Materialise case inputs: exact sizes, strides and storage offsets inside guarded storage.

Every input lives in a 1-D storage larger than its view. Storage elements the view does
not cover hold GUARD values, so a route that writes outside a view (or into an input it
must not touch) is caught by comparing whole storages after the run.

Worker-side module: imports only the standard library and torch, so it runs under the
route's own interpreter (docs/design.md, "Route").
"""
from __future__ import annotations

import torch

from torchsim_diff.case import values

LAYOUT_CLASSES = (
    "contiguous", "transposed", "sliced", "offset", "broadcast",
    "channels_last", "overlapping", "inout",
)

DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool,
}

# Chosen to be exactly representable in every float dtype we generate and far outside
# every value domain, so a guard that leaks into a result is conspicuous.
GUARD = {"float": -30720.0, "int": -30720, "bool": True}


def dtype_of(name: str) -> torch.dtype:
    """Torch dtype for a case dtype name ("float32", "int64", ...)."""
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """Inverse of dtype_of."""
    return str(dtype).replace("torch.", "")


def guard_value(dtype: torch.dtype):
    if dtype == torch.bool:
        return GUARD["bool"]
    return GUARD["float"] if dtype.is_floating_point else GUARD["int"]


def covered_mask(shape, strides, offset: int, storage_size: int) -> torch.Tensor:
    """Boolean mask over the storage: True where some view element lives."""
    index = torch.arange(storage_size, dtype=torch.int64)
    mask = torch.zeros(storage_size, dtype=torch.bool)
    if all(s > 0 for s in shape):
        mask[index.as_strided(shape, strides, offset).reshape(-1)] = True
    return mask


def is_overlapping(shape, strides) -> bool:
    """True when two view elements share one storage element (stride 0 or aliasing)."""
    numel = 1
    for s in shape:
        numel *= s
    if numel <= 1:
        return False
    span = 1 + sum((n - 1) * abs(st) for n, st in zip(shape, strides))
    if span < numel:
        return True
    index = torch.arange(span).as_strided(shape, strides, 0).reshape(-1)
    return index.unique().numel() < numel


def materialize(spec: dict, seed: int, position: int, special: bool = False,
                dtype_override: torch.dtype | None = None) -> torch.Tensor:
    """Build one input described by a case's input spec.

    Returns a view with the spec's exact shape/strides/offset into a guarded storage.
    The same (spec, seed, position) always gives the same bits. `dtype_override`
    rebuilds the same values in another dtype (float64 for the oracle's truth).
    """
    dtype = dtype_of(spec["dtype"])
    layout = spec["layout"]
    shape, strides = list(spec["shape"]), list(layout["strides"])
    offset, size = int(layout["offset"]), int(layout["storage_size"])
    generator = torch.Generator().manual_seed(values.stream_seed(seed, position))
    domain = spec.get("domain", {"kind": "real"})
    if "data" in spec:
        storage = values.decode(spec["data"], dtype, size)
    elif is_overlapping(shape, strides):
        storage = values.draw(domain, (size,), dtype, generator, special)
    else:
        storage = torch.full((size,), guard_value(dtype), dtype=dtype)
        view = storage.as_strided(shape, strides, offset)
        view.copy_(values.draw(domain, shape, dtype, generator, special))
    if "data" not in spec:
        storage[~covered_mask(shape, strides, offset, size)] = guard_value(dtype)
        if domain.get("plant"):
            values.plant(storage.as_strided(shape, strides, offset), domain["plant"])
    if dtype_override is not None and dtype.is_floating_point:
        storage = storage.to(dtype_override)
    return storage.as_strided(shape, strides, offset)


def materialize_all(case: dict, dtype_override: torch.dtype | None = None) -> list:
    """All inputs of a case, in order."""
    vals = case.get("values", {})
    seed, special = int(vals.get("seed", 0)), bool(vals.get("special", False))
    return [materialize(spec, seed, i, special, dtype_override)
            for i, spec in enumerate(case["inputs"])]


def storage_of(view: torch.Tensor) -> torch.Tensor:
    """The whole 1-D storage behind a view, as a tensor of the view's dtype."""
    n = view.untyped_storage().nbytes() // view.element_size()
    return view.as_strided((n,), (1,), 0)


def contiguous_strides(shape) -> list:
    strides, step = [], 1
    for size in reversed(list(shape)):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def span(shape, strides) -> int:
    """Storage elements from the first to the last element of a view (0 when empty)."""
    if any(s == 0 for s in shape):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(shape, strides))


def layout_classes(shape, strides, offset: int, storage_size: int, mutated: bool) -> list:
    """The layout classes a geometry belongs to (docs/design.md, "Layout classes").

    Computed from the geometry itself, so a recorded class is always true of the input.
    """
    shape, strides = list(shape), list(strides)
    real = [(n, st) for n, st in zip(shape, strides) if n > 1]
    classes = []
    if any(st == 0 for _, st in real):
        classes.append("broadcast")
    elif is_overlapping(shape, strides):
        classes.append("overlapping")
    moving = [st for _, st in real if st != 0]
    if len(shape) == 4 and len(real) > 1 and strides == _channels_last(shape):
        classes.append("channels_last")
    elif moving != sorted(moving, reverse=True):
        classes.append("transposed")
    numel = 1
    for n in shape:
        numel *= n
    dense_span = span(shape, [abs(s) for s in strides])
    if "broadcast" not in classes and "overlapping" not in classes and dense_span > numel:
        classes.append("sliced")
    if offset > 0:
        classes.append("offset")
    if mutated:
        classes.append("inout")
    return classes or ["contiguous"]


def _channels_last(shape) -> list:
    n, c, h, w = shape
    return [h * w * c, 1, w * c, c]
