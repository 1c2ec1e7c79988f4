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
from torchsim_diff.generate.domains import FLOAT_DTYPES, INDEX_DOMAINS, INT_DTYPES, SATISFIES, TAILED_KINDS
from torchsim_diff.generate.edge_reach import cells_met_by_node, declared_edges, operand_slots, operands_of
from torchsim_diff.generate.input_layouts import draw_geometry
from torchsim_diff.ops.attrs import NUMBER
from torchsim_diff.ops.edges import FLOAT_ONLY_CLASSES, Form, Value as EdgeValue, met

EDGE_SLOT = "case:edge node"      # the ArgumentSchedule's slot for "this node means edges"
LAYOUT_FORMS = {"stride 0": "broadcast", "permuted": "transposed", "non-contiguous": "sliced", "offset": "offset"}
SHAPE_FORMS = ("0-d", "one element", "size-1 dim")


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
        share = self.policy.edge_percent
        if not self._choose(EDGE_SLOT, [False, True], [100 - share, share]):
            return [], 0
        chosen: list = []
        for _ in range(min(self.policy.edges_per_node, len(edges))):
            chosen.append(self._choose(slot, [label for label in edges if label not in chosen]))
        primary = len(chosen)
        for operand in sorted({edges[label].operand for label in chosen if isinstance(edges[label], EdgeValue)}):
            more = [label for label, edge in edges.items() if isinstance(edge, EdgeValue) and edge.operand == operand]
            while sum(1 for label in chosen if label in more) < min(self.policy.plants_per_operand, len(more)):
                chosen.append(self._choose(slot, [label for label in more if label not in chosen]))
        return [edges[label] for label in chosen], primary

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
        """Integer cases hold none of the float-only value classes (as the edge census counts)."""
        return not (self.dtype in INT_DTYPES and isinstance(edge, EdgeValue) and edge.value in FLOAT_ONLY_CLASSES)

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
        for edge in edges:
            if isinstance(edge, EdgeValue):
                if self._plant(spec, edge, args, attrs):
                    planted.add(edge.label)
            elif isinstance(edge, Form) and edge.form in LAYOUT_FORMS:
                self._relayout(spec, edge, args, attrs, fresh)
            elif isinstance(edge, Form) and edge.form in SHAPE_FORMS:
                self._reshape(spec, edge, args, attrs)
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
        slot = self._operand_slot(args, attrs, edge.operand)
        if slot is None or slot[0] == "scalar" or (spec.mutates and slot[1] == 0):
            return
        j = slot[1]
        value = self.values[args[j]]
        if value.domain in INDEX_DOMAINS or value.domain not in SATISFIES:
            return
        shape = list(value.meta.shape)
        wide = [d for d, n in enumerate(shape) if n > 1]
        new_shape = {"0-d": [], "one element": [1] * max(len(shape), 1),
                     "size-1 dim": [1 if wide and d == wide[-1] else n for d, n in enumerate(shape)] or [1]}[edge.form]
        if new_shape == shape:
            return
        inputs, by_name, old = list(self.inputs), dict(self.values), args[j]
        self._depth += 1
        try:
            dtype = layout.dtype_name(value.meta.dtype)
            tail = dtype in FLOAT_DTYPES and value.domain in TAILED_KINDS
            args[j] = self._add_input(new_shape, dtype, self._domain(value.domain, tail), mutable=False,
                                      value_domain=value.domain)
        finally:
            self._depth -= 1
        if not self._runs_in_eager(spec, args, attrs):
            self.inputs, self.values, args[j] = inputs, by_name, old

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
