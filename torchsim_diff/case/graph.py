"""Cases: an op graph, its input layouts and values, and the dtype, as versioned JSON.

The JSON is the contract (docs/design.md, "Graph JSON"): the same JSON always builds the same
program and the same input values. `program_source()` is the one place a graph becomes
code; the worker, the reproducer and people all read the same text.

    >>> case = Case.from_json(text)          # raises CaseError with one clear line
    >>> print(case.program_source())
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import keyword

from torchsim_diff.case import layout
from torchsim_diff.ops import UnknownOp, get_op
from torchsim_diff.ops.attrs import check_attrs
from torchsim_diff.case.program_check import check_program, eval_expression

SCHEMA = 1
RESULT = "program"


class CaseError(ValueError):
    """A case JSON that does not describe a valid case (message names the field)."""


@dataclasses.dataclass
class Case:
    """One fuzz case. Fields mirror the JSON; see `from_dict` for what is checked."""

    dtype: str
    inputs: list
    nodes: list
    outputs: list
    values: dict
    schema: int = SCHEMA

    # -- JSON ----------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"schema": self.schema, "dtype": self.dtype, "inputs": copy.deepcopy(self.inputs),
                "nodes": copy.deepcopy(self.nodes), "outputs": list(self.outputs),
                "values": dict(self.values)}

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_json(cls, text: str) -> "Case":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CaseError(f"case is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
        except RecursionError:
            raise CaseError("case JSON is nested too deeply to be a case") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data) -> "Case":
        if not isinstance(data, dict):
            raise CaseError(f"case must be a JSON object, got {type(data).__name__}")
        _check_case(data)
        return cls(dtype=data["dtype"], inputs=data["inputs"], nodes=data["nodes"],
                   outputs=data["outputs"], values=data.get("values", {"seed": 0}),
                   schema=data["schema"])

    # -- identity ------------------------------------------------------------------
    @property
    def graph_hash(self) -> str:
        """Hash of the program and input layouts (not values): equal graphs compile equally."""
        inputs = [{k: v for k, v in i.items() if k != "data"} for i in self.inputs]
        return _digest([self.dtype, inputs, self.nodes, self.outputs])[:12]

    @property
    def case_id(self) -> str:
        """Hash of everything, values included."""
        return _digest(self.to_dict())[:16]

    # -- summaries for records and tables ----------------------------------------------
    @property
    def ops(self) -> list:
        return sorted({n["op"] for n in self.nodes})

    @property
    def layouts(self) -> list:
        return sorted({c for i in self.inputs for c in i["layout"]["classes"]})

    @property
    def dtypes(self) -> list:
        return sorted({i["dtype"] for i in self.inputs} | {self.dtype})

    @property
    def mutated(self) -> list:
        return [i["name"] for i in self.inputs if i.get("mutated")]

    def size(self) -> tuple:
        """(nodes, inputs, total input elements): what the reducer makes smaller."""
        return case_size({"inputs": self.inputs, "nodes": self.nodes})

    # -- code ----------------------------------------------------------------------
    def eager_steps(self):
        """The program run node by node in eager, in the case dtype: (node, env) before each node
        runs, env holding the inputs as materialised and every earlier node's result (the last
        node's too once the walk ends). What a reader of each op's own operands walks."""
        import torch
        env = dict(zip((spec["name"] for spec in self.inputs), layout.materialize_all(self.to_dict())))
        for node in self.nodes:
            yield node, env
            expression = get_op(node["op"]).emit(list(node["args"]), node.get("attrs", {}))
            env[node["id"]] = eval_expression(expression, {"torch": torch, **env})

    def program_source(self) -> str:
        """Python source of `def program(<inputs>): ...` returning a tuple of outputs."""
        params = ", ".join(i["name"] for i in self.inputs)
        lines = ["import torch", "", "", f"def {RESULT}({params}):"]
        for node in self.nodes:
            spec = get_op(node["op"])
            lines.append(f"    {node['id']} = {spec.emit(list(node['args']), node.get('attrs', {}))}")
        outs = ", ".join(self.outputs)
        lines.append(f"    return ({outs}{',' if len(self.outputs) == 1 else ''})")
        source = "\n".join(lines) + "\n"
        check_program(source)       # a second line behind the attribute types: see program_check
        return source


def case_size(data: dict) -> tuple:
    """(nodes, inputs, total input elements) of a case dict, without validating it."""
    elements = 0
    for spec in data["inputs"]:
        n = 1
        for s in spec["shape"]:
            n *= s
        elements += n
    return len(data["nodes"]), len(data["inputs"]), elements


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


# -- validation ----------------------------------------------------------------------
def _need(cond: bool, message: str) -> None:
    if not cond:
        raise CaseError(message)


def _check_case(data: dict) -> None:
    for key in ("schema", "dtype", "inputs", "nodes", "outputs"):
        _need(key in data, f"case is missing the field {key!r}")
    _need(data["schema"] == SCHEMA, f"schema={data['schema']!r} is not supported; this version reads schema {SCHEMA}")
    _need(data["dtype"] in layout.DTYPES, f"dtype={data['dtype']!r} is not one of {sorted(layout.DTYPES)}")
    _need(isinstance(data["inputs"], list) and isinstance(data["nodes"], list)
          and isinstance(data["outputs"], list), "inputs, nodes and outputs must be lists")
    names = set()
    for position, spec in enumerate(data["inputs"]):
        _check_input(spec, position)
        _need(spec["name"] not in names, f"input name {spec['name']!r} is used twice")
        names.add(spec["name"])
    for position, node in enumerate(data["nodes"]):
        _check_node(node, position, names)
        names.add(node["id"])
    for ref in data["outputs"]:
        _need(ref in names, f"output {ref!r} names no input or node")
    values = data.get("values", {"seed": 0})
    _need(isinstance(values, dict) and isinstance(values.get("seed", 0), int),
          "values must be an object with an integer 'seed'")


def _check_name(name, where: str) -> None:
    _need(isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
          and name not in ("torch", RESULT), f"{where}: name {name!r} is not a usable identifier")


def _check_input(spec, position: int) -> None:
    where = f"inputs[{position}]"
    _need(isinstance(spec, dict), f"{where} must be an object")
    for key in ("name", "shape", "dtype", "layout"):
        _need(key in spec, f"{where} is missing the field {key!r}")
    _check_name(spec["name"], where)
    shape, lay = spec["shape"], spec["layout"]
    _need(isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape),
          f"{where}.shape={shape!r} must be a list of non-negative integers")
    _need(spec["dtype"] in layout.DTYPES, f"{where}.dtype={spec['dtype']!r} is not one of {sorted(layout.DTYPES)}")
    _need(isinstance(lay, dict) and all(k in lay for k in ("strides", "offset", "storage_size")),
          f"{where}.layout needs strides, offset and storage_size")
    strides = lay["strides"]
    _need(isinstance(strides, list) and len(strides) == len(shape)
          and all(isinstance(s, int) and s >= 0 for s in strides),
          f"{where}.layout.strides={strides!r} must hold one non-negative integer per dimension")
    need = lay["offset"] + layout.span(shape, strides)
    _need(isinstance(lay["offset"], int) and lay["offset"] >= 0 and isinstance(lay["storage_size"], int)
          and lay["storage_size"] >= need,
          f"{where}.layout: storage_size={lay['storage_size']!r} is smaller than offset + span = {need}")
    for cls in lay.get("classes", []):
        _need(cls in layout.LAYOUT_CLASSES, f"{where}.layout.classes: {cls!r} is not one of {layout.LAYOUT_CLASSES}")
    if spec.get("mutated"):
        _need(not layout.is_overlapping(shape, strides),
              f"{where}: a mutated input cannot have overlapping or broadcast (stride 0) elements")


def _check_node(node, position: int, names: set) -> None:
    where = f"nodes[{position}]"
    _need(isinstance(node, dict) and "id" in node and "op" in node and "args" in node,
          f"{where} needs id, op and args")
    _check_name(node["id"], where)
    _need(node["id"] not in names, f"{where}: id {node['id']!r} is already defined")
    _need(isinstance(node["op"], str), f"{where}.op={node['op']!r} must be an op name")
    try:
        spec = get_op(node["op"])
    except UnknownOp as exc:
        raise CaseError(f"{where}: {exc}") from None
    _need(isinstance(node["args"], list) and all(isinstance(a, str) for a in node["args"]),
          f"{where}.args={node['args']!r} must be a list of input or node names")
    for ref in node["args"]:
        _need(ref in names, f"{where}: argument {ref!r} is not defined before this node")
    attrs = node.get("attrs", {})
    _need(isinstance(attrs, dict), f"{where}.attrs must be an object")
    wrong = check_attrs(spec.signature, attrs)
    _need(wrong is None, f"{where} ({node['op']}): {wrong}")
