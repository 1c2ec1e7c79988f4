"""Coverage-guided choices in place of Hypothesis's own picks, whose pull towards the first
and smallest option made relu a fifth of all nodes and left arguments at one value.

`CoverageSchedule` picks each node's op; `ArgumentSchedule` picks the values of an op's
arguments (dims, keepdim, correction, steps, shifts, modes, operand forms, value classes),
both by the same rule: a choice keyed for the first time gets the option drawn least so
far (weighted, ties broken by the key), or, for one key in RANDOM_SHARE, any option, so
that options still meet at random. A key is everything the case drew before the choice
plus a ticket of its own; a key keeps its option, so replaying a drawn case builds the
same graph.

Counts are of distinct choices, not of cases: Hypothesis draws many cases that share a
prefix (a run of five cases with the same first node), and such a node is the same node
each time, so a key counts once, in the first case that made it. An op whose nodes keep
repeating thus gets fresh nodes elsewhere, and an op with options it has not met yet
(an operand form, a value class, an argument value) gets more nodes until it has met them.
"""
from __future__ import annotations

import collections
import hashlib
import random

from torchsim_diff.generate.policy import DEFAULT, GenPolicy

# The knobs are the generation policy's (generate.policy): random_share; an op with unmet options
# weighs 1 + unmet / unmet_per_node in the op schedule (a node meets about this many options at
# once: an operand form and the classes of its operands), at most max_op_weight, so that ops of
# many options do not crowd out the rest.
RANDOM_SHARE = DEFAULT.random_share


def _memo_key(key: str) -> bytes:
    """A fixed-size stand-in for `key` (a case's whole draw history, kilobytes long), so that
    a long campaign's memo of choices stays small."""
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def _least_drawn(options, count, weight, rng: random.Random):
    """The option with the fewest draws per unit of weight (ties: at random from `rng`)."""
    return min(options, key=lambda o: ((count(o) + 1) / weight(o), rng.random()))


def slot_op(slot: str) -> str:
    """The op a slot belongs to: "var@reductions.py:67" and "div:real values" -> var, div."""
    return slot.split("@", 1)[0].split(":", 1)[0]


class CoverageSchedule:
    """Coverage-guided op choice (module docstring). Hypothesis repeats small and recent
    choices often (a bare ticket repeated for 60% of nodes); whole prefixes repeat far less,
    so rare ops catch up. A shrink step that changes an earlier draw re-keys the nodes after
    it, so multi-node shrinking is coarser than with fixed op choices (`torchsim-diff
    reduce` works on the case JSON instead). Keys live as long as the strategy: a case is
    reproduced from its JSON, not from the example database.

    arguments: the campaign's ArgumentSchedule; ops with options it has not seen drawn yet
    weigh more (UNMET_PER_NODE).
    """

    def __init__(self, ops, arguments: ArgumentSchedule | None = None, policy: GenPolicy = DEFAULT):
        # By name, not registry order: the registry lists a family first when its module was
        # imported before the others, and a seed must give the same cases whatever was imported.
        self.ops = sorted(ops, key=lambda op: op.name)
        self.arguments = arguments
        self.policy = policy
        self.counts = collections.Counter()
        self._ops_by_ticket: dict = {}
        self._counted: set = set()

    def op_for(self, ticket: str, nodes=()):
        """The op for a node keyed by `ticket`, after `nodes` of its case."""
        memo = _memo_key(ticket)
        if memo not in self._ops_by_ticket:
            rng = random.Random(ticket)
            if rng.random() < self.policy.random_share:
                op = rng.choice(self.ops)
            else:
                op = self._least_drawn_op(collections.Counter(node["op"] for node in nodes), rng)
            self._ops_by_ticket[memo] = op
        return self._ops_by_ticket[memo]

    def _least_drawn_op(self, pending, rng: random.Random):
        """Every op once before any op twice; then the fewest draws per weight, so that an op
        with unmet options catches up without crowding out ops not drawn at all."""
        def drawn(op):
            return self.counts[op.name] + pending[op.name]
        return min(self.ops, key=lambda op: (drawn(op) > 0, (drawn(op) + 1) / self._weight(op), rng.random()))

    def _weight(self, op) -> float:
        unmet = self.arguments.unmet(op.name) if self.arguments else 0
        return min(1.0 + unmet / self.policy.unmet_per_node, self.policy.max_op_weight)

    def record(self, case, tickets=None) -> None:
        """Count the ops of a finished case: each node once per distinct ticket (its key),
        or, without tickets, once per distinct case."""
        keys = [_memo_key(t) for t in tickets] if tickets is not None else [case.case_id] * len(case.nodes)
        fresh = [node["op"] for node, key in zip(case.nodes, keys) if (key, node["id"]) not in self._counted]
        self._counted.update((key, node["id"]) for node, key in zip(case.nodes, keys))
        self.counts.update(fresh)


class ArgumentSchedule:
    """Coverage-guided argument values (module docstring).

    A slot is one choice an op's build makes at its own level (not inside drawing an
    operand), named by the op, the function that makes it and the line within that function:
    "var@_build_var+4" (lines added elsewhere in the module leave it as it is). `choose` gives the option for a slot and
    a key; weights keep the shares an op asked for (draw_bool(0.2) stays about one in five)
    while every option comes up within the first few draws of its slot.
    """

    def __init__(self, policy: GenPolicy = DEFAULT):
        self.policy = policy
        self.counts = collections.Counter()       # (slot, repr(option)) -> distinct keys that chose it
        self._by_key: dict = {}
        self._counted: set = set()
        self._options: dict = collections.defaultdict(set)   # slot -> repr of every option offered
        self._slots: dict = collections.defaultdict(set)     # op -> its slots
        self._goals: dict = {}
        self._met: dict = collections.defaultdict(set)       # slot -> repr of every option drawn
        self._unmet_by_op: dict = {}                         # op -> unmet(op), until its slots change
        self._unmet_share: dict = {}                         # suffix -> unmet_share(suffix), likewise

    def choose(self, slot: str, key: str, options, weights=None, pending=None, goal: int | None = None):
        """The option for `slot` under `key`; `pending`: the case's own earlier choices
        ({(slot, repr(option)): n}), counted as drawn; `goal`: how many distinct options the
        slot needs to have met (all of them by default; a few for a range of integers)."""
        options = list(options)
        memo = _memo_key(key)
        self.offer(slot, options, goal)
        if memo not in self._by_key:
            rng = random.Random(key)
            weight = dict(zip(map(repr, options), weights or [1.0] * len(options)))
            pending = pending or {}
            if rng.random() < self.policy.random_share:
                index = rng.randrange(len(options))
            else:
                best = _least_drawn(options, lambda o: self.counts[(slot, repr(o))] + pending.get((slot, repr(o)), 0),
                                    lambda o: weight[repr(o)], rng)
                index = options.index(best)
            self._by_key[memo] = index
        return options[min(self._by_key[memo], len(options) - 1)]

    def offer(self, slot: str, options, goal: int | None = None) -> None:
        """Make `slot` and its `options` known without choosing: a choice its op skipped
        this time (an operand taken from the graph has no value class of its own) still
        counts as unmet."""
        known = self._options[slot]
        fresh = [text for text in map(repr, options) if text not in known]
        if fresh or self._goals.get(slot, ...) != goal:
            known.update(fresh)
            self._goals[slot] = goal
            self._slots[slot_op(slot)].add(slot)
            self._unmet_by_op.pop(slot_op(slot), None)
            self._unmet_share.clear()

    def unmet(self, op: str) -> int:
        """How many more distinct options the slots of `op` need to meet their goals."""
        if op not in self._unmet_by_op:
            self._unmet_by_op[op] = sum(self._unmet(slot) for slot in self._slots.get(op, ()))
        return self._unmet_by_op[op]

    def unmet_share(self, suffix: str) -> tuple:
        """(slots named ...`suffix` with options still to meet, all slots so named)."""
        if suffix not in self._unmet_share:
            named = [slot for slot in self._options if slot.endswith(suffix)]
            self._unmet_share[suffix] = (sum(1 for slot in named if self._unmet(slot)), len(named))
        return self._unmet_share[suffix]

    def slot_unmet(self, slot: str) -> int:
        """How many more distinct options `slot` needs to meet its goal."""
        return self._unmet(slot) if slot in self._options else 0

    def _unmet(self, slot: str) -> int:
        offered = len(self._options[slot])
        goal = self._goals.get(slot) or offered
        return max(0, min(goal, offered) - len(self._met[slot]))

    def record(self, case, choices) -> None:
        """Count a finished case's `choices`: [(slot, option, key)] once per distinct key,
        [(slot, option)] once per distinct case."""
        for position, choice in enumerate(choices):
            slot, option = choice[:2]
            counted = (slot, _memo_key(choice[2]) if len(choice) > 2 else (case.case_id, position))
            if counted not in self._counted:
                self._counted.add(counted)
                self.counts[(slot, repr(option))] += 1
                if repr(option) not in self._met[slot]:
                    self._met[slot].add(repr(option))
                    self._unmet_by_op.pop(slot_op(slot), None)
                    self._unmet_share.clear()
