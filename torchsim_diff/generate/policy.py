"""Every generation knob in one object: sizes, shares, weights and the edge share.

    >>> from torchsim_diff.generate.policy import active_policy, GenPolicy
    >>> active_policy().describe()                    # the line a run header prints
    'policy: sizes=1/2/3/4/5/7/8/16/17/33/64/129 ... edge_percent=33 ...'
    >>> GenPolicy().with_overrides("edge_percent=50,graph_nodes=8")

A run takes the default policy, or the one the environment variable TORCHSIM_DIFF_POLICY
names as `knob=value` pairs separated by commas (a tuple knob takes its numbers separated by
'/'): `TORCHSIM_DIFF_POLICY="edge_percent=50,sizes=1/2/3/17"`. The text is parsed as numbers,
never evaluated. The same policy and seed give the same cases.

Standard library only: the CLI reads the policy without importing torch.
"""
from __future__ import annotations

import dataclasses
import os

ENV = "TORCHSIM_DIFF_POLICY"


class InvalidPolicy(ValueError):
    """A policy override that names no knob or holds no value of the knob's type."""


@dataclasses.dataclass(frozen=True)
class GenPolicy:
    """The generation knobs. Each default says why it is what it is.

    sizes: dimension sizes a shape draws from (powers of two and their neighbours).
    odd_sizes: the size tail, just above powers of two and block sizes (masked tails,
        remainder loops), and matmul K values that are no multiple of 8, 16 or 32.
    max_numel: element budget per tensor (4096 keeps interpreter routes fast).
    graph_nodes: most nodes per graph; at 8 each op met about four fresh nodes in a 150-case
        campaign, too few; at 12 the round-2 bug zoo's hit rate over twelve seeds went from
        82% to 92%.
    value_tail_percent / size_tail_percent: cases that go to a case-wide value tail / the
        size tail (generate.switches).
    special_percent: float cases holding special values when special_values="mix".
    ordinary_weight: ordinary values weigh this many value tails in an op's value classes.
    random_share: share of scheduled choices made at random (generate.schedules).
    unmet_per_node / max_op_weight: how much an op with unmet options weighs in the op schedule.
    edge_percent: nodes that mean to meet edges of their op (#50: about a third, so that the
        random mass stays).
    edges_per_node: cells an edge node means to meet at once (a form and an argument together).
    plants_per_operand: value cells an edge node plants in one operand, each at an element of its
        own, when one of its cells is a value of that operand (an op of many value classes meets
        them in a few nodes; elementwise ops see each at its own element).
    edge_tries: builds of an edge node before it keeps what it has: the first is scheduled,
        the others draw freely until the cell's argument, shape or form comes up.
    """

    sizes: tuple = (1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 64, 129)
    odd_sizes: tuple = (9, 17, 23, 33, 47, 65, 129)
    max_numel: int = 4096
    graph_nodes: int = 12
    value_tail_percent: int = 20
    size_tail_percent: int = 25
    special_percent: int = 12
    ordinary_weight: float = 2.0
    random_share: float = 0.05
    unmet_per_node: float = 3.0
    max_op_weight: float = 4.0
    edge_percent: int = 33
    edges_per_node: int = 2
    plants_per_operand: int = 4
    edge_tries: int = 6

    def __post_init__(self):
        _check(all(isinstance(s, int) and s >= 1 for s in self.sizes) and self.sizes, "sizes", self.sizes,
               "positive integers")
        _check(all(isinstance(s, int) and s >= 1 for s in self.odd_sizes) and self.odd_sizes, "odd_sizes",
               self.odd_sizes, "positive integers")
        for name in ("max_numel", "graph_nodes", "edges_per_node", "plants_per_operand", "edge_tries"):
            _check(getattr(self, name) >= 1, name, getattr(self, name), "at least 1")
        for name in ("value_tail_percent", "size_tail_percent", "special_percent", "edge_percent"):
            _check(0 <= getattr(self, name) <= 100, name, getattr(self, name), "a percent in 0..100")
        _check(0.0 <= self.random_share <= 1.0, "random_share", self.random_share, "a share in 0..1")
        for name in ("ordinary_weight", "unmet_per_node", "max_op_weight"):
            _check(getattr(self, name) > 0, name, getattr(self, name), "positive")

    def describe(self) -> str:
        """One line, every knob as `name=value` (tuples as n/n/n): what a run header prints,
        and what TORCHSIM_DIFF_POLICY takes back."""
        return "policy: " + " ".join(f"{f.name}={_text(getattr(self, f.name))}" for f in dataclasses.fields(self))

    def with_overrides(self, text: str) -> "GenPolicy":
        """This policy with the knobs `text` names ("edge_percent=50,sizes=1/2/3") changed."""
        changes = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep or name not in _FIELDS:
                raise InvalidPolicy(f"{ENV}: {part!r} is no knob=value pair; knobs: {', '.join(_FIELDS)}")
            changes[name] = _parse(name, value.strip(), _FIELDS[name])
        return dataclasses.replace(self, **changes)


def _check(ok, name, value, expected) -> None:
    if not ok:
        raise InvalidPolicy(f"policy {name}={value!r} must be {expected}")


def _text(value) -> str:
    return "/".join(map(str, value)) if isinstance(value, tuple) else f"{value:g}" if isinstance(value, float) \
        else str(value)


def _parse(name: str, text: str, default):
    try:
        if isinstance(default, tuple):
            return tuple(int(v) for v in text.split("/") if v.strip())
        return type(default)(text)
    except ValueError:
        kind = "integers separated by '/'" if isinstance(default, tuple) else type(default).__name__
        raise InvalidPolicy(f"{ENV}: {name}={text!r} must be {kind}") from None


_FIELDS = {f.name: f.default for f in dataclasses.fields(GenPolicy)}
DEFAULT = GenPolicy()


def active_policy() -> GenPolicy:
    """The default policy with TORCHSIM_DIFF_POLICY's overrides, if any."""
    text = os.environ.get(ENV, "")
    return DEFAULT.with_overrides(text) if text.strip() else DEFAULT
