"""The reducer's passes over an input's values, and the last one, a float16/bfloat16 case raised
to float32.


Values, while the bucket holds: each float or integer input (index inputs too, toward 0)
is tried, whole, at a simplest constant (the first of 0, 1, -1, 0.5 its domain allows),
then at the sign of each value (0 near zero), at each value rounded to an integer within
+-SMALL_INTEGER, and rounded to an integer, each with its special values (NaN, +-Inf,
subnormals, magnitudes past the square root of the dtype's largest value) made ordinary
too, then kept; then with only the special values made ordinary. Inputs of at most
ELEMENT_LIMIT elements then go the same way one element at a time; larger ones a chunk at
a time (halves, quarters, ...: the simplest constant, then integers). A value that leaves
the input's domain or the domain its consumers need (OPERAND_DOMAINS) falls back to the
next simpler one that does not (log keeps positives, div nonzero divisors, an index stays
below its bound); unique indices and booleans are left as they are. Every value is stored
bit for bit (case/values.encode).
"""
from __future__ import annotations

import dataclasses

import torch

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case
from torchsim_diff.triage.case_edits import (OPERAND_DOMAINS, _candidate, _materialize, _storage_and_cover, _uses,
                                             _with_covered)

SIMPLEST_VALUES = (0.0, 1.0, -1.0, 0.5)
SMALL_INTEGER = 4
ELEMENT_LIMIT = 32
CHUNK_PARTS = (2, 4, 8, 16)
SIMPLIFIED_KINDS = ("real", "positive", "nonzero", "small", "index")
SIZE_FREE_KINDS = ("real", "positive", "nonzero", "small", "bool")    # values that fit any shape


@dataclasses.dataclass(frozen=True)
class _Domain:
    """The values an input may hold: every kind in `kinds` at once (`high`: an index's bound)."""

    kinds: frozenset
    high: int | None = None

    def allows(self, x: torch.Tensor) -> torch.Tensor:
        """Per element of `x`: finite and inside every kind."""
        x = x.double()
        ok = torch.isfinite(x)
        if "positive" in self.kinds:
            ok &= x > 0
        if "nonzero" in self.kinds:
            ok &= x != 0
        if "small" in self.kinds:
            ok &= x.abs() <= 1
        if "index" in self.kinds:
            ok &= (x >= 0) & (x < (self.high or 0)) & (x == torch.round(x))
        return ok

    def holds(self, x: torch.Tensor) -> bool:
        """Every finite element of `x` is allowed (special values belong to every domain)."""
        return bool((self.allows(x) | ~torch.isfinite(x.double())).all())

    def simplest(self) -> float | None:
        return next((c for c in SIMPLEST_VALUES if self.allows(torch.tensor(c))), None)


def _value_domain(case: Case, k: int) -> _Domain | None:
    """Input `k`'s own domain and the ones its readers need; None when its values stay as they are."""
    spec = case.inputs[k]
    domain = spec.get("domain", {})
    kind = domain.get("kind", "real")
    if kind not in SIMPLIFIED_KINDS or spec["dtype"] == "bool":
        return None
    needed = {OPERAND_DOMAINS.get(n["op"], {}).get(pos, "real") for n, pos in _uses(case.to_dict(), spec["name"])}
    return _Domain(frozenset({kind} | needed), domain.get("high"))


def _simplify_values(case: Case):
    """Seed 0 without drawn special values, then simpler values per input: whole inputs, then
    one element at a time for inputs of at most ELEMENT_LIMIT elements."""
    drawn = any("data" not in spec for spec in case.inputs)
    if drawn and (case.values.get("seed", 0) != 0 or case.values.get("special")):
        data = case.to_dict()
        data["values"] = {**data["values"], "seed": 0, "special": False}
        yield _candidate(data)
    for k in range(len(case.inputs)):
        domain = _value_domain(case, k)
        if domain is None or domain.simplest() is None:
            continue
        storage, covered = _storage_and_cover(case, k)
        old = storage[covered]
        for new in _whole_input_values(old, domain):
            yield _with_covered(case, k, storage, covered, new)
        pieces = _element_values(old, domain) if old.numel() <= ELEMENT_LIMIT else _chunk_values(old, domain)
        for new in pieces:
            yield _with_covered(case, k, storage, covered, new)


def _ladder(x: torch.Tensor, domain: _Domain) -> list:
    """Simpler values for every element of `x`, simplest first, each allowed by `domain` (a
    value it refuses falls back to the rung before): the simplest constant, the sign (0 near
    zero), the integer within +-SMALL_INTEGER, the integer."""
    x = x.double()
    simplest = torch.full_like(x, domain.simplest())
    rungs = [simplest]
    integer = torch.round(x) + 0.0          # + 0.0: round(-0.3) is -0.0
    for value in (torch.where(x.abs() < 0.5, 0.0, torch.sign(x)), integer.clamp(-SMALL_INTEGER, SMALL_INTEGER), integer):
        rungs.append(torch.where(domain.allows(value), value, rungs[-1]))
    return rungs


def _special(x: torch.Tensor) -> torch.Tensor:
    """Per element: NaN, infinite, subnormal, or past the square root of the dtype's largest value."""
    if not x.dtype.is_floating_point:
        return torch.zeros_like(x, dtype=torch.bool)
    info, wide = torch.finfo(x.dtype), x.double()
    tiny = (wide != 0) & (wide.abs() < info.smallest_normal)
    return ~torch.isfinite(wide) | tiny | (wide.abs() >= info.max ** 0.5)


def _whole_input_values(old: torch.Tensor, domain: _Domain) -> list:
    """The whole input at each rung, special values made ordinary (their sign rung), then kept;
    last, only the special values made ordinary."""
    simplest, unit, *rest = _ladder(old, domain)
    special = _special(old)
    found = [_cast(simplest, old)]
    for rung in (unit, *rest):
        found += [_cast(torch.where(special, unit, rung), old), _mixed(special, old, rung)]
    found.append(_mixed(~special, old, unit))
    return found


def _element_values(old: torch.Tensor, domain: _Domain):
    """One element at a time, each at each rung of its ladder that changes its bits."""
    rungs = [_cast(rung, old) for rung in _ladder(old, domain)]
    for e in range(old.numel()):
        tried = [old[e]]
        for rung in rungs:
            if not any(_same_bits(rung[e], t) for t in tried):
                tried.append(rung[e])
                new = old.clone()
                new[e] = rung[e]
                yield new


def _chunk_values(old: torch.Tensor, domain: _Domain):
    """Inputs too large to go one element at a time: halves, quarters, ... (CHUNK_PARTS), each
    chunk at the simplest constant, then rounded to integers with its special values kept."""
    simplest, *_, integer = _ladder(old, domain)
    special = _special(old)
    for parts in CHUNK_PARTS:
        for chunk in torch.arange(old.numel()).tensor_split(parts):
            inside = torch.zeros_like(special)
            inside[chunk] = True
            yield _mixed(~inside, old, simplest)
            yield _mixed(~inside | special, old, integer)


def _cast(values_: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return values_.to(like.dtype)


def _mixed(keep: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`old`'s own bits where `keep`, `new` elsewhere."""
    return torch.where(keep, old, _cast(new, old))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if not a.dtype.is_floating_point:
        return bool(a == b)
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(a.reshape(1).view(bits) == b.reshape(1).view(bits))



def _raise_precision(case: Case):
    """A float16/bfloat16 case as float32 (kept only when the bucket stays the same)."""
    if case.dtype not in ("float16", "bfloat16"):
        return
    data = case.to_dict()
    data["dtype"] = "float32"
    for k, spec in enumerate(data["inputs"]):
        if spec["dtype"] != case.dtype:
            continue
        spec["dtype"] = "float32"
        if "data" in spec:
            lay = spec["layout"]
            storage = layout.storage_of(_materialize(case, k))[: lay["storage_size"]]
            spec["data"] = values.encode(storage.to(torch.float32))
    yield _candidate(data)
