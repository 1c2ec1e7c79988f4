"""Hypothesis strategies for cases: small op graphs, valid by construction.

    >>> from torchsim_diff.generate.strategies import cases
    >>> @given(case=cases(dtype="float16", max_nodes=4))
    ... def test_something(case): ...

Every draw goes through Hypothesis, so shrinking works on the graph itself: fewer nodes,
smaller shapes, simpler layouts (contiguous first), ordinary values and sizes. Ops are
picked by a coverage schedule (`CoverageSchedule`) so that every op gets its share; a
per-case switch puts a minority of cases in a value tail (`values.TAILS`) or the size
tail (`ODD_SIZES`).
Operands are picked from values already in the graph or made as new inputs; each new
input gets a layout drawn from the layout classes and lives in guarded storage. Result
shapes come from running the emitted code on meta tensors, so no shape rule is written
twice.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import random

import torch
from hypothesis import strategies as st

from torchsim_diff.case import layout
from torchsim_diff.case.graph import SCHEMA, Case
from torchsim_diff.ops import FAMILIES, all_ops, ops_in
from torchsim_diff.case.program_check import eval_expression

SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 64, 129)
# The size tail: just above powers of two and block sizes (masked tails, remainder loops),
# and matmul K values that are no multiple of 8, 16 or 32.
ODD_SIZES = (9, 17, 23, 33, 47, 65, 129)
MAX_NUMEL = 4096
# Per-case switches; most cases stay ordinary so that the tails do not crowd out the rest.
VALUE_TAIL_PERCENT = 20
SIZE_TAIL_PERCENT = 25
VALUE_TAILS = ("near_overflow", "denormal", "signed_zero", "ties", "cancellation")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
INT_DTYPES = ("int32", "int64")
# A value domain satisfies a requirement when it is a subset of it.
SATISFIES = {
    "real": {"real", "positive", "nonzero", "small"},
    "positive": {"positive"},
    "nonzero": {"nonzero", "positive"},
    "small": {"small"},
    "bool": {"bool"},
}
VIEW_OPS = {"transpose", "permute", "reshape", "view", "slice", "narrow", "expand", "unsqueeze",
            "squeeze", "contiguous", "select"}


class InvalidArgument(TypeError):
    """A strategy argument a user got wrong (named, with its value and the fix)."""


# Ops whose meta kernel lays out its result otherwise than eager on CPU (torch 2.13): float
# floor_divide of a channels-last operand broadcast against another is contiguous on meta,
# channels-last in eager, so `.view` of what follows raises in eager. Found by the
# false-positive benchmark (seed 2); tests/test_strategies.py checks the list is still needed.
META_STRIDES_DIFFER = frozenset({"floor_divide"})


@dataclasses.dataclass
class Value:
    """A tensor in the graph under construction."""

    meta: torch.Tensor
    domain: str
    aliases: frozenset          # input names whose memory this value may share
    is_input: bool = False
    mutable: bool = False
    strides_known: bool = True  # meta's strides are eager's (see META_STRIDES_DIFFER)


class GraphBuilder:
    """What an op's `build` uses to draw operands and attributes."""

    def __init__(self, draw, *, dtype: str, max_numel: int, layout_classes, value_tail=None,
                 odd_sizes: bool = False):
        self.draw, self.dtype, self.max_numel = draw, dtype, max_numel
        self.layout_classes = layout_classes
        self.value_tail, self.odd_sizes = value_tail, odd_sizes
        self.inputs: list = []
        self.nodes: list = []
        self.values: dict = {}
        self.consumed: set = set()
        self._avoid: frozenset = frozenset()

    # -- primitive draws -------------------------------------------------------------
    def draw_bool(self, p: float = 0.5) -> bool:
        return self.draw(st.integers(0, 99)) < int(p * 100)

    def draw_int(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, max(lo, hi)))

    def draw_choice(self, options):
        return self.draw(st.sampled_from(list(options)))

    def fits(self, numel: int) -> bool:
        return numel <= self.max_numel

    def draw_size(self, scale: int = 1) -> int:
        """A dimension size such that `scale * size` stays within the element budget."""
        sizes = ODD_SIZES if self.odd_sizes and self.draw_bool(0.7) else SIZES
        allowed = [s for s in sizes if s * max(scale, 1) <= self.max_numel]
        allowed = allowed or [s for s in SIZES if s * max(scale, 1) <= self.max_numel] or [1]
        return self.draw_choice(allowed)

    def draw_shape(self, min_rank: int = 0, max_rank: int = 4, scale: int = 1) -> list:
        rank = self.draw_int(min_rank, max_rank)
        shape, numel = [], max(scale, 1)
        for _ in range(rank):
            size = self.draw_size(scale=numel)
            shape.append(size)
            numel *= size
        return shape

    def draw_subset(self, lo: int, hi: int, *, min_size: int = 0, max_size: int | None = None) -> list:
        """A sorted list of distinct integers in [lo, hi]."""
        return sorted(self.draw(st.sets(st.integers(lo, hi), min_size=min_size, max_size=max_size)))

    def draw_permutation(self, n: int) -> list:
        return list(self.draw(st.permutations(range(n)))) if n else []

    def reduction_dims(self, rank: int):
        """A sorted list of distinct dims, or None for a full reduction."""
        if rank == 0 or self.draw_bool(0.15):
            return None
        dims = self.draw(st.sets(st.integers(0, rank - 1), min_size=1, max_size=rank))
        return sorted(dims)

    def draw_reshape(self, shape) -> list:
        """A shape with the same number of elements: merge, split, flatten or add a unit dim."""
        shape = list(shape)
        how = self.draw_choice(["merge", "split", "flatten", "unit"])
        if how == "merge" and len(shape) >= 2:
            i = self.draw_int(0, len(shape) - 2)
            return shape[:i] + [shape[i] * shape[i + 1]] + shape[i + 2:]
        if how == "split" and shape:
            i = self.draw_int(0, len(shape) - 1)
            divisors = [d for d in range(1, shape[i] + 1) if shape[i] % d == 0]
            d = self.draw_choice(divisors)
            return shape[:i] + [d, shape[i] // d] + shape[i + 1:]
        if how == "flatten":
            return [self._numel(shape)]
        i = self.draw_int(0, len(shape))
        return shape[:i] + [1] + shape[i:]

    # -- looking at values -------------------------------------------------------------
    def shape(self, ref: str) -> list:
        return list(self.values[ref].meta.shape)

    def numel(self, ref: str) -> int:
        return self.values[ref].meta.numel()

    def is_contiguous(self, ref: str) -> bool:
        value = self.values[ref]
        return value.strides_known and value.meta.is_contiguous()

    @staticmethod
    def _numel(shape) -> int:
        n = 1
        for s in shape:
            n *= s
        return n

    # -- operands ----------------------------------------------------------------------
    def value(self, domain: str = "real", *, min_rank: int = 0, max_rank: int = 4,
              exact_rank: int | None = None) -> str:
        """An existing value in `domain` and rank range, or a new input."""
        if exact_rank is not None:
            min_rank = max_rank = exact_rank
        found = self._candidates(domain, lambda m: min_rank <= m.dim() <= max_rank)
        if found and self.draw_bool(0.8):
            return self.draw_choice(found)
        return self.new_input(self.draw_shape(min_rank, max_rank), domain)

    def value_of_shape(self, shape, domain: str = "real") -> str:
        shape = list(shape)
        found = self._candidates(domain, lambda m: list(m.shape) == shape)
        if found and self.draw_bool(0.5):
            return self.draw_choice(found)
        return self.new_input(shape, domain)

    def broadcastable_to(self, shape, domain: str = "real") -> str:
        """A value whose shape broadcasts to `shape` without growing it."""
        shape = list(shape)
        if self.draw_bool(0.5):
            return self.value_of_shape(shape, domain)
        drop = self.draw_int(0, len(shape))
        kept = [1 if self.draw_bool(0.4) else s for s in shape[drop:]]
        return self.value_of_shape(kept, domain)

    def index_input(self, shape, *, high: int, unique: bool = False, dim: int = 0) -> str:
        """A new int64 input with values in [0, high) (distinct along `dim` when unique)."""
        domain = {"kind": "unique_index", "high": high, "dim": dim} if unique else {"kind": "index", "high": high}
        return self._add_input(list(shape), "int64", domain, mutable=False, value_domain="index",
                               distinct_elements=unique)

    def new_input(self, shape, domain: str = "real", dtype: str | None = None, tail: bool = True) -> str:
        """A new input; `dtype` other than the case's makes a mixed-dtype operand;
        tail=False keeps it out of the case's value tail."""
        dtype = dtype or ("bool" if domain == "bool" else self.dtype)
        return self._add_input(list(shape), dtype, self._domain(domain, tail), mutable=False, value_domain=domain)

    def _domain(self, kind: str, tail: bool = True) -> dict:
        """The value domain of a new input, with the case's value tail when it has one."""
        if tail and self.value_tail and kind in ("real", "positive", "nonzero", "small"):
            return {"kind": kind, "tail": self.value_tail}
        return {"kind": kind}

    def mutable_target(self, *, min_rank: int = 0, prefer_view: bool = False):
        """(input name, view attrs or None, written shape) for an in-place write."""
        found = [n for n, v in self.values.items() if v.mutable and v.meta.dim() >= min_rank]
        if found and self.draw_bool(0.3):
            name = self.draw_choice(found)
        else:
            name = self._add_input(self.draw_shape(min_rank, 4), self.dtype, self._domain("real"),
                                   mutable=True, value_domain="real")
        self._avoid = frozenset({name})
        view = self._draw_target_view(self.shape(name), min_rank) if (prefer_view or self.draw_bool(0.4)) else None
        meta = self.values[name].meta
        if view:
            from torchsim_diff.ops.inplace import target_expr
            meta = eval_expression(target_expr("t", view), {"t": meta})
        return name, view, list(meta.shape)

    def _draw_target_view(self, shape, min_rank: int):
        kinds = []
        if shape:
            kinds += ["slice", "narrow"]
            if len(shape) - 1 >= min_rank:
                kinds.append("select")
        if len(shape) >= 2:
            kinds.append("transpose")
        if not kinds:
            return None
        kind = self.draw_choice(kinds)
        dim = self.draw_int(0, len(shape) - 1)
        size = shape[dim]
        if kind == "transpose":
            return {"kind": kind, "dim0": dim, "dim1": self.draw_int(0, len(shape) - 1)}
        if kind == "select":
            return {"kind": kind, "dim": dim, "index": self.draw_int(0, size - 1)}
        start = self.draw_int(0, size - 1)
        if kind == "narrow":
            return {"kind": kind, "dim": dim, "start": start, "length": self.draw_int(1, size - start)}
        return {"kind": kind, "dim": dim, "start": start, "stop": None, "step": self.draw_int(1, 3)}

    def _candidates(self, domain: str, fits) -> list:
        ok = SATISFIES.get(domain, {domain})
        recent_first = list(reversed(self.values.items()))
        return [name for name, v in recent_first
                if v.domain in ok and fits(v.meta) and not (v.aliases & self._avoid)
                and self._is_data(v, domain)]

    def _is_data(self, v: Value, domain: str) -> bool:
        wanted = torch.bool if domain == "bool" else layout.dtype_of(self.dtype)
        return v.meta.dtype == wanted

    def _add_input(self, shape, dtype: str, domain: dict, *, mutable: bool, value_domain: str,
                   distinct_elements: bool = False) -> str:
        name = f"x{len(self.inputs)}"
        geometry = draw_geometry(self, shape, aliasing_ok=not (mutable or distinct_elements))
        classes = layout.layout_classes(shape, geometry["strides"], geometry["offset"],
                                        geometry["storage_size"], mutable)
        spec = {"name": name, "shape": shape, "dtype": dtype, "domain": domain,
                "layout": {"classes": classes, **geometry}, "mutated": mutable}
        self.inputs.append(spec)
        meta = torch.empty(geometry["storage_size"], dtype=layout.dtype_of(dtype), device="meta")
        meta = meta.as_strided(shape, geometry["strides"], geometry["offset"])
        self.values[name] = Value(meta, value_domain, frozenset({name}), is_input=True, mutable=mutable)
        return name

    # -- nodes -------------------------------------------------------------------------
    def add_node(self, spec) -> None:
        self._avoid = frozenset()
        args, attrs = spec.build(self)
        node_id = f"v{len(self.nodes)}"
        expr = spec.emit(list(args), attrs)
        metas = {name: v.meta for name, v in self.values.items()}
        result = eval_expression(expr, {"torch": torch, **metas})
        self.nodes.append({"id": node_id, "op": spec.name, "args": list(args), "attrs": attrs})
        self.consumed.update(args)
        self._avoid = frozenset()
        self._record_result(spec, node_id, args, result)

    def _record_result(self, spec, node_id, args, result) -> None:
        first = self.values[args[0]] if args else None
        domain = spec.result_domain
        if domain == "same":
            domain = first.domain
        if domain == "index" or result.dtype == torch.int64 and self.dtype != "int64":
            domain = "index"
        aliases = frozenset()
        if spec.mutates:
            aliases = frozenset({args[0]})
            self.consumed.add(node_id)
        elif spec.name in VIEW_OPS:
            aliases = first.aliases
        strides_known = spec.name not in META_STRIDES_DIFFER and all(self.values[a].strides_known for a in args
                                                                     if a in self.values)
        self.values[node_id] = Value(result, domain, aliases, strides_known=strides_known)

    def case(self, seed: int, special: bool) -> Case:
        outputs = [n["id"] for n in self.nodes if n["id"] not in self.consumed]
        values = {"seed": seed, "special": special}
        tails = [t for t in (self.value_tail, "odd_sizes" if self.odd_sizes else None) if t]
        if tails:
            values["tails"] = tails
        return Case(dtype=self.dtype, inputs=self.inputs, nodes=self.nodes, outputs=outputs,
                    values=values, schema=SCHEMA)


def draw_geometry(b: GraphBuilder, shape, *, aliasing_ok: bool) -> dict:
    """Strides, storage offset and storage size for a new input of `shape`.

    aliasing_ok=False (written inputs, indices that must stay distinct) excludes
    broadcast and overlapping layouts.
    """
    rank = len(shape)
    options = [c for c in b.layout_classes if c not in ("inout", "contiguous")]
    if not aliasing_ok:
        options = [c for c in options if c not in ("broadcast", "overlapping")]
    if rank != 4:
        options = [c for c in options if c != "channels_last"]
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


def _overlapping_strides(b: GraphBuilder, shape, strides) -> list:
    wide = [d for d in range(len(shape) - 1) if shape[d] > 1 and strides[d] > 1]
    if not wide:
        return strides
    d = b.draw_choice(wide)
    strides = list(strides)
    strides[d] = max(1, strides[d] // b.draw_int(2, 4))
    return strides


# -- the public strategy -------------------------------------------------------------------
def _check_arguments(dtype, min_nodes, max_nodes, ops, families, max_numel, layouts) -> list:
    if dtype not in FLOAT_DTYPES + INT_DTYPES:
        raise InvalidArgument(f"dtype={dtype!r} is not supported; use one of {FLOAT_DTYPES + INT_DTYPES}")
    if not (isinstance(min_nodes, int) and isinstance(max_nodes, int) and 1 <= min_nodes <= max_nodes):
        raise InvalidArgument(f"min_nodes={min_nodes!r}, max_nodes={max_nodes!r}: need 1 <= min_nodes <= max_nodes")
    if max_numel < 1:
        raise InvalidArgument(f"max_numel={max_numel!r} must be at least 1")
    unknown = sorted(set(families or ()) - set(FAMILIES))
    if unknown:
        raise InvalidArgument(f"families={unknown!r} unknown; choose from {FAMILIES}")
    unknown = sorted(set(ops or ()) - set(all_ops()))
    if unknown:
        raise InvalidArgument(f"ops={unknown!r} are not registered; see `torchsim-diff ops`")
    unknown = sorted(set(layouts or ()) - set(layout.LAYOUT_CLASSES))
    if unknown:
        raise InvalidArgument(f"layouts={unknown!r} unknown; choose from {layout.LAYOUT_CLASSES}")
    chosen = ops_in(families, ops, dtype)
    if not chosen:
        raise InvalidArgument(f"no registered op supports dtype={dtype!r} with families={families!r}, ops={ops!r}")
    return chosen


def cases(*, dtype: str = "float32", min_nodes: int = 1, max_nodes: int = 8, ops=None,
          families=None, special_values: bool = False, max_numel: int = MAX_NUMEL,
          layouts=None) -> st.SearchStrategy:
    """Strategy for `Case` objects.

    dtype: the data dtype ("float32" by default; "float16", "bfloat16", "int32", "int64").
    min_nodes/max_nodes: graph size (1-8 by default: small graphs shrink and read well).
    ops/families: restrict which ops appear (names from the op registry / FAMILIES).
    special_values: also put NaN, +-Inf, -0.0, subnormals and large magnitudes in inputs.
    max_numel: element budget per tensor (4096 keeps interpreter routes fast).
    layouts: layout classes new inputs may take (all by default).
    """
    chosen = _check_arguments(dtype, min_nodes, max_nodes, ops, families, max_numel, layouts)
    classes = tuple(layouts or layout.LAYOUT_CLASSES)
    schedule = CoverageSchedule(chosen)
    tails = VALUE_TAILS if dtype in FLOAT_DTYPES else ()

    @st.composite
    def _cases(draw_raw):
        drawn = []

        def draw(strategy):
            value = draw_raw(strategy)
            drawn.append(value)
            return value

        seed = draw(st.integers(0, 2**31 - 1))
        value_tail, odd_sizes = _tails(seed, tails)
        builder = GraphBuilder(draw, dtype=dtype, max_numel=max_numel, layout_classes=classes,
                               value_tail=value_tail, odd_sizes=odd_sizes)
        # The largest of three draws: graphs of several nodes are common (every op needs its
        # share of nodes), and each draw still shrinks towards min_nodes.
        nodes = max(draw(st.integers(min_nodes, max_nodes)) for _ in range(3))
        for _ in range(nodes):
            draw(st.integers(0, 2**32 - 1))
            builder.add_node(schedule.op_for(repr(drawn), builder.nodes))
        case = builder.case(seed=seed, special=special_values)
        schedule.record(case)
        return case

    return _cases()


def _tails(seed: int, value_tails) -> tuple:
    """(value tail or None, odd sizes?) for a case: a per-case switch taken from the seed,
    so that the shares hold whatever Hypothesis prefers, and seed 0 (where shrinking
    goes) is an ordinary case."""
    rng = random.Random(seed)
    tail = rng.choice(value_tails) if value_tails and rng.random() < VALUE_TAIL_PERCENT / 100 else None
    return tail, rng.random() < SIZE_TAIL_PERCENT / 100


class CoverageSchedule:
    """Coverage-guided op choice, in place of `sampled_from` (whose pull towards the first
    op made relu a fifth of all nodes and left a dozen ops undrawn).

    A node is keyed by everything its case drew before it (seed, earlier nodes' operands
    and attributes) plus a ticket of its own. A key seen for the first time gets the op
    drawn least so far in this strategy's life (ties broken by the key), or, for one key
    in RANDOM_SHARE, any op, so that ops still meet at random. Counts grow once per
    distinct case. Hypothesis repeats small and recent choices often (a bare ticket
    repeated for 60% of nodes); whole prefixes repeat far less, so rare ops catch up.

    A key keeps its op, so replaying a drawn case (Hypothesis's final replay of a failure,
    a shrink step that drops trailing nodes) builds the same graph; a shrink step that
    changes an earlier draw re-keys the nodes after it, so multi-node shrinking is coarser
    than with fixed op choices (`torchsim-diff reduce` works on the case JSON instead).
    Keys live as long as the strategy: a case is reproduced from its JSON, not from the
    example database.
    """

    RANDOM_SHARE = 0.05

    def __init__(self, ops):
        self.ops = list(ops)
        self.counts = collections.Counter()
        self._ops_by_ticket: dict = {}
        self._cases: set = set()

    def op_for(self, ticket: str, nodes=()):
        """The op for a node keyed by `ticket`, after `nodes` of its case."""
        if ticket not in self._ops_by_ticket:
            rng = random.Random(ticket)
            if rng.random() < self.RANDOM_SHARE:
                op = rng.choice(self.ops)
            else:
                pending = collections.Counter(node["op"] for node in nodes)
                op = min(self.ops, key=lambda o: (self.counts[o.name] + pending[o.name], rng.random()))
            self._ops_by_ticket[ticket] = op
        return self._ops_by_ticket[ticket]

    def record(self, case) -> None:
        """Count the ops of a finished case, once per distinct case: Hypothesis draws
        some cases again, and a campaign runs each once."""
        if case.case_id not in self._cases:
            self._cases.add(case.case_id)
            self.counts.update(node["op"] for node in case.nodes)


@contextlib.contextmanager
def no_local_constants():
    """Hypothesis mixes literals mined from every local module imported so far into its draws,
    so one seed gave other cases in an actor than in the driver, or after a shard had imported
    more of torchsim-diff. Campaigns, shards and benchmarks draw inside this context, without
    them (Hypothesis's own constants stay), so that a seed alone decides the cases."""
    try:
        from hypothesis.internal.conjecture import providers
        original, empty = providers._get_local_constants, providers.Constants()
    except (ImportError, AttributeError):      # another Hypothesis: draws as it does
        yield
        return
    providers._get_local_constants = lambda: empty
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()
