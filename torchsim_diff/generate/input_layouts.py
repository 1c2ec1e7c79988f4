"""Where a new input's elements lie: strides, storage offset and storage size for a layout class
(contiguous, transposed, sliced, broadcast, overlapping, offset, channels-last).

Draws go through the GraphBuilder (generate.strategies) so that the argument schedule sees them;
its slots are named by function and line within the function, so these functions keep theirs."""
from __future__ import annotations

from hypothesis import strategies as st

from torchsim_diff.case import layout


def draw_geometry(b, shape, *, aliasing_ok: bool, primary: str | None = None) -> dict:
    """Strides, storage offset and storage size for a new input of `shape`, drawn through the
    GraphBuilder `b`.

    aliasing_ok=False (written inputs, indices that must stay distinct) excludes
    broadcast and overlapping layouts. primary: the layout class to draw (an edge node's
    operand form), else drawn among the builder's classes.
    """
    rank = len(shape)
    options = [c for c in b.layout_classes if c not in ("inout", "contiguous")]
    if not aliasing_ok:
        options = [c for c in options if c not in ("broadcast", "overlapping")]
    if rank != 4:
        options = [c for c in options if c != "channels_last"]
    if primary is None:
        primary = b.draw_choice(["contiguous", *options]) if options else "contiguous"
    order = list(range(rank))
    steps, pads = [1] * rank, [0] * rank
    if primary == "transposed" and rank >= 2:
        order = b.draw_permutation(rank)
        if order == sorted(order):
            order = order[::-1]
    if primary == "channels_last":
        order = [0, 2, 3, 1]
    if primary == "sliced" and rank:
        for d in range(rank):
            steps[d] = b.draw_int(1, 3)
            pads[d] = b.draw_int(0, 2)
        steps[b.draw_int(0, rank - 1)] = 2
    strides = _strides_for(shape, order, steps, pads)
    if primary == "broadcast" and rank:
        for d in b.draw(st.sets(st.integers(0, rank - 1), min_size=1)):
            strides[d] = 0
    if primary == "overlapping":
        strides = _overlapping_strides(b, shape, strides)
    offset = b.draw_int(1, 9) if primary == "offset" or b.draw_bool(0.15) else 0
    storage = offset + layout.span(shape, strides) + b.draw_int(0, 3)
    return {"strides": strides, "offset": offset, "storage_size": max(storage, 1)}


def _strides_for(shape, order, steps, pads) -> list:
    """Strides when dims are laid out in `order` (outermost first), each dim `steps`
    apart with `pads` extra elements of slack."""
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = step * steps[d]
        step *= max(shape[d] * steps[d] + pads[d], 1)
    return strides


def _overlapping_strides(b, shape, strides) -> list:
    wide = [d for d in range(len(shape) - 1) if shape[d] > 1 and strides[d] > 1]
    if not wide:
        return strides
    d = b.draw_choice(wide)
    strides = list(strides)
    strides[d] = max(1, strides[d] // b.draw_int(2, 4))
    return strides
