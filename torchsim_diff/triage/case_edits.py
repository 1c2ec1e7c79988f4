"""What every pass of the reducer edits a case with: a candidate from edited case data (None
when the edit broke the schema), validity (meta tensors, then eager), readability (dead nodes and
unused inputs dropped, names renumbered), the value domain each operand needs, and an input's
values read and written bit for bit (case/values.encode)."""
from __future__ import annotations

import torch

from torchsim_diff.case import layout, validate, values
from torchsim_diff.case.graph import Case, CaseError
from torchsim_diff.case.program_check import load_program
from torchsim_diff.ops import get_op

# Value domain an operand position needs (op name -> {position: domain}); others take "real".
OPERAND_DOMAINS = {
    "log": {0: "positive"}, "sqrt": {0: "positive"}, "rsqrt": {0: "positive"},
    "reciprocal": {0: "nonzero"}, "div": {1: "nonzero"}, "fmod": {1: "nonzero"},
    "pow": {0: "positive", 1: "small"},
}
# Stricter domains first: a domain on the left satisfies every requirement to its right.
DOMAIN_ORDER = ("positive", "nonzero", "small", "real")
SATISFIES = {"positive": {"positive", "nonzero", "real"}, "nonzero": {"nonzero", "real"},
             "small": {"small", "real"}, "real": {"real"}}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


# -- candidates --------------------------------------------------------------------------------
def _candidate(data: dict):
    """The candidate case, or None when the edit broke the schema (a mutated input overlapping...).
    The edge cells a node meant to meet (values.meant) go with the node."""
    meant = data.get("values", {}).get("meant")
    if meant:
        kept = {node["id"] for node in data["nodes"]}
        data["values"] = {**data["values"], "meant": [cell for cell in meant if cell[0] in kept]}
    try:
        return Case.from_dict(data)
    except CaseError:
        return None


# -- validity --------------------------------------------------------------------------------
def meta_results(case: Case) -> dict:
    """Meta tensors of every input and node of `case` (raises when the program is invalid)."""
    return validate.meta_results(case.to_dict())


def _is_valid(case: Case) -> bool:
    """The case passes the one validator (case.validate: fields, value domains, meta tensors)
    and runs in eager. The validator, not the schema alone: a shrunk shape can leave an index
    input more unique indices than its range holds, and duplicate indices make a write's
    winner the route's choice, a nondeterminism no compiler owes anyone."""
    try:
        validate.validate_case(case.to_dict())
        load_program(case.program_source())(*layout.materialize_all(case.to_dict()))
    except Exception:  # noqa: BLE001 - any rejection by torch makes the candidate invalid
        return False
    return True


# -- readability: drop what is dead, renumber the rest -------------------------------------
def _tidy(case: Case) -> Case | None:
    """`case` without dead nodes and unused inputs, renumbered x0.., v0.. (None if invalid)."""
    data = case.to_dict()
    live = _live_refs(data)
    data["nodes"] = [n for n in data["nodes"] if n["id"] in live]
    data["inputs"] = [i for i in data["inputs"] if i["name"] in live]
    renames = {spec["name"]: f"x{k}" for k, spec in enumerate(data["inputs"])}
    renames.update({node["id"]: f"v{k}" for k, node in enumerate(data["nodes"])})
    for spec in data["inputs"]:
        spec["name"] = renames[spec["name"]]
    for node in data["nodes"]:
        node["id"] = renames[node["id"]]
        node["args"] = [renames[a] for a in node["args"]]
    data["outputs"] = [renames[o] for o in data["outputs"]]
    return _candidate(data)


def _live_refs(data: dict) -> set:
    """Names an output or an in-place node (an effect) depends on."""
    live = set(data["outputs"])
    for node in reversed(data["nodes"]):
        if node["id"] in live or get_op(node["op"]).mutates:
            live.add(node["id"])
            live.update(node["args"])
    return live


def _replace_uses(data: dict, old: str, new: str) -> None:
    for node in data["nodes"]:
        node["args"] = [new if a == old else a for a in node["args"]]
    data["outputs"] = [new if o == old else o for o in data["outputs"]]


def _uses(data: dict, ref: str) -> list:
    """(node, argument position) pairs that read `ref`."""
    return [(n, k) for n in data["nodes"] for k, a in enumerate(n["args"]) if a == ref]



# -- an input's values ------------------------------------------------------------------------
def _materialize(case: Case, k: int) -> torch.Tensor:
    vals = case.values
    return layout.materialize(case.inputs[k], int(vals.get("seed", 0)), k, bool(vals.get("special", False)))


def _storage_and_cover(case: Case, k: int):
    """Input `k`'s storage and which of its elements the view covers."""
    spec = case.inputs[k]
    lay = spec["layout"]
    storage = layout.storage_of(_materialize(case, k))[: lay["storage_size"]].clone()
    return storage, layout.covered_mask(spec["shape"], lay["strides"], lay["offset"], lay["storage_size"])


def _with_covered(case: Case, k: int, storage: torch.Tensor, covered: torch.Tensor, new: torch.Tensor) -> Case:
    """`case` with input `k`'s covered storage elements set to `new` (explicit values, bit for bit)."""
    data = case.to_dict()
    storage = storage.clone()
    storage[covered] = new
    data["inputs"][k]["data"] = values.encode(storage)
    return _candidate(data)


def _with_values(case: Case, k: int, view: torch.Tensor) -> Case:
    data = case.to_dict()
    spec = data["inputs"][k]
    lay = spec["layout"]
    storage = torch.full((lay["storage_size"],), layout.guard_value(view.dtype), dtype=view.dtype)
    storage.as_strided(spec["shape"], lay["strides"], lay["offset"]).copy_(view)
    spec["data"] = values.encode(storage)
    return _candidate(data)
