"""Which of a failure's parts it needs: delta debugging over a list of parts.

    >>> needed_parts(["a", "b", "c", "d"], lambda dropped: "c" not in dropped)
    ['c']

`still_fails(dropped)` answers whether the failure survives with the parts in `dropped` taken
away (made ordinary). Parts go in the groups given first, then in halves, down to one at a
time; a group whose removal keeps the failure is removed for good. What stays is 1-minimal:
taking away any one of the kept parts, with the removed ones gone, makes the failure vanish.
"""
from __future__ import annotations


def needed_parts(parts: list, still_fails, groups: list | None = None) -> list:
    """The parts the failure needs, in their order in `parts`. groups: lists of parts to try
    together first (default: all parts as one group)."""
    removed: list = []
    todo = [list(g) for g in (groups if groups is not None else [parts]) if g]
    while todo:
        group = todo.pop(0)
        if still_fails(removed + group):
            removed += group
        elif len(group) > 1:
            half = len(group) // 2
            todo[:0] = [group[:half], group[half:]]
    return [p for p in parts if p not in removed]
