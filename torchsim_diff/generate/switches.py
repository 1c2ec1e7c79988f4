"""Per-case switches: which cases go to a value tail, the size tail, or hold special values;
and how many nodes a graph may have.

The tails are taken from the case's seed (seed 0, where shrinking goes, is an ordinary case),
as the graph's inputs need them while it is drawn. Hypothesis repeats a seed over many cases
(about 55 distinct seeds in 150 cases), so their shares swing from seed to seed. Special
values apply once the graph is drawn: the strategy schedules them over whole cases
(generate.schedules), which holds their share at SPECIAL_PERCENT. Most cases stay ordinary so
that the tails do not crowd out the rest.

Standard library only: the CLI reads SPECIAL_MODES without importing torch.
"""
from __future__ import annotations

import random

from torchsim_diff.generate.policy import GenPolicy, active_policy

# The knobs live in the generation policy (generate.policy); these names are the active
# policy's, read once at import (the CLI's defaults).
_POLICY = active_policy()
# A graph has the largest of three draws of 1..GRAPH_NODES nodes.
GRAPH_NODES = _POLICY.graph_nodes
# Special values (NaN, +-Inf, -0.0, subnormals, huge magnitudes) among a case's float inputs:
# "mix" (the default) puts this share of float cases there, "always" every case, "off" none.
SPECIAL_PERCENT = _POLICY.special_percent
SPECIAL_MODES = ("off", "mix", "always")


class InvalidSwitch(ValueError):
    """A switch setting that is not one of its modes."""


def special_mode(value) -> str:
    """One of SPECIAL_MODES for `value` (True and False mean "always" and "off")."""
    if value is True or value is False:
        return "always" if value else "off"
    if value not in SPECIAL_MODES:
        raise InvalidSwitch(f"special_values={value!r} must be one of {SPECIAL_MODES} (or True/False)")
    return value


def switches(seed: int, value_tails, policy: GenPolicy | None = None) -> tuple:
    """(value tail or None, odd sizes?) for a case of `seed`; `value_tails` are the dtype's."""
    policy = policy or _POLICY
    rng = random.Random(seed)
    tail = rng.choice(value_tails) if value_tails and rng.random() < policy.value_tail_percent / 100 else None
    return tail, rng.random() < policy.size_tail_percent / 100
