"""Attribute types: what each op attribute may hold in a case file.

Case files come from outside (shared corpora, bundles attached to issues), and a node's
attributes end up in program text. So every attribute is checked against its op's declared
signature before anything is built: ints, bools, finite numbers, int lists, a closed set of
strings, and a few structured values. A value that passes can only print as a literal.

    >>> from torchsim_diff.ops.attrs import INT, BOOL, check_attrs
    >>> check_attrs({"dim": INT, "keepdim": BOOL}, {"dim": 1, "keepdim": True})   # None: fits
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable

# Larger than any size, index or shift a case can use, small enough to stay exact everywhere.
INT_LIMIT = 2**31
LIST_LIMIT = 16
EINSUM_EQUATION = re.compile(r"[a-z]{0,8}(,[a-z]{0,8}){0,3}(->[a-z]{0,8})?")


@dataclasses.dataclass(frozen=True)
class Attr:
    """One attribute's type: `accepts(value)` says whether a JSON value fits, `describe` says
    in words what fits (for the error line). An optional attribute may be left out.
    `choices` lists its whole domain when that is a few values (the argument census's goal)."""

    describe: str
    accepts: Callable[[object], bool]
    optional: bool = False
    choices: tuple | None = None        # every value it may hold, when they are few (bools, names)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT <= value <= INT_LIMIT


def _is_number(value) -> bool:
    return _is_int(value) or (isinstance(value, float) and math.isfinite(value))


def _is_int_list(value) -> bool:
    return isinstance(value, list) and len(value) <= LIST_LIMIT and all(_is_int(v) for v in value)


INT = Attr("an integer", _is_int)
BOOL = Attr("true or false", lambda v: isinstance(v, bool), choices=(False, True))
NUMBER = Attr("a finite number", _is_number)
INTS = Attr(f"a list of at most {LIST_LIMIT} integers", _is_int_list)
EQUATION = Attr("an einsum equation of letters, commas and '->'",
                lambda v: isinstance(v, str) and EINSUM_EQUATION.fullmatch(v) is not None)
# masked_fill's -inf is how attention masks are written; other non-finite numbers are not drawn.
FILL = Attr("a finite number or -inf", lambda v: _is_number(v) or v == float("-inf"))


def optional(attr: Attr) -> Attr:
    """`attr`, which the node may leave out."""
    return dataclasses.replace(attr, optional=True)


def or_none(attr: Attr) -> Attr:
    """`attr`, or null."""
    choices = (None, *attr.choices) if attr.choices else None
    return Attr(f"{attr.describe} or null", lambda v: v is None or attr.accepts(v), attr.optional, choices)


def one_of(*choices: str) -> Attr:
    """One of a closed set of strings."""
    return Attr("one of " + ", ".join(repr(c) for c in choices), lambda v: isinstance(v, str) and v in choices,
                choices=tuple(choices))


def record(kinds: dict) -> Attr:
    """An object {"kind": K, ...} whose other fields follow `kinds[K]` (field name -> Attr)."""
    def accepts(value) -> bool:
        if not isinstance(value, dict) or value.get("kind") not in kinds:
            return False
        fields = kinds[value["kind"]]
        rest = {k: v for k, v in value.items() if k != "kind"}
        return check_attrs(fields, rest) is None
    return Attr("an object with 'kind' one of " + ", ".join(repr(k) for k in kinds) + " and its fields", accepts)


def check_attrs(signature: dict, attrs: dict) -> str | None:
    """None when `attrs` fits `signature` (name -> Attr), else the first reason it does not."""
    for name in attrs:
        if name not in signature:
            allowed = ", ".join(sorted(signature)) or "none"
            return f"attribute {name!r} is not one of this op's attributes ({allowed})"
    for name, attr in signature.items():
        if name not in attrs:
            if not attr.optional:
                return f"attribute {name!r} is missing"
            continue
        if not attr.accepts(attrs[name]):
            return f"attribute {name}={_short(attrs[name])} must be {attr.describe}"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
