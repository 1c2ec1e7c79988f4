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

# A graph has the largest of three draws of 1..GRAPH_NODES nodes. At 8, each op met about four
# fresh nodes in a 150-case campaign, too few for its operand forms and value classes; at 12,
# the round-2 bug zoo's hit rate over twelve seeds went from 82% to 92%.
GRAPH_NODES = 12
VALUE_TAIL_PERCENT = 20
SIZE_TAIL_PERCENT = 25
# Special values (NaN, +-Inf, -0.0, subnormals, huge magnitudes) among a case's float inputs:
# "mix" (the default) puts this share of float cases there, "always" every case, "off" none.
SPECIAL_PERCENT = 12
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


def switches(seed: int, value_tails) -> tuple:
    """(value tail or None, odd sizes?) for a case of `seed`; `value_tails` are the dtype's."""
    rng = random.Random(seed)
    tail = rng.choice(value_tails) if value_tails and rng.random() < VALUE_TAIL_PERCENT / 100 else None
    return tail, rng.random() < SIZE_TAIL_PERCENT / 100
