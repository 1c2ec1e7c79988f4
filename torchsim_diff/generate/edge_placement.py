"""Edges at an op's own operands (#50): the GraphBuilder's part that places the edges a node
means to meet (ops.edges) where the op reads them: a value planted in the input that feeds the
operand, a layout or shape drawn again for it, a build redrawn until meta tensors show an argument
edge met; and counts which cells each node meets, for the edge schedule.

The methods keep their names and bodies as they were in GraphBuilder: the argument schedule names
its slots by op, method name and line within the method, so moving them changes no case.
"""
from __future__ import annotations

import dataclasses
import math
import pickle
import warnings

import torch

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import Case
from torchsim_diff.case.program_check import eval_expression
from torchsim_diff.generate.domains import FLOAT_DTYPES, INDEX_DOMAINS, SATISFIES, TAILED_KINDS
from torchsim_diff.generate.edge_reach import cells_met_by_node, declared_edges, operand_slots, operands_of
from torchsim_diff.generate.input_layouts import draw_geometry
from torchsim_diff.ops.attrs import NUMBER, check_attrs
from torchsim_diff.ops.edges import ArgValue, Form, Value as EdgeValue, is_cell, met

EDGE_SLOT = "case:edge node"      # the ArgumentSchedule's slot for "this node means edges"
# The campaign's edge share may run this far over the policy's while ops with cells left get more.
SHARE_SLACK = 1.25
LAYOUT_FORMS = {"stride 0": "broadcast", "permuted": "transposed", "non-contiguous": "sliced", "offset": "offset"}
SHAPE_FORMS = ("0-d", "one element", "size-1 dim")
DTYPE_FORMS = ("int64", "int32", "float16", "float32")
REPLACING_FORMS = frozenset({"scalar", *DTYPE_FORMS})
# Value classes that fill the whole operand: no other value of that operand can be met beside them.
WHOLE_OPERAND_CLASSES = frozenset({"all true", "all false"})


class EdgePlacement:
    """Mixed into GraphBuilder (generate.strategies): its edge-placing half."""

    # -- edges at the op's own operands -------------------------------------------
    def _edges_meant(self, spec) -> tuple:
        """The edges this node means to meet at its own operands: none for most nodes; for the
        policy's edge share of nodes (scheduled, so the share holds), edges_per_node of the op's
        cells, each the one meant least so far (the schedule's rule): every cell of every op
        comes up within a campaign; then, for an operand one of them plants a value in, more of
        that operand's value cells (plants_per_operand). (edges, how many were scheduled first)."""
        if self.arguments is None:
            return [], 0
        edges = {edge.label: edge for edge in declared_edges(spec) if self._edge_is_cell(edge)}
        if not edges:
            return [], 0
        slot = f"{spec.name}:edge"
        self.arguments.offer(slot, list(edges))
        share = self._edge_share(slot)
        if not self._choose(EDGE_SLOT, [False, True], [100 - share, share]):
            return [], 0
        chosen: list = []

        def open_cells(labels):
            return [label for label in labels if label not in chosen
                    and not any(_conflict(edges[label], edges[c]) for c in chosen)]
        for _ in range(min(self.policy.edges_per_node, len(edges))):
            if open_cells(edges):
                chosen.append(self._choose(slot, open_cells(edges)))
        primary = len(chosen)
        for operand in sorted({edges[label].operand for label in chosen if isinstance(edges[label], EdgeValue)}):
            more = [label for label, edge in edges.items() if isinstance(edge, EdgeValue) and edge.operand == operand]
            while open_cells(more) and sum(1 for label in chosen if label in more) < min(self.policy.plants_per_operand,
                                                                                   len(more)):
                chosen.append(self._choose(slot, open_cells(more)))
        return [edges[label] for label in chosen], primary

    def _edge_share(self, slot: str) -> int:
        """The percent of this op's nodes that mean edges: the policy's share where it is none or
        all. Else about none once each of the op's cells was met; for an op with cells left, the
        policy's share, raised (up to twice) while the campaign's edge nodes are fewer than
        SHARE_SLACK times the policy's share of its nodes: the edge nodes go where cells are left,
        and their share stays about the policy's."""
        share = self.policy.edge_percent
        if share in (0, 100):
            return share
        if not self.arguments.slot_unmet(slot):
            return 1
        edge_nodes, plain_nodes = (self.arguments.counts[(EDGE_SLOT, repr(flag))] for flag in (True, False))
        if 100 * edge_nodes >= SHARE_SLACK * share * (edge_nodes + plain_nodes):
            return share
        unmet, named = self.arguments.unmet_share(":edge")
        return min(99, 2 * share, round(share * named / max(unmet, 1)))

    def _count_cells_met(self, spec, args, attrs, meant) -> None:
        """Count, as drawn in the op's edge slot, the cells this node meets on meta tensors (forms,
        arguments, shapes) and the values it planted, so that the cells meant next are those no
        node has met yet."""
        if self.arguments is None:
            return
        metas = {name: v.meta for name, v in self.values.items()}
        try:
            operands = operands_of({"op": spec.name, "args": list(args), "attrs": attrs}, metas)
        except Exception:  # noqa: BLE001 - judged in eager later; nothing to count here
            return
        cells = {edge.label for edge in meant if isinstance(edge, EdgeValue)}
        cells |= {edge.label for edge in declared_edges(spec)
                  if self._edge_is_cell(edge) and not isinstance(edge, EdgeValue) and _met_on_meta(edge, operands, attrs)}
        slot = f"{spec.name}:edge"
        for label in sorted(cells):
            self.choices.append((slot, label, f"{slot}|met {label}|{len(self.nodes)}|{self.history!r}"))

    def _edge_is_cell(self, edge) -> bool:
        """As the edge census counts: no float-only value class in an integer case, and the reverse."""
        return is_cell(edge, self.dtype)

    def _build(self, spec, edges):
        """(args, attrs, labels of the values planted) of the op's build, with `edges` placed: the first build is scheduled,
        later ones (up to the policy's edge_tries) draw freely until one meets every edge; the
        build that placed most is kept. Each build is a plain build, valid by construction; a
        placement that would make the node invalid is dropped."""
        if not edges:
            return (*spec.build(self), set())
        start, best = self._snapshot(), None
        for attempt in range(self.policy.edge_tries):
            if attempt:
                self._restore(start)
            self._free = attempt > 0
            args, attrs = spec.build(self)
            args, attrs, placed, planted = self._place(spec, edges, list(args), dict(attrs), len(start[0]))
            if placed is not None and (best is None or placed > best[0]):
                best = (placed, self._snapshot(), args, attrs, planted)
            if placed == len(edges):
                break
        self._free = False
        if best is None:
            self._restore(start)
            return (*spec.build(self), set())
        self._restore(best[1])
        return best[2], best[3], best[4]

    def _snapshot(self) -> tuple:
        return (_copied(self.inputs), dict(self.values), set(self.consumed), list(self.choices))

    def _restore(self, snapshot) -> None:
        inputs, by_name, consumed, choices = snapshot
        self.inputs, self.values = _copied(inputs), dict(by_name)
        self.consumed, self.choices = set(consumed), list(choices)
        self._avoid = frozenset()

    def _place(self, spec, edges, args, attrs, inputs_before: int):
        """Put `edges` at the node's own operands: plant a value in the input that feeds the op
        (a new input in place of a value from the graph), draw an operand's layout again, or
        check on meta tensors that the build's arguments, shapes and forms meet the edge.
        (args, attrs, edges placed, labels of the values planted); placed None when the node would
        not run."""
        fresh = {fed_input["name"] for fed_input in self.inputs[inputs_before:]}
        planted = set()
        # A Python number or an operand of another dtype takes the operand's place first, so that a
        # value planted for that operand lands in what the op reads.
        for edge in sorted(edges, key=lambda e: not (isinstance(e, Form) and e.form in REPLACING_FORMS)):
            if isinstance(edge, EdgeValue):
                if self._plant(spec, edge, args, attrs):
                    planted.add(edge.label)
            elif isinstance(edge, Form) and edge.form in LAYOUT_FORMS:
                self._relayout(spec, edge, args, attrs, fresh)
            elif isinstance(edge, Form) and edge.form in SHAPE_FORMS:
                self._reshape(spec, edge, args, attrs)
            elif isinstance(edge, Form) and edge.form in DTYPE_FORMS:
                self._retype(spec, edge, args, attrs)
            elif isinstance(edge, Form) and edge.form == "scalar":
                self._to_number(spec, edge, args, attrs)
            elif isinstance(edge, ArgValue):
                self._set_argument(spec, edge, args, attrs)
        metas = {name: v.meta for name, v in self.values.items()}
        try:
            eval_expression(spec.emit(list(args), attrs), {"torch": torch, **metas})
            operands = operands_of({"op": spec.name, "args": args, "attrs": attrs}, metas)
        except Exception:  # noqa: BLE001 - a placement the op refuses: this build is not kept
            return args, attrs, None, set()
        placed = len(planted) + sum(_met_on_meta(edge, operands, attrs) for edge in edges
                                    if not isinstance(edge, EdgeValue))
        return args, attrs, placed, planted

    def _operand_slot(self, args, attrs, position: int):
        """("arg", j) or ("scalar", None) for operand `position` of the torch call, in the order
        edge_reach reads operands; None past the last."""
        slots = operand_slots({"args": args, "attrs": attrs})
        return slots[position] if position < len(slots) else None

    def _plant(self, spec, edge, args, attrs) -> bool:
        slot = self._operand_slot(args, attrs, edge.operand)
        if slot is None:
            return False
        if slot[0] == "scalar":
            return self._plant_scalar(edge.value, attrs)
        name = self._feeding_input(spec, args, slot[1], fresh=None)
        if name is None:
            return False
        fed_input = next(i for i in self.inputs if i["name"] == name)
        domain, dtype = fed_input["domain"], layout.dtype_of(fed_input["dtype"])
        if domain["kind"] in INDEX_DOMAINS and not (domain["kind"] == "index" and edge.value == "duplicate"):
            return False
        if not values.plantable(edge.value, dtype) or not _stays_in_domain(edge.value, domain["kind"], dtype):
            return False
        distinct = math.prod(n for n, stride in zip(fed_input["shape"], fed_input["layout"]["strides"]) if stride)
        if len(domain.get("plant", [])) >= distinct:
            return False            # each plant needs a memory element of its own
        fed_input["domain"] = {**domain, "plant": [*domain.get("plant", []), edge.value]}
        return True

    def _plant_scalar(self, value, attrs) -> bool:
        """A Python number in the call: the class's value judged as eager judges a number (float64,
        int64), of the number's own type; only finite ones (the program writes it as a literal),
        and no integer 0 (an integer division by it raises); and one a case file may hold (an
        int64 minimum is no number attribute: ops.attrs.NUMBER)."""
        old = attrs["scalar"]
        is_int = isinstance(old, int) and not isinstance(old, bool)
        dtype = torch.int64 if is_int else torch.float64
        if not values.plantable(value, dtype):
            return False
        number = values.plant_value(value, dtype)
        if not math.isfinite(number) or (is_int and (not float(number).is_integer() or number == 0)):
            return False
        number = int(number) if is_int else float(number)
        if not NUMBER.accepts(number):
            return False
        attrs["scalar"] = number
        return True

    def _feeding_input(self, spec, args, j: int, fresh) -> str | None:
        """The input that feeds operand `args[j]` directly: itself when it is an input (and, when
        `fresh` is given, one this build made and uses once), else a new input of its shape, dtype
        and domain in its place; None for a written operand or an index made by the graph."""
        name = args[j]
        value = self.values[name]
        own = value.is_input and (fresh is None or (name in fresh and args.count(name) == 1))
        if own:
            return name
        if spec.mutates and j == 0 or value.domain in INDEX_DOMAINS or value.domain not in SATISFIES:
            return None
        self._depth += 1
        try:
            dtype = layout.dtype_name(value.meta.dtype)
            tail = dtype in FLOAT_DTYPES and value.domain in TAILED_KINDS
            args[j] = self._add_input(list(value.meta.shape), dtype, self._domain(value.domain, tail),
                                      mutable=False, value_domain=value.domain)
        finally:
            self._depth -= 1
        return args[j]

    def _reshape(self, spec, edge, args, attrs) -> None:
        """A new input of the form's shape (0-d, all ones, one dim of 1) in place of operand
        `edge.operand`, kept only where the op still runs with it (broadcasting takes most)."""
        j = self._replaceable_operand(spec, args, attrs, edge.operand)
        if j is None:
            return
        shape = list(self.values[args[j]].meta.shape)
        wide = [d for d, n in enumerate(shape) if n > 1]
        new_shape = {"0-d": [], "one element": [1] * max(len(shape), 1),
                     "size-1 dim": [1 if wide and d == wide[-1] else n for d, n in enumerate(shape)] or [1]}[edge.form]
        if new_shape != shape:
            self._replace_operand(spec, args, attrs, j, new_shape, layout.dtype_name(self.values[args[j]].meta.dtype))

    def _retype(self, spec, edge, args, attrs) -> None:
        """A new input of the form's dtype (an integer operand of a float op, a float16 one) in place
        of operand `edge.operand`, kept only where the op still runs with it (type promotion)."""
        j = self._replaceable_operand(spec, args, attrs, edge.operand)
        if j is not None and layout.dtype_name(self.values[args[j]].meta.dtype) != edge.form:
            self._replace_operand(spec, args, attrs, j, list(self.values[args[j]].meta.shape), edge.form)

    def _replaceable_operand(self, spec, args, attrs, position: int) -> int | None:
        """The argument index of operand `position` where a new input may take its place: not a
        Python number, not the written operand, not an index."""
        slot = self._operand_slot(args, attrs, position)
        if slot is None or slot[0] == "scalar" or (spec.mutates and slot[1] == 0):
            return None
        value = self.values[args[slot[1]]]
        return None if value.domain in INDEX_DOMAINS or value.domain not in SATISFIES else slot[1]

    def _replace_operand(self, spec, args, attrs, j: int, shape: list, dtype: str) -> None:
        """args[j] becomes a new input of `shape` and `dtype` in the old one's value domain, or stays
        as it was where the op refuses it in eager."""
        value = self.values[args[j]]
        inputs, by_name, old = list(self.inputs), dict(self.values), args[j]
        self._depth += 1
        try:
            tail = dtype in FLOAT_DTYPES and value.domain in TAILED_KINDS
            args[j] = self._add_input(shape, dtype, self._domain(value.domain, tail), mutable=False,
                                      value_domain=value.domain)
        finally:
            self._depth -= 1
        if not self._runs_in_eager(spec, args, attrs):
            self.inputs, self.values, args[j] = inputs, by_name, old

    def _to_number(self, spec, edge, args, attrs) -> None:
        """A Python number in place of operand `edge.operand`, on the side of the call the op's
        signature takes one (`scalar`, `scalar_side`), kept only where the op runs with it."""
        j = self._replaceable_operand(spec, args, attrs, edge.operand)
        if j is None or "scalar" in attrs or "scalar" not in spec.signature:
            return
        from torchsim_diff.ops.pointwise import SCALARS     # the registry is loaded by now (edge_reach)
        numbers = [n for n in SCALARS.get(self.values[args[j]].domain, ()) if isinstance(n, int) or spec.dtypes != "int"]
        if not numbers:
            return
        rest = args[:j] + args[j + 1:]
        for side in ("right", "left"):
            trial = {**attrs, "scalar": self.draw_choice(numbers), "scalar_side": side}
            if (check_attrs(spec.signature, trial) is None
                    and self._operand_slot(rest, trial, edge.operand) == ("scalar", None)
                    and self._runs_in_eager(spec, rest, trial)):
                args[:] = rest
                attrs.update(trial)
                return

    def _set_argument(self, spec, edge, args, attrs) -> None:
        """The argument at the edge's value, kept only where the op's signature takes it and the
        op runs with it (an align_corners left for a mode that takes none is refused)."""
        trial = {**attrs, edge.attr: edge.value}
        if attrs.get(edge.attr) != edge.value and check_attrs(spec.signature, trial) is None \
                and self._runs_in_eager(spec, args, trial):
            attrs[edge.attr] = edge.value

    def _runs_in_eager(self, spec, args, attrs) -> bool:
        """Whether the node runs in eager on tensors of its operands' shapes and strides (ones, an
        index 0): meta kernels take some calls eager refuses (argsort of a 0-d tensor along dim 1)."""
        env = {}
        for name in set(args):
            value = self.values[name]
            meta = value.meta
            fill = 0 if value.domain in INDEX_DOMAINS else 1
            env[name] = torch.empty_strided(meta.shape, meta.stride(), dtype=meta.dtype).fill_(fill)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                eval_expression(spec.emit(list(args), attrs), {"torch": torch, **env})
        except Exception:  # noqa: BLE001 - the op refuses these operands
            return False
        return True

    def _relayout(self, spec, edge, args, attrs, fresh) -> None:
        """Draw the layout of the input feeding operand `edge.operand` again, in the form's layout class."""
        slot = self._operand_slot(args, attrs, edge.operand)
        if slot is None or slot[0] == "scalar":
            return
        name = self._feeding_input(spec, args, slot[1], fresh=fresh)
        if name is None:
            return
        fed_input = next(i for i in self.inputs if i["name"] == name)
        aliasing_ok = not (fed_input["mutated"] or _domain_kind(fed_input) == "unique_index")
        primary = LAYOUT_FORMS[edge.form]
        if not aliasing_ok and primary in ("broadcast", "overlapping"):
            return
        shape = list(fed_input["shape"])
        self._depth += 1
        try:
            geometry = draw_geometry(self, shape, aliasing_ok=aliasing_ok, primary=primary)
        finally:
            self._depth -= 1
        classes = layout.layout_classes(shape, geometry["strides"], geometry["offset"], geometry["storage_size"],
                                        fed_input["mutated"])
        fed_input["layout"] = {"classes": classes, **geometry}
        old = self.values[name]
        meta = torch.empty(geometry["storage_size"], dtype=old.meta.dtype, device="meta")
        self.values[name] = dataclasses.replace(old, meta=meta.as_strided(shape, geometry["strides"],
                                                                          geometry["offset"]))


def _conflict(edge, other) -> bool:
    """Whether two edges cannot be met at one node: an operand takes one form at a time (a layout,
    a shape, a Python number or a dtype), and a value class filling the whole operand leaves no
    element for another value."""
    if isinstance(edge, Form) and isinstance(other, Form):
        return edge.operand == other.operand
    if isinstance(edge, EdgeValue) and isinstance(other, EdgeValue):
        return edge.operand == other.operand and bool({edge.value, other.value} & WHOLE_OPERAND_CLASSES)
    return False


def _stays_in_domain(plant, kind: str, dtype: torch.dtype) -> bool:
    """Whether an integer input keeps its domain with `plant` in it (an integer division by 0, or
    an integer to a negative power, raises in eager); a float input takes any value."""
    if dtype.is_floating_point or dtype == torch.bool or kind in ("real", "small"):
        return True
    number = values.plant_value(plant, dtype) if isinstance(plant, str) and plant not in ("duplicate",) else plant
    if plant == "duplicate":
        return True
    return number > 0 if kind == "positive" else number != 0


def _met_on_meta(edge, operands, attrs) -> bool:
    """`met` on meta operands: a condition that reads values cannot be judged there and counts as unmet."""
    try:
        return bool(met(edge, operands, attrs))
    except Exception:  # noqa: BLE001 - meta tensors hold no values
        return False


def cells_reached(case: Case, tickets: list) -> list:
    """The (op, edge) cells each node of `case` met at its own operands, run in eager
    (edge_reach), as choices of the op's edge slot: the schedule means next the cells no case has
    reached yet, values included, which meta tensors cannot tell. Keyed by the node's ticket, so a
    node Hypothesis repeats in many cases counts once."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            by_node = cells_met_by_node(case)
    except Exception:  # noqa: BLE001 - the eager self-check reports a case eager refuses
        return []
    choices = []
    for node, ticket in zip(case.nodes, tickets):
        slot = f"{node['op']}:edge"
        choices += [(slot, label, f"{slot}|reached {label}|{node['id']}|{ticket}")
                    for label in sorted(by_node.get(node["id"], ()))]
    return choices


def _domain_kind(spec: dict) -> str:
    """The value domain's kind of an input spec."""
    domain = spec["domain"]
    return domain["kind"]


def _copied(inputs: list) -> list:
    """A deep copy of the builder's input records (plain data: a pickle round trip is several
    times faster than copy.deepcopy, and a build may be tried edge_tries times per node)."""
    return pickle.loads(pickle.dumps(inputs, pickle.HIGHEST_PROTOCOL))
