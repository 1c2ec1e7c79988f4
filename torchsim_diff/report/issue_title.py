"""What a bug report calls a bug: the upstream it is filed with, its title, the program as an
expression of op calls, its first divergent op."""
from __future__ import annotations

import re

from torchsim_diff.case import layout
from torchsim_diff.case.graph import Case
from torchsim_diff.buckets.projects import PROJECTS, Project, project_named, route_facts
from torchsim_diff.results.kinds import Kind
from torchsim_diff.results.record import Record


class BundleError(ValueError):
    """A record that cannot be turned into a bundle (message names the field)."""


def project_of(record: Record) -> Project:
    """The upstream project: the record's `project`, else the one its `upstream` URL names,
    else the route's."""
    name = record.project
    upstream = record.upstream or ""
    if not name:
        name = next((p.name for p in PROJECTS.values() if re.search(rf"{re.escape(p.repo)}(?![\w-])", upstream)), None)
    name = name or route_facts(record.route).project
    project = project_named(name, record.route)
    if project is None:
        raise BundleError(f"project={name!r} is not one of {', '.join(PROJECTS)}")
    return project


# -- the title -------------------------------------------------------------------------------
LAYOUT_WORDS = {"transposed": "permuted", "sliced": "sliced", "broadcast": "expanded (stride-0)",
                "offset": "storage-offset", "channels_last": "channels-last", "overlapping": "self-overlapping",
                "strided": "non-contiguous", "inout": "mutated"}


SYMPTOMS = {"wrong_values": "returns wrong values", "nonfinite_mismatch": "returns a different NaN/Inf pattern",
            "guard_violation": "writes outside the tensor's view", "shape_mismatch": "returns a wrong shape",
            "dtype_mismatch": "returns a wrong dtype", "crash": "crashes the process", "timeout": "hangs",
            "nondeterministic": "differs from run to run", "runtime_error": "raises at run time",
            "compile_error": "fails to compile"}


INDEX_OPS = ("argmax", "argmin")


TITLE_EXPRESSION_CHARS = 80


def title(record: Record, case: Case) -> str:
    """"<compiler>: <expr> on a <layout> input <symptom>", from the minimal case and trigger."""
    project = project_of(record)
    compiler = route_facts(record.route).compiler_name(project.name, record.route)
    words = [LAYOUT_WORDS[t] for t in _trigger_of(record, case) if t in LAYOUT_WORDS]
    where = f" on {_article(words[0])} {' '.join(words)} input" if words else ""
    dtype = f" ({case.dtype})" if case.dtype != "float32" else ""
    return f"{compiler}: {expression(case, failing_outputs(record, case))}{where}{dtype} {_symptom(record, case)}"


def failing_outputs(record: Record, case: Case) -> list:
    """The outputs the failure is about: the one its message names ("output 1: ..."), every
    output when the whole program fails to compile or run, else the first."""
    named = (record.message or "").split(":", 1)[0].split()
    if len(named) == 2 and named[0] == "output" and named[1].isdigit() and int(named[1]) < len(case.outputs):
        return [case.outputs[int(named[1])]]
    return list(case.outputs) if record.kind in Kind.values_where("no_values") else case.outputs[:1]


def _trigger_of(record: Record, case: Case) -> list:
    """The ablation trigger when reduce-then-bucket found one, else the inputs' layout classes."""
    if record.trigger is not None and record.reduced_case:
        return list(record.trigger)
    classes = set()
    for spec in case.inputs:
        lay = spec["layout"]
        classes.update(layout.layout_classes(spec["shape"], lay["strides"], lay["offset"], lay["storage_size"],
                                             bool(spec.get("mutated"))))
    return sorted(classes - {"contiguous"}, key=list(LAYOUT_WORDS).index)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _symptom(record: Record, case: Case) -> str:
    kind = record.kind or "wrong_values"
    if kind == "wrong_values" and first_op(record, case) in INDEX_OPS:
        return "returns a wrong index"
    if kind in ("compile_error", "runtime_error"):
        first = record.first_message_line
        short = first if len(first) <= 90 else first[:90].rsplit(" ", 1)[0] + " ..."
        return f"{SYMPTOMS[kind]}: {short}" if first else SYMPTOMS[kind]
    return SYMPTOMS.get(kind, kind.replace("_", " "))


def expression(case: Case, outputs: list | None = None) -> str:
    """The case's `outputs` (default: its first) as nested op calls, inputs named x, y, z, w:
    'argmax(silu(x))'; several outputs are joined by commas."""
    names = {spec["name"]: n for spec, n in zip(case.inputs, _input_letters(len(case.inputs)))}
    nodes = {n["id"]: n for n in case.nodes}

    def expr(ref: str) -> str:
        if ref in names:
            return names[ref]
        node = nodes[ref]
        args = [expr(a) for a in node["args"]]
        if node["op"].endswith("_"):
            return f"{args[0]}.{node['op']}({', '.join(args[1:])})"
        return f"{node['op']}({', '.join(args)})"
    refs = outputs or case.outputs[:1] or [n["id"] for n in case.nodes][-1:]
    if not refs:
        return "program()"
    shown = [expr(refs[0])]
    for ref in refs[1:]:      # a title stays readable: the outputs that fit, then an ellipsis
        if len(", ".join(shown + [expr(ref)])) > TITLE_EXPRESSION_CHARS:
            return ", ".join(shown) + ", ..."
        shown.append(expr(ref))
    return ", ".join(shown)


def _input_letters(count: int) -> list:
    return list("xyzw")[:count] if count <= 4 else [f"x{k}" for k in range(count)]


def first_op(record: Record, case: Case) -> str | None:
    """The first divergent op: recorded by reduce-then-bucket, else the failing output's op."""
    found = record.first_op or record.op
    if found:
        return found
    producers = {n["id"]: n["op"] for n in case.nodes}
    return producers.get(case.outputs[0]) if case.outputs else None
