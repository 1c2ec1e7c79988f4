"""One validator for case JSON from outside (files, corpora, bucket histories): every field's
type, each node against its OpSpec, value domains, storage bounds and a size cap, checked
before anything is built, so a bad case is one line that names the field, never a traceback
or a compiler "finding".

    >>> case = validate_case(json.loads(text))      # raises InvalidCase naming the bad field

Attributes are checked against the op's declared signature (`ops.attrs`) before any
program text is written; arity and shapes by the op itself: the emitted call must run on
meta tensors of the input layouts (the same rule the generator infers shapes by).

Size limits keep a case a compiler test rather than a resource test: inputs, nodes, rank,
elements per storage and per view, and the bytes of every input view and every node result
together (broadcast views count at their full size, since ops materialise them). The byte
cap defaults to a sixteenth of this machine's memory (eager, float64 and the route each hold
a copy) and is set with TORCHSIM_DIFF_MAX_CASE_BYTES.
"""
from __future__ import annotations

import binascii
import dataclasses
import keyword
import os

from torchsim_diff.case import layout, values
from torchsim_diff.case.graph import RESULT, SCHEMA, Case, CaseError
from torchsim_diff.ops import UnknownOp, get_op
from torchsim_diff.ops.attrs import INT_LIMIT, check_attrs
from torchsim_diff.case.program_check import ProgramRejected, eval_expression

# Largest storage one input may have. Generated cases stay far below; 2^24 elements is
# 64 MiB of float32, beyond which a "case" is a resource test, not a compiler test.
MAX_STORAGE_ELEMENTS = 2**24
MAX_RANK = 8
MAX_SEED = 2**63
MAX_CASE_BYTES_ENV = "TORCHSIM_DIFF_MAX_CASE_BYTES"


@dataclasses.dataclass(frozen=True)
class Limits:
    """How large a case may be (see the module docstring)."""

    inputs: int = 256
    nodes: int = 512
    rank: int = MAX_RANK
    view_elements: int = 2**28
    case_bytes: int = 2**30

    @classmethod
    def for_this_machine(cls) -> "Limits":
        """Defaults, with the byte cap from TORCHSIM_DIFF_MAX_CASE_BYTES or this machine's memory."""
        chosen = os.environ.get(MAX_CASE_BYTES_ENV)
        if chosen is not None:
            if not chosen.isdigit() or int(chosen) < 1:
                raise InvalidCase(f"{MAX_CASE_BYTES_ENV}={chosen!r} must be a positive number of bytes")
            return cls(case_bytes=int(chosen))
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            return cls()
        return cls(case_bytes=max(memory // 16, 2**26))
DOMAINS = tuple(values.FLOAT_RANGES) + ("index", "unique_index", "bool")


class InvalidCase(CaseError):
    """A case that cannot be run as given; the message names the field and the problem."""


def validate_case(data, *, max_elements: int = MAX_STORAGE_ELEMENTS, limits: Limits | None = None) -> Case:
    """The Case `data` describes, or InvalidCase with the first reason it cannot be one."""
    limits = limits or Limits.for_this_machine()
    _need(isinstance(data, dict), f"a case is a JSON object, got {type(data).__name__}")
    _check_top(data)
    _need(len(data["inputs"]) <= limits.inputs, f"the case has {len(data['inputs'])} inputs, over the limit of "
                                                f"{limits.inputs}")
    _need(len(data["nodes"]) <= limits.nodes, f"the case has {len(data['nodes'])} nodes, over the limit of "
                                              f"{limits.nodes}")
    names: dict = {}
    for position, spec in enumerate(data["inputs"]):
        _check_input(spec, f"inputs[{position}]", max_elements)
        _need(spec["name"] not in names, f"inputs[{position}]: name {spec['name']!r} is used twice")
        names[spec["name"]] = spec
    for position, node in enumerate(data["nodes"]):
        _check_node(node, f"nodes[{position}]", names)
        names[node["id"]] = node
    for position, ref in enumerate(data["outputs"]):
        _need(isinstance(ref, str) and ref in names, f"outputs[{position}]={ref!r} names no input or node")
    meta_results(data, limits)
    try:
        return Case.from_dict(data)
    except CaseError as exc:
        raise InvalidCase(str(exc)) from None


# -- fields ---------------------------------------------------------------------------------
def _need(cond: bool, message: str) -> None:
    if not cond:
        raise InvalidCase(message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value) -> bool:
    return isinstance(value, list) and all(_is_int(v) and 0 <= v <= INT_LIMIT for v in value)


def _check_top(data: dict) -> None:
    for key in ("schema", "dtype", "inputs", "nodes", "outputs"):
        _need(key in data, f"case is missing the field {key!r}")
    _need(data["schema"] == SCHEMA and _is_int(data["schema"]),
          f"schema={data['schema']!r} is not supported; this version reads schema {SCHEMA}")
    _need(isinstance(data["dtype"], str) and data["dtype"] in layout.DTYPES,
          f"dtype={data['dtype']!r} is not one of {sorted(layout.DTYPES)}")
    for key in ("inputs", "nodes", "outputs"):
        _need(isinstance(data[key], list), f"{key} must be a list, got {type(data[key]).__name__}")
    vals = data.get("values", {"seed": 0})
    _need(isinstance(vals, dict), f"values must be an object, got {type(vals).__name__}")
    seed = vals.get("seed", 0)
    _need(_is_int(seed) and 0 <= seed < MAX_SEED, f"values.seed={seed!r} must be an integer in [0, 2**63)")
    _need(isinstance(vals.get("special", False), bool), f"values.special={vals.get('special')!r} must be true or false")


def _check_name(name, where: str) -> None:
    _need(isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)
          and name not in ("torch", RESULT), f"{where}: name {name!r} is not a usable identifier")


def _check_input(spec, where: str, max_elements: int) -> None:
    _need(isinstance(spec, dict), f"{where} must be an object, got {type(spec).__name__}")
    for key in ("name", "shape", "dtype", "layout"):
        _need(key in spec, f"{where} is missing the field {key!r}")
    _check_name(spec["name"], where)
    shape = spec["shape"]
    _need(_int_list(shape) and len(shape) <= MAX_RANK,
          f"{where}.shape={shape!r} must be a list of at most {MAX_RANK} non-negative integers")
    _need(isinstance(spec["dtype"], str) and spec["dtype"] in layout.DTYPES,
          f"{where}.dtype={spec['dtype']!r} is not one of {sorted(layout.DTYPES)}")
    _need(isinstance(spec.get("mutated", False), bool),
          f"{where}.mutated={spec.get('mutated')!r} must be true or false")
    _check_layout(spec, where, max_elements)
    _check_domain(spec, where)
    if "data" in spec:
        _check_data(spec, where)


def _check_layout(spec: dict, where: str, max_elements: int) -> None:
    lay, shape = spec["layout"], spec["shape"]
    _need(isinstance(lay, dict), f"{where}.layout must be an object with strides, offset and storage_size")
    for key in ("strides", "offset", "storage_size"):
        _need(key in lay, f"{where}.layout is missing the field {key!r}")
    strides, offset, size = lay["strides"], lay["offset"], lay["storage_size"]
    _need(_int_list(strides) and len(strides) == len(shape),
          f"{where}.layout.strides={strides!r} must hold one non-negative integer per dimension of {shape}")
    _need(_is_int(offset) and offset >= 0, f"{where}.layout.offset={offset!r} must be a non-negative integer")
    _need(_is_int(size) and size >= 0, f"{where}.layout.storage_size={size!r} must be a non-negative integer")
    _need(size <= max_elements, f"{where}.layout.storage_size={size} is over the cap of {max_elements} elements "
                                f"per storage; shrink the case (or raise max_elements)")
    need = offset + layout.span(shape, strides)
    _need(size >= need, f"{where}.layout: storage_size={size} is smaller than offset + span = {need}")
    classes = lay.get("classes", [])
    _need(isinstance(classes, list) and all(c in layout.LAYOUT_CLASSES for c in classes),
          f"{where}.layout.classes={classes!r}: each must be one of {', '.join(layout.LAYOUT_CLASSES)}")


def _check_domain(spec: dict, where: str) -> None:
    domain = spec.get("domain", {"kind": "real"})
    _need(isinstance(domain, dict) and domain.get("kind") in DOMAINS,
          f"{where}.domain={domain!r}: kind must be one of {', '.join(DOMAINS)}")
    _check_plant(domain, where)
    if domain["kind"] not in ("index", "unique_index"):
        return
    high = domain.get("high")
    _need(_is_int(high) and high >= 1, f"{where}.domain.high={high!r} must be an integer of at least 1")
    if domain["kind"] == "unique_index" and spec["shape"]:
        dim = domain.get("dim", 0)
        _need(_is_int(dim) and 0 <= dim < len(spec["shape"]),
              f"{where}.domain.dim={dim!r} must name one of the {len(spec['shape'])} dimensions")
        _need(high >= spec["shape"][dim],
              f"{where}.domain: high={high} is too small for {spec['shape'][dim]} distinct indices along dim {dim}")


def _check_plant(domain: dict, where: str) -> None:
    """Planted edge values (values.plant): known classes or numbers; an index keeps its range,
    so it may only repeat one of its own elements (and a unique index not even that)."""
    plants = domain.get("plant", [])
    _need(isinstance(plants, list) and all(p in values.PLANTS or (isinstance(p, (int, float)) and not isinstance(p, bool))
                                           for p in plants),
          f"{where}.domain.plant={plants!r}: each must be a number or one of {', '.join(values.PLANTS)}")
    if domain["kind"] in ("index", "unique_index"):
        allowed = [] if domain["kind"] == "unique_index" else ["duplicate"]
        _need(all(p in allowed for p in plants),
              f"{where}.domain.plant={plants!r}: a {domain['kind']} input may plant only {allowed}")


def _check_data(spec: dict, where: str) -> None:
    _need(isinstance(spec["data"], str), f"{where}.data must be base64 text, got {type(spec['data']).__name__}")
    try:
        values.decode(spec["data"], layout.dtype_of(spec["dtype"]), spec["layout"]["storage_size"])
    except (ValueError, binascii.Error) as exc:
        raise InvalidCase(f"{where}.data: {exc}") from None


def _check_node(node, where: str, names: dict) -> None:
    _need(isinstance(node, dict), f"{where} must be an object, got {type(node).__name__}")
    for key in ("id", "op", "args"):
        _need(key in node, f"{where} is missing the field {key!r}")
    _check_name(node["id"], where)
    _need(node["id"] not in names, f"{where}: id {node['id']!r} is already defined")
    _need(isinstance(node["op"], str), f"{where}.op={node['op']!r} must be an op name (see `torchsim-diff ops`)")
    try:
        get_op(node["op"])
    except UnknownOp as exc:
        raise InvalidCase(f"{where}: {exc}") from None
    args = node["args"]
    _need(isinstance(args, list) and all(isinstance(a, str) for a in args),
          f"{where}.args={args!r} must be a list of input or node names")
    for ref in args:
        _need(ref in names, f"{where}: argument {ref!r} is not defined before this node")
    attrs = node.get("attrs", {})
    _need(isinstance(attrs, dict), f"{where}.attrs must be an object")
    wrong = check_attrs(get_op(node["op"]).signature, attrs)
    _need(wrong is None, f"{where} ({node['op']}): {wrong}")


# -- arity and attributes: the op's own code on meta tensors --------------------------------
def meta_results(data: dict, limits: Limits | None = None) -> dict:
    """Meta tensors of every input and node of case `data` (InvalidCase when one is refused)."""
    import torch
    limits = limits or Limits.for_this_machine()
    env = {}
    total = _Bytes(limits)
    for position, spec in enumerate(data["inputs"]):
        lay = spec["layout"]
        storage = torch.empty(lay["storage_size"], dtype=layout.dtype_of(spec["dtype"]), device="meta")
        total.add(f"inputs[{position}]", spec["shape"], storage.element_size())
        env[spec["name"]] = storage.as_strided(spec["shape"], lay["strides"], lay["offset"])
    for position, node in enumerate(data["nodes"]):
        where = f"nodes[{position}] ({node['op']})"
        try:
            expr = get_op(node["op"]).emit(list(node["args"]), node.get("attrs", {}))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise InvalidCase(f"{where}: attrs={node.get('attrs', {})!r} do not fit the op "
                              f"({type(exc).__name__}: {exc})") from None
        try:
            env[node["id"]] = eval_expression(expr, {"torch": torch, **env})
        except ProgramRejected as exc:
            raise InvalidCase(f"{where}: its program text is refused: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - torch rejects the call: wrong arity, attribute or shape
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise InvalidCase(f"{where}: torch rejects `{expr}` for these inputs ({type(exc).__name__}: "
                              f"{first[:300]})") from None
        for result in _tensors(env[node["id"]]):
            total.add(where, list(result.shape), result.element_size())
    return env


def _tensors(value) -> list:
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    return [v for v in value if isinstance(v, torch.Tensor)] if isinstance(value, (tuple, list)) else []


class _Bytes:
    """The running total of a case's tensor bytes, checked against its limits as it grows."""

    def __init__(self, limits: Limits):
        self.limits, self.total = limits, 0

    def add(self, where: str, shape: list, itemsize: int) -> None:
        _need(len(shape) <= 2 * self.limits.rank, f"{where}: rank {len(shape)} is over the limit of "
                                                  f"{2 * self.limits.rank}")
        elements = 1
        for size in shape:
            elements *= size
        _need(elements <= self.limits.view_elements,
              f"{where}: {elements} elements (shape {list(shape)}) is over the limit of "
              f"{self.limits.view_elements} per tensor; shrink the case")
        self.total += elements * itemsize
        _need(self.total <= self.limits.case_bytes,
              f"{where}: the case's tensors reach {self.total} bytes, over the limit of {self.limits.case_bytes} "
              f"(set {MAX_CASE_BYTES_ENV} to change it)")
