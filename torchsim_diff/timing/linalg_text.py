"""The linalg ops of a lowered module, read from its text (the `kernel.linalg.mlir` that routes
`mlir` and `spike` keep per case): just what a TOG needs, not an MLIR parser.

Read per op: its name, its `ins`/`outs` operands with their tensor types, its indexing maps
and iterator types (`linalg.generic`; named ops get theirs from `NAMED_OPS`), and the values it
defines. Read per module: the entry function's arguments and the values it returns, which are
the graph's input and result buffers. Anything the text does not spell as expected raises
`Unreadable` naming the line.
"""
from __future__ import annotations

import dataclasses
import math
import re

ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "i1": 1, "ui8": 1}
PARALLEL, REDUCTION = "parallel", "reduction"

_MAP_DEFINITION = re.compile(r"^#(\w+) = affine_map<\(([^)]*)\) -> \(([^)]*)\)>", re.M)
_INLINE_MAP = re.compile(r"affine_map<\(([^)]*)\) -> \(([^)]*)\)>")
_TENSOR = re.compile(r"tensor<([^>]*)>")
_FUNCTION = re.compile(r"func\.func @\w+\((.*?)\)\s*(?:->|\{)")
_ARGUMENT = re.compile(r"(%\w+): (tensor<[^>]*>)")
_RETURN = re.compile(r"^\s*(?:func\.)?return (.*?) :", re.M)
_OP = re.compile(r"^\s*(%[\w#:]+) = (linalg\.\w+) (.*)$", re.M)
_OPERANDS = re.compile(r"\b(ins|outs)\(([^:)]*):([^)]*)\)")
_INDEXING_MAPS = re.compile(r"indexing_maps = \[([^\]]*)\]")
_ITERATORS = re.compile(r"iterator_types = \[([^\]]*)\]")
_PERMUTATION = re.compile(r"permutation = \[([^\]]*)\]")
_EMPTY = re.compile(r"^\s*(%\w+) = tensor\.empty\(\)", re.M)


class Unreadable(ValueError):
    """Linalg text this reader does not understand; the message names what and where."""


@dataclasses.dataclass(frozen=True)
class TensorType:
    shape: tuple
    element: str

    @classmethod
    def parse(cls, text: str) -> "TensorType":
        match = _TENSOR.fullmatch(text.strip())
        if match is None:
            raise Unreadable(f"not a tensor type: {text.strip()!r}")
        *dims, element = match.group(1).split("x") if "x" in match.group(1) else ("", match.group(1))
        if element not in ELEMENT_BYTES:
            raise Unreadable(f"element type {element!r} of {text.strip()!r} has no known size")
        if any(not d.isdigit() for d in dims if d):
            raise Unreadable(f"dynamic or odd dims in {text.strip()!r}")
        return cls(tuple(int(d) for d in dims if d), element)

    @property
    def element_bytes(self) -> int:
        return ELEMENT_BYTES[self.element]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.element_bytes

    def strides(self) -> tuple:
        """Row-major element strides (the routes pass contiguous buffers)."""
        strides, running = [], 1
        for size in reversed(self.shape):
            strides.insert(0, running)
            running *= max(size, 1)
        return tuple(strides)


@dataclasses.dataclass(frozen=True)
class Operand:
    value: str                  # the SSA value, e.g. "%arg0" or "%2"
    type: TensorType
    indexing: tuple             # one affine expression (text) per dim, over d0..dN of the op


@dataclasses.dataclass(frozen=True)
class LinalgOp:
    name: str                   # e.g. "linalg.generic", "linalg.matmul"
    inputs: tuple               # tensor operands of `ins` (scalars such as a fill value dropped)
    outputs: tuple              # operands of `outs`
    results: tuple              # the SSA values it defines, one per output
    iterators: tuple            # "parallel" or "reduction" per loop dim

    def domain(self) -> tuple:
        """The iteration domain: each loop dim's size, from the operands indexed by it plainly."""
        sizes = {}
        for operand in self.inputs + self.outputs:
            for expression, size in zip(operand.indexing, operand.type.shape):
                if re.fullmatch(r"d\d+", expression):
                    sizes.setdefault(int(expression[1:]), size)
        missing = [d for d in range(len(self.iterators)) if d not in sizes]
        if missing:
            raise Unreadable(f"{self.name}: loop dims {missing} index no operand plainly")
        return tuple(sizes[d] for d in range(len(self.iterators)))

    def points(self) -> int:
        return math.prod(self.domain())


@dataclasses.dataclass(frozen=True)
class Module:
    arguments: tuple            # (SSA value, TensorType) of the entry function, in order
    returned: tuple             # SSA values it returns, in order
    ops: tuple                  # LinalgOp, in program order
    empties: frozenset          # values made by tensor.empty (outputs never read)
    types: dict                 # SSA value -> TensorType, for every tensor value seen


def parse_module(text: str) -> Module:
    maps = {name: _expressions(results) for name, _dims, results in _MAP_DEFINITION.findall(text)}
    function = _FUNCTION.search(text)
    if function is None:
        raise Unreadable("no func.func in the module")
    arguments = tuple((value, TensorType.parse(kind)) for value, kind in _ARGUMENT.findall(function.group(1)))
    returns = _RETURN.findall(text)
    returned = tuple(v.strip() for v in returns[-1].split(",")) if returns else ()
    ops = tuple(_op(match, maps) for match in _OP.finditer(text) if "outs(" in match.group(3))
    types = dict(arguments)
    for op in ops:
        types.update({o.value: o.type for o in op.inputs + op.outputs})
        types.update({r: o.type for r, o in zip(op.results, op.outputs)})
    return Module(arguments, returned, ops, frozenset(_EMPTY.findall(text)), types)


def _op(match: re.Match, maps: dict) -> LinalgOp:
    defined, name, rest = match.groups()
    groups = {kind: _operands(values, kinds) for kind, values, kinds in _OPERANDS.findall(rest)}
    ins, outs = groups.get("ins", ()), groups.get("outs", ())
    if not outs:
        raise Unreadable(f"{name}: no tensor outs in {match.group(0).strip()[:120]!r}")
    indexing, iterators = _indexing(name, rest, ins, outs, maps)
    if len(indexing) != len(ins) + len(outs):
        raise Unreadable(f"{name}: {len(indexing)} indexing maps for {len(ins) + len(outs)} tensor operands")
    inputs = tuple(Operand(v, t, m) for (v, t), m in zip(ins, indexing))
    outputs = tuple(Operand(v, t, m) for (v, t), m in zip(outs, indexing[len(ins):]))
    return LinalgOp(name, inputs, outputs, _results(defined, len(outs)), iterators)


def _operands(values: str, kinds: str) -> tuple:
    """(value, TensorType) of each tensor operand; scalar operands (f32, i64) are dropped."""
    pairs = zip((v.strip() for v in values.split(",")), _split_types(kinds))
    return tuple((value, TensorType.parse(kind)) for value, kind in pairs if kind.startswith("tensor<"))


def _split_types(kinds: str) -> list:
    return [k.strip() for k in re.split(r",(?![^<]*>)", kinds)]


def _results(defined: str, count: int) -> tuple:
    """`%5` -> ("%5",); `%5:2` -> ("%5#0", "%5#1")."""
    if ":" not in defined:
        return (defined,)
    base = defined.split(":")[0]
    return tuple(f"{base}#{i}" for i in range(count))


def _indexing(name: str, rest: str, ins: tuple, outs: tuple, maps: dict) -> tuple:
    """(indexing expressions per operand, iterator types) of an op."""
    if name == "linalg.generic":
        return _generic_indexing(rest, maps)
    ranks = [len(t.shape) for _, t in ins + outs]
    if name in NAMED_OPS:
        return NAMED_OPS[name](ranks, rest)
    raise Unreadable(f"{name}: a named op without known indexing (add it to NAMED_OPS)")


def _generic_indexing(rest: str, maps: dict) -> tuple:
    listed, iterators = _INDEXING_MAPS.search(rest), _ITERATORS.search(rest)
    if listed is None or iterators is None:
        raise Unreadable("linalg.generic without indexing_maps or iterator_types on its line")
    indexing = []
    for entry in re.split(r",(?![^<]*>)", listed.group(1)):
        entry = entry.strip()
        inline = _INLINE_MAP.fullmatch(entry)
        if inline:
            indexing.append(_expressions(inline.group(2)))
        elif entry.startswith("#") and entry[1:] in maps:
            indexing.append(maps[entry[1:]])
        else:
            raise Unreadable(f"indexing map {entry!r} is neither defined nor inline")
    kinds = tuple(k.strip().strip('"') for k in iterators.group(1).split(",") if k.strip())
    return tuple(indexing), kinds


def _expressions(results: str) -> tuple:
    return tuple(r.strip() for r in results.split(",") if r.strip())


def _identity(rank: int) -> tuple:
    return tuple(f"d{i}" for i in range(rank))


def _fill(ranks: list, rest: str) -> tuple:
    return (_identity(ranks[-1]),), (PARALLEL,) * ranks[-1]


def _elementwise(ranks: list, rest: str) -> tuple:
    return tuple(_identity(r) for r in ranks), (PARALLEL,) * ranks[-1]


def _matmul(ranks: list, rest: str) -> tuple:
    return (("d0", "d2"), ("d2", "d1"), ("d0", "d1")), (PARALLEL, PARALLEL, REDUCTION)


def _batch_matmul(ranks: list, rest: str) -> tuple:
    return ((("d0", "d1", "d3"), ("d0", "d3", "d2"), ("d0", "d1", "d2")),
            (PARALLEL, PARALLEL, PARALLEL, REDUCTION))


def _transpose(ranks: list, rest: str) -> tuple:
    """Over the output's dims: output dim i is input dim permutation[i]."""
    found = _PERMUTATION.search(rest)
    if found is None:
        raise Unreadable("linalg.transpose without a permutation")
    permutation = [int(p) for p in found.group(1).split(",")]
    source = [0] * len(permutation)
    for out_dim, in_dim in enumerate(permutation):
        source[in_dim] = out_dim
    return (tuple(f"d{d}" for d in source), _identity(len(permutation))), (PARALLEL,) * len(permutation)


NAMED_OPS = {"linalg.fill": _fill, "linalg.copy": _elementwise, "linalg.matmul": _matmul,
             "linalg.batch_matmul": _batch_matmul, "linalg.transpose": _transpose}
