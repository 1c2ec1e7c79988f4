"""Hypothesis strategies for cases: small op graphs, valid by construction.

    >>> from torchsim_diff.generate.strategies import cases
    >>> @given(case=cases(dtype="float16", max_nodes=4))
    ... def test_something(case): ...

Every draw goes through Hypothesis, so shrinking works on the graph itself: fewer nodes,
smaller shapes, simpler layouts (contiguous first), ordinary values and sizes. Ops are
picked by a coverage schedule (`CoverageSchedule`) so that every op gets its share; a
per-case switch puts a minority of cases in a value tail (`values.TAIL_DOMAINS`) or the size
tail (`ODD_SIZES`), and outside them the fresh inputs of each node take a value class
(ordinary or a tail) scheduled per op, so that every op meets every class.
Operands are picked from values already in the graph or made as new inputs; each new
input gets a layout drawn from the layout classes and lives in guarded storage. Result
shapes come from running the emitted code on meta tensors, so no shape rule is written
twice.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import sys

import torch
from hypothesis import strategies as st

from torchsim_diff.case import layout
from torchsim_diff.case.graph import SCHEMA, Case
from torchsim_diff.case.values import SPECIAL_TAIL, TAIL_DOMAINS
from torchsim_diff.ops import FAMILIES, all_ops, ops_in
from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.generate.domains import FLOAT_DTYPES, INT_DTYPES, SATISFIES, TAILED_KINDS  # noqa: F401 - read here by callers
from torchsim_diff.generate.edge_placement import EdgePlacement, cells_reached
from torchsim_diff.generate.input_layouts import draw_geometry
from torchsim_diff.generate.policy import DEFAULT, GenPolicy, InvalidPolicy, active_policy
from torchsim_diff.generate.schedules import ArgumentSchedule, CoverageSchedule
from torchsim_diff.generate.switches import InvalidSwitch, special_mode, switches

# The knobs are the generation policy's (generate.policy); these names are its defaults.
SIZES, ODD_SIZES, MAX_NUMEL = DEFAULT.sizes, DEFAULT.odd_sizes, DEFAULT.max_numel
SPECIAL_SLOT = "case:special values"     # the ArgumentSchedule's slot for the per-case switch
VALUE_TAILS = tuple(TAIL_DOMAINS)
# A case-wide value tail is never the special one: the `special` switch covers whole cases.
CASE_TAILS = tuple(t for t in VALUE_TAILS if t != SPECIAL_TAIL)
# An op's fresh float inputs take a value class: ordinary values or a value tail. Ordinary
# weighs the policy's ordinary_weight tails in the schedule: an op's first draw is ordinary, its
# next ones go round the tails.
ORDINARY = "ordinary"
# Operand forms an edge node makes by drawing the operand's layout again (draw_geometry's class).
# Operand forms an edge node makes with a new input of another shape, where the op takes it.
# A value domain satisfies a requirement when it is a subset of it.
VIEW_OPS = {"transpose", "permute", "reshape", "view", "slice", "narrow", "expand", "unsqueeze",
            "squeeze", "contiguous", "select"}


class InvalidArgument(TypeError):
    """A strategy argument a user got wrong (named, with its value and the fix)."""


# Ops whose meta kernel lays out its result otherwise than eager on CPU (torch 2.13): float
# floor_divide of a channels-last operand broadcast against another is contiguous on meta,
# channels-last in eager, so `.view` of what follows raises in eager. Found by the
# false-positive benchmark (seed 2); group_norm of a channels-last input likewise (eager
# self-check, 2000 cases). tests/test_strategies.py checks the list is still needed.
META_STRIDES_DIFFER = frozenset({"floor_divide", "group_norm"})


@dataclasses.dataclass
class Value:
    """A tensor in the graph under construction."""

    meta: torch.Tensor
    domain: str
    aliases: frozenset          # input names whose memory this value may share
    is_input: bool = False
    mutable: bool = False
    strides_known: bool = True  # meta's strides are eager's (see META_STRIDES_DIFFER)


def _operand(method):
    """Draws made while picking or making an operand belong to the operand (its shape,
    layout, which earlier value), not to the op's arguments: they are not scheduled."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        self._depth += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._depth -= 1
    return wrapper


class GraphBuilder(EdgePlacement):
    """What an op's `build` uses to draw operands and attributes.

    arguments, history: with an ArgumentSchedule, the choices an op's build makes at its own
    level (draw_bool, draw_int over a short range, draw_choice) take the schedule's option,
    keyed by `history` (everything the case drew so far); `choices` lists them for the
    schedule's counts."""

    SCHEDULED_INT_RANGE = 32     # draw_int over more values than this stays Hypothesis's
    INT_RANGE_GOAL = 3           # distinct values a scheduled draw_int needs to meet (the argument census's goal)

    def __init__(self, draw, *, dtype: str, max_numel: int, layout_classes, value_tail=None,
                 odd_sizes: bool = False, arguments: ArgumentSchedule | None = None, history: list | None = None,
                 special_class: bool = True, policy: GenPolicy = DEFAULT):
        self.draw, self.dtype, self.max_numel = draw, dtype, max_numel
        self.policy = policy
        self.meant: list = []        # [node id, edge label] for each cell a node means to meet
        self._free = False           # an edge node's later builds draw freely (no schedule)
        self.special_class = special_class
        self.layout_classes = layout_classes
        self.value_tail, self.odd_sizes = value_tail, odd_sizes
        self.arguments, self.history = arguments, history
        self.inputs: list = []
        self.nodes: list = []
        self.values: dict = {}
        self.consumed: set = set()
        self.choices: list = []
        self._avoid: frozenset = frozenset()
        self._op: str | None = None
        self._depth = 0

    # -- primitive draws -------------------------------------------------------------
    def draw_bool(self, p: float = 0.5) -> bool:
        if self._scheduling():
            return self._scheduled([False, True], [1.0 - p, p])
        return self.draw(st.integers(0, 99)) < int(p * 100)

    def draw_int(self, lo: int, hi: int) -> int:
        hi = max(lo, hi)
        if self._scheduling() and hi - lo < self.SCHEDULED_INT_RANGE:
            return self._scheduled(list(range(lo, hi + 1)), goal=self.INT_RANGE_GOAL)
        return self.draw(st.integers(lo, hi))

    def draw_choice(self, options):
        if self._scheduling():
            return self._scheduled(list(options))
        return self.draw(st.sampled_from(list(options)))

    def _scheduling(self) -> bool:
        return self.arguments is not None and self._op is not None and self._depth == 0 and not self._free

    def _scheduled(self, options: list, weights=None, goal: int | None = None):
        """The schedule's pick among `options` (those of positive weight) for this op's next slot."""
        caller = sys._getframe(2)         # the line of the op's build (or builder helper) that chose
        # Named by the function and the line within it, not the module's line: a line added
        # elsewhere in the module (an edge declared in a register call) leaves the slot as it is.
        code = caller.f_code
        return self._choose(f"{self._op}@{code.co_name}+{caller.f_lineno - code.co_firstlineno}",
                            options, weights, goal)

    def _choose(self, slot: str, options: list, weights=None, goal: int | None = None):
        if weights is not None:
            options, weights = zip(*[(o, w) for o, w in zip(options, weights) if w > 0])
        # No draw of its own: Hypothesis caps its early cases at five times the choices of
        # the simplest one, and a ticket per choice made most cases of several nodes overrun.
        key = f"{slot}|{len(self.choices)}|{self.history!r}"
        pending = collections.Counter((c[0], repr(c[1])) for c in self.choices if c[0] == slot)
        option = self.arguments.choose(slot, key, options, weights, pending, goal)
        self.choices.append((slot, option, key))
        return option

    def fits(self, numel: int) -> bool:
        return numel <= self.max_numel

    @_operand
    def draw_size(self, scale: int = 1) -> int:
        """A dimension size such that `scale * size` stays within the element budget."""
        sizes = self.policy.odd_sizes if self.odd_sizes and self.draw_bool(0.7) else self.policy.sizes
        allowed = [s for s in sizes if s * max(scale, 1) <= self.max_numel]
        allowed = allowed or [s for s in self.policy.sizes if s * max(scale, 1) <= self.max_numel] or [1]
        return self.draw_choice(allowed)

    @_operand
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

    def draw_dim(self, rank: int) -> int:
        """A dim of a rank-`rank` tensor, written from the end (-1 for the last) one time in four."""
        dim = self.draw_int(0, rank - 1)
        return dim - rank if self.draw_bool(0.25) else dim

    def reduction_dims(self, rank: int):
        """A sorted list of distinct dims (one, several or all, some written from the end:
        -1 for the last), or None for a full reduction."""
        if rank == 0 or self.draw_bool(0.15):
            return None
        dims = [d for d in range(rank) if self.draw_bool()] or [self.draw_int(0, rank - 1)]
        return sorted(d - rank if self.draw_bool(0.25) else d for d in dims)

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
    @_operand
    def value(self, domain: str = "real", *, min_rank: int = 0, max_rank: int = 4,
              exact_rank: int | None = None) -> str:
        """An existing value in `domain` and rank range, or a new input."""
        if exact_rank is not None:
            min_rank = max_rank = exact_rank
        self._offer_value_classes(domain)
        found = self._candidates(domain, lambda m: min_rank <= m.dim() <= max_rank)
        if found and self._from_graph(domain):
            return self.draw_choice(found)
        return self.new_input(self.draw_shape(min_rank, max_rank), domain)

    def _from_graph(self, domain: str) -> bool:
        """Whether an operand comes from the graph (four times in five) or is a new input,
        scheduled per op and domain where the op's value classes are: an op whose operands
        always came from the graph would never meet a value class of its own."""
        if not self._classes_scheduled(domain):
            return self.draw_bool(0.8)
        return self._choose(f"{self._op}:{domain} operand", ["graph", "new input"], [0.8, 0.2]) == "graph"

    def view_source(self, *, min_rank: int = 0, max_rank: int = 4) -> str:
        """The operand of a view op: half the time a value that is itself a view,
        when the graph has one (a view of a view), else any value (`value`)."""
        made_by = {node["id"]: node["op"] for node in self.nodes}
        views = [name for name in self._candidates("real", lambda m: min_rank <= m.dim() <= max_rank)
                 if made_by.get(name) in VIEW_OPS]
        if views and self.draw_bool(0.5):
            return self._pick(views)
        return self.value(min_rank=min_rank, max_rank=max_rank)

    @_operand
    def _pick(self, names: list) -> str:
        return self.draw_choice(names)

    @_operand
    def value_of_shape(self, shape, domain: str = "real") -> str:
        shape = list(shape)
        self._offer_value_classes(domain)
        found = self._candidates(domain, lambda m: list(m.shape) == shape)
        if found and self.draw_bool(0.5):
            return self.draw_choice(found)
        return self.new_input(shape, domain)

    @_operand
    def broadcastable_to(self, shape, domain: str = "real") -> str:
        """A value whose shape broadcasts to `shape` without growing it."""
        shape = list(shape)
        if self.draw_bool(0.5):
            return self.value_of_shape(shape, domain)
        drop = self.draw_int(0, len(shape))
        kept = [1 if self.draw_bool(0.4) else s for s in shape[drop:]]
        return self.value_of_shape(kept, domain)

    def broadcasting_to(self, shape, domain: str = "real") -> str:
        """A value of another shape that broadcasts to `shape`: fewer dims, size-1 dims, or
        both (0-d only where `shape` has a single dim; `shape` itself where it is 0-d)."""
        shape = list(shape)
        if not shape:
            return self.value_of_shape(shape, domain)
        drop = self.draw_int(0, len(shape) - 1)
        kept = [1 if self.draw_bool(0.4) else s for s in shape[drop:]]
        if kept == shape:
            wide = [d for d, s in enumerate(shape) if s > 1]
            kept = [1 if d == wide[0] else s for d, s in enumerate(shape)] if wide else shape[1:]
        return self.value_of_shape(kept, domain)

    @_operand
    def index_input(self, shape, *, high: int, unique: bool = False, dim: int = 0) -> str:
        """A new int64 input with values in [0, high) (distinct along `dim` when unique)."""
        domain = {"kind": "unique_index", "high": high, "dim": dim} if unique else {"kind": "index", "high": high}
        return self._add_input(list(shape), "int64", domain, mutable=False, value_domain="index",
                               distinct_elements=unique)

    @_operand
    def new_input(self, shape, domain: str = "real", dtype: str | None = None, tail: bool = True) -> str:
        """A new input; `dtype` other than the case's makes a mixed-dtype operand;
        tail=False keeps it out of the case's value tail."""
        dtype = dtype or ("bool" if domain == "bool" else self.dtype)
        tail = tail and dtype in FLOAT_DTYPES          # integer values have no tails (values.draw)
        return self._add_input(list(shape), dtype, self._domain(domain, tail), mutable=False, value_domain=domain)

    def _domain(self, kind: str, tail: bool = True) -> dict:
        """The value domain of a new input: with the case's value tail when it has one, else
        with a value class scheduled for the op drawing it."""
        if not tail or kind not in TAILED_KINDS:
            return {"kind": kind}
        if self.value_tail:
            return {"kind": kind, "tail": self.value_tail}
        chosen = self._value_class(kind)
        return {"kind": kind} if chosen == ORDINARY else {"kind": kind, "tail": chosen}

    def _value_class(self, kind: str) -> str:
        """Ordinary values or one of the value tails `kind` admits, scheduled per op and
        kind: every op meets every class its operands admit within a campaign."""
        if not self._classes_scheduled(kind):
            return ORDINARY
        classes = self._value_classes(kind)
        return self._choose(f"{self._op}:{kind} values", classes,
                            [self.policy.ordinary_weight] + [1.0] * (len(classes) - 1))

    def _offer_value_classes(self, kind: str) -> None:
        """Make the op's value classes for `kind` known to the schedule, met or not: an op
        whose operands came from the graph, or from a case-wide tail, has met none of them."""
        if self._classes_scheduled(kind):
            self.arguments.offer(f"{self._op}:{kind} values", self._value_classes(kind))

    def _classes_scheduled(self, kind: str) -> bool:
        return (self._op is not None and self.arguments is not None and self.dtype in FLOAT_DTYPES
                and kind in TAILED_KINDS)

    def _value_classes(self, kind: str) -> list:
        return [ORDINARY] + [t for t in VALUE_TAILS
                             if kind in TAIL_DOMAINS[t] and (t != SPECIAL_TAIL or self.special_class)]

    def mutable_target(self, *, min_rank: int = 0, prefer_view: bool = False):
        """(input name, view attrs or None, written shape) for an in-place write."""
        name = self._target_input(min_rank)
        self._avoid = frozenset({name})
        view = self._draw_target_view(self.shape(name), min_rank) if (prefer_view or self.draw_bool(0.4)) else None
        meta = self.values[name].meta
        if view:
            from torchsim_diff.ops.inplace import target_expr
            meta = eval_expression(target_expr("t", view), {"t": meta})
        return name, view, list(meta.shape)

    @_operand
    def _target_input(self, min_rank: int) -> str:
        found = [n for n, v in self.values.items() if v.mutable and v.meta.dim() >= min_rank]
        if found and self.draw_bool(0.3):
            return self.draw_choice(found)
        return self._add_input(self.draw_shape(min_rank, 4), self.dtype, self._domain("real"),
                               mutable=True, value_domain="real")

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
        self._op = spec.name
        try:
            edges, primary = self._edges_meant(spec)
            args, attrs, planted = self._build(spec, edges)
            # The scheduled cells are meant whatever came of them; an extra value only where it was
            # planted (a 0-d operand holds one value).
            edges = edges[:primary] + [edge for edge in edges[primary:] if edge.label in planted]
        finally:
            self._op = None
            self._free = False
        node_id = f"v{len(self.nodes)}"
        self.meant.extend([node_id, edge.label] for edge in edges)
        self._count_cells_met(spec, args, attrs, edges)
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
        case_values = {"seed": seed, "special": special}
        drawn = {spec["domain"]["tail"] for spec in self.inputs if "tail" in spec["domain"]}
        tails = [t for t in VALUE_TAILS if t == self.value_tail or t in drawn] + ["odd_sizes"] * self.odd_sizes
        if tails:
            case_values["tails"] = tails
        if self.meant:
            case_values["meant"] = [list(cell) for cell in self.meant]
        return Case(dtype=self.dtype, inputs=self.inputs, nodes=self.nodes, outputs=outputs,
                    values=case_values, schema=SCHEMA)


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


def cases(*, dtype: str = "float32", min_nodes: int = 1, max_nodes: int | None = None, ops=None,
          families=None, special_values: str | bool = "mix", max_numel: int | None = None,
          layouts=None, policy: GenPolicy | None = None) -> st.SearchStrategy:
    """Strategy for `Case` objects.

    dtype: the data dtype ("float32" by default; "float16", "bfloat16", "int32", "int64").
    min_nodes/max_nodes: graph size (1 to the policy's graph_nodes by default; failures are reduced
        to a few nodes).
    ops/families: restrict which ops appear (names from the op registry / FAMILIES).
    special_values: NaN, +-Inf, -0.0, subnormals and large magnitudes in float inputs: "mix"
        (the policy's special_percent of float cases), "always" (True), "off" (False).
    max_numel: element budget per tensor (the policy's; 4096 keeps interpreter routes fast).
    layouts: layout classes new inputs may take (all by default).
    policy: every other knob (generate.policy); the active one (TORCHSIM_DIFF_POLICY) by default.
    """
    try:
        policy = policy or active_policy()
    except InvalidPolicy as exc:
        raise InvalidArgument(str(exc)) from None
    max_nodes = policy.graph_nodes if max_nodes is None else max_nodes
    max_numel = policy.max_numel if max_numel is None else max_numel
    chosen = _check_arguments(dtype, min_nodes, max_nodes, ops, families, max_numel, layouts)
    try:
        specials = special_mode(special_values)
    except InvalidSwitch as exc:
        raise InvalidArgument(str(exc)) from None
    classes = tuple(layouts or layout.LAYOUT_CLASSES)
    arguments = ArgumentSchedule(policy)
    schedule = CoverageSchedule(chosen, arguments, policy)
    tails = CASE_TAILS if dtype in FLOAT_DTYPES else ()
    seen: set = set()

    @st.composite
    def _cases(draw_raw):
        drawn = []

        def draw(strategy):
            value = draw_raw(strategy)
            drawn.append(value)
            return value

        seed = draw(st.integers(0, 2**31 - 1))
        value_tail, odd_sizes = switches(seed, tails, policy)
        builder = GraphBuilder(draw, dtype=dtype, max_numel=max_numel, layout_classes=classes,
                               value_tail=value_tail, odd_sizes=odd_sizes, arguments=arguments, history=drawn,
                               special_class=specials != "off", policy=policy)
        # The largest of three draws: graphs of several nodes are common (every op needs its
        # share of nodes), and each draw still shrinks towards min_nodes.
        nodes = max(draw(st.integers(min_nodes, max_nodes)) for _ in range(3))
        tickets = []
        for _ in range(nodes):
            draw(st.integers(0, 2**32 - 1))
            tickets.append(repr(drawn))
            builder.add_node(schedule.op_for(tickets[-1], builder.nodes))
        special = specials == "always" or (specials == "mix" and bool(tails) and arguments.choose(
            SPECIAL_SLOT, repr(drawn), [False, True], [100 - policy.special_percent, policy.special_percent]))
        builder.choices.append((SPECIAL_SLOT, special))
        case = builder.case(seed=seed, special=special)
        schedule.record(case, tickets)
        # A case Hypothesis draws again counts once; its cells are not run again.
        reached = cells_reached(case, tickets) if case.case_id not in seen else []
        seen.add(case.case_id)
        arguments.record(case, builder.choices + reached)
        return case

    return _cases()


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
