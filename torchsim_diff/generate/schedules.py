"""Coverage-guided choices in place of Hypothesis's own picks, whose pull towards the first
and smallest option made relu a fifth of all nodes and left arguments at one value.

`CoverageSchedule` picks each node's op; `ArgumentSchedule` picks the values of an op's
arguments (dims, keepdim, correction, steps, shifts, modes...), both by the same rule: a
choice keyed for the first time gets the option drawn least so far (weighted, ties broken
by the key), or, for one key in RANDOM_SHARE, any option, so that options still meet at
random. A key is everything the case drew before the choice plus a ticket of its own;
a key keeps its option, so replaying a drawn case builds the same graph. Counts grow once
per distinct case (Hypothesis draws some cases again, a campaign runs each once).
"""
from __future__ import annotations

import collections
import hashlib
import random

RANDOM_SHARE = 0.05


def _memo_key(key: str) -> bytes:
    """A fixed-size stand-in for `key` (a case's whole draw history, kilobytes long), so that
    a long campaign's memo of choices stays small."""
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def _least_drawn(options, count, weight, rng: random.Random):
    """The option with the fewest draws per unit of weight (ties: at random from `rng`)."""
    return min(options, key=lambda o: ((count(o) + 1) / weight(o), rng.random()))


class CoverageSchedule:
    """Coverage-guided op choice (module docstring). Hypothesis repeats small and recent
    choices often (a bare ticket repeated for 60% of nodes); whole prefixes repeat far less,
    so rare ops catch up. A shrink step that changes an earlier draw re-keys the nodes after
    it, so multi-node shrinking is coarser than with fixed op choices (`torchsim-diff
    reduce` works on the case JSON instead). Keys live as long as the strategy: a case is
    reproduced from its JSON, not from the example database.
    """

    def __init__(self, ops):
        self.ops = list(ops)
        self.counts = collections.Counter()
        self._ops_by_ticket: dict = {}
        self._cases: set = set()

    def op_for(self, ticket: str, nodes=()):
        """The op for a node keyed by `ticket`, after `nodes` of its case."""
        memo = _memo_key(ticket)
        if memo not in self._ops_by_ticket:
            rng = random.Random(ticket)
            if rng.random() < RANDOM_SHARE:
                op = rng.choice(self.ops)
            else:
                pending = collections.Counter(node["op"] for node in nodes)
                op = _least_drawn(self.ops, lambda o: self.counts[o.name] + pending[o.name], lambda o: 1.0, rng)
            self._ops_by_ticket[memo] = op
        return self._ops_by_ticket[memo]

    def record(self, case) -> None:
        """Count the ops of a finished case, once per distinct case."""
        if case.case_id not in self._cases:
            self._cases.add(case.case_id)
            self.counts.update(node["op"] for node in case.nodes)


class ArgumentSchedule:
    """Coverage-guided argument values (module docstring).

    A slot is one choice an op's build makes at its own level (not inside drawing an
    operand), named by the op and the line that makes it: "var@reductions.py:67". `choose` gives the option for a slot and
    a key; weights keep the shares an op asked for (draw_bool(0.2) stays about one in five)
    while every option comes up within the first few draws of its slot.
    """

    def __init__(self):
        self.counts = collections.Counter()       # (slot, repr(option)) -> cases that chose it
        self._by_key: dict = {}
        self._cases: set = set()

    def choose(self, slot: str, key: str, options, weights=None):
        options = list(options)
        memo = _memo_key(key)
        if memo not in self._by_key:
            rng = random.Random(key)
            weight = dict(zip(map(repr, options), weights or [1.0] * len(options)))
            if rng.random() < RANDOM_SHARE:
                index = rng.randrange(len(options))
            else:
                best = _least_drawn(options, lambda o: self.counts[(slot, repr(o))], lambda o: weight[repr(o)], rng)
                index = options.index(best)
            self._by_key[memo] = index
        return options[min(self._by_key[memo], len(options) - 1)]

    def record(self, case, choices) -> None:
        """Count a finished case's `choices` ([(slot, option)]), once per distinct case."""
        if case.case_id not in self._cases:
            self._cases.add(case.case_id)
            self.counts.update((slot, repr(option)) for slot, option in choices)
