"""Files are data: code planted in any string field of any file the tool reads never runs.

Every string field (and an extra attribute key) of a case file, a corpus entry, a results
record, a bucket-history record and a kernel launch file is replaced, one at a time, by each
payload below. Each payload creates a marker file when it runs, in the program text
(`x0.to(torch.<dtype>)`), a call's keywords, a docstring of repro.py or a string literal.
The files then go through every reader and every command that reads them, the exported
bundles' repro.py included; the marker must never appear.
"""
import ast
import copy
import json
import subprocess
import sys

import pytest

from torchsim_diff import cli
from torchsim_diff.buckets.bucket_history import BucketStore
from torchsim_diff.buckets.corpus import CorruptEntry, read_entry
from torchsim_diff.case.graph import CaseError
from torchsim_diff.case.layout import materialize_all
from torchsim_diff.case.program_check import load_program
from torchsim_diff.report.bundles import BundleError, entry_record, write_bundle
from torchsim_diff.case.validate import validate_case
from torchsim_diff.results.record import BadRecord, Record

pytestmark = pytest.mark.slow

PAYLOADS = (
    "__import__('pathlib').Path({mark!r}).touch()",
    "float16 if __import__('pathlib').Path({mark!r}).touch() is None else torch.float16",
    "0 if __import__('pathlib').Path({mark!r}).touch() is None else 0",
    "float32); __import__('pathlib').Path({mark!r}).touch(); (x0",
    "x0) or __import__('pathlib').Path({mark!r}).touch() or (x0",
    "ij->ji', x0) or __import__('pathlib').Path({mark!r}).touch() or ('",
    '"""\nimport pathlib; pathlib.Path({mark!r}).touch()\n"""',
    "'\nimport pathlib; pathlib.Path({mark!r}).touch()\n'",
    "\\\nimport pathlib\npathlib.Path({mark!r}).touch()\n#",
)


def _input(name, shape, dtype):
    strides = [shape[1], 1] if len(shape) == 2 else [1]
    return {"name": name, "shape": shape, "dtype": dtype, "domain": {"kind": "real"}, "mutated": False,
            "layout": {"classes": ["contiguous"], "strides": strides, "offset": 0,
                       "storage_size": shape[0] * (shape[1] if len(shape) == 2 else 1)}}


# Every kind of string a case holds: names, dtypes, a domain, layout classes, op names and
# string attributes (an einsum equation, a dtype, a cast target, a reduce mode).
FLOAT_CASE = {
    "schema": 1, "dtype": "float32", "values": {"seed": 3},
    "inputs": [_input("x0", [2, 3], "float32"), _input("x1", [2, 3], "int64")],
    "nodes": [{"id": "v0", "op": "einsum", "args": ["x0"], "attrs": {"equation": "ij->ji"}},
              {"id": "v1", "op": "cast_round_trip", "args": ["v0"], "attrs": {"via": "float16"}},
              {"id": "v2", "op": "scatter_reduce", "args": ["x0", "x1", "x0"],
               "attrs": {"dim": 1, "reduce": "amax", "include_self": True}}],
    "outputs": ["v1", "v2"],
}
FLOAT_CASE["inputs"][1]["domain"] = {"kind": "index", "high": 3}
INT_CASE = {
    "schema": 1, "dtype": "int32", "values": {"seed": 1}, "inputs": [_input("x0", [2, 3], "int32")],
    "nodes": [{"id": "v0", "op": "to_float", "args": ["x0"], "attrs": {"dtype": "float32"}}], "outputs": ["v0"],
}
ENTRY_TEXT = {"route": "eager", "kind": "wrong_values", "bucket": "eager-wrong_values-abc", "signature": "sig",
              "note": "a note", "upstream": "https://example.org/1", "first_op": "einsum", "project": "pytorch",
              "message": "output 0: values differ"}


def _record(case) -> dict:
    return {"case_id": "c1", "seed": 3, "graph_hash": "g", "route": "eager", "status": "fail", "kind": "wrong_values",
            "stage": "run", "bucket": "eager-wrong_values-abc", "op": "einsum", "first_op": "einsum",
            "ops": ["einsum"], "dtypes": ["float32"], "layouts": ["contiguous"], "n_nodes": 3, "title": "t",
            "message": "output 0: values differ", "artifacts": None, "case": case, "reduced_case": case}


def _launch() -> dict:
    return {"format": "torchsim-diff.kernel-launch", "schema": 1, "kernel_name": "triton_poi_fused_relu_0",
            "source": "kernel.py", "executor": "interpreter", "grid": [1, 1, 1], "constexprs": {"XBLOCK": 8},
            "numels": {"xnumel": 4}, "launch_options": {"num_warps": 1},
            "signature": {"in_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
            "args": [{"name": "in_ptr0", "kind": "tensor", "role": "inout", "buffer": "buf0", "dtype": "float32",
                      "size": [4], "stride": [1], "storage_offset": 0, "span": 4},
                     {"name": "xnumel", "kind": "scalar", "dtype": "i32", "value": 4}],
            "buffers": {"buf0": {"dtype": "float32", "nbytes": 16, "graph_input": 0,
                                 "before": "buffers/buf0.before.bin", "after": "buffers/buf0.after.bin"}}}


def string_paths(value, path=()):
    """Paths of every string in a JSON value, dict keys of attrs included as ("key", ...)."""
    if isinstance(value, str):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from string_paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from string_paths(item, path + (index,))


def poisoned(document, mark: str):
    """(label, copy) for each string field and each attribute value of `document` set to each
    payload, and each payload as an extra attribute key of every node."""
    for path in dict.fromkeys([*string_paths(document), *attribute_paths(document)]):
        for number, payload in enumerate(PAYLOADS):
            copied = copy.deepcopy(document)
            target = copied
            for step in path[:-1]:
                target = target[step]
            target[path[-1]] = payload.format(mark=mark)
            yield f"{'.'.join(map(str, path))}#{number}", copied
    for where, node_list in _node_lists(document):
        for position in range(len(node_list)):
            for number, payload in enumerate(PAYLOADS):
                copied = copy.deepcopy(document)
                _node_lists_of(copied, where)[position].setdefault("attrs", {})[payload.format(mark=mark)] = 1
                yield f"{where}.nodes.{position}.attrs key#{number}", copied


def attribute_paths(document):
    """Paths of every node attribute's value, whatever its type (an int `dim` is written into
    program text too)."""
    for where, node_list in _node_lists(document):
        prefix = (where,) if where else ()
        for position, node in enumerate(node_list):
            for key in node.get("attrs", {}):
                yield prefix + ("nodes", position, "attrs", key)


def bundle_code_calls_payload(folder) -> bool:
    """Whether any Python file of a bundle names what the payloads call: proof without running
    it that no payload became code (as a string literal it is harmless)."""
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id in ("__import__", "pathlib"):
                return True
            if isinstance(node, ast.Import) and any(a.name == "pathlib" for a in node.names):
                return True
    return False


def _node_lists(document):
    for where in ("", "case", "reduced_case"):
        found = _node_lists_of(document, where)
        if found is not None:
            yield where, found


def _node_lists_of(document, where):
    holder = document.get(where) if where else document
    return holder.get("nodes") if isinstance(holder, dict) else None


@pytest.fixture
def mark(tmp_path):
    path = tmp_path / "PLANTED-CODE-RAN"
    yield str(path)
    assert not path.exists(), "code planted in a file ran"


def _documents(mark):
    """(file type, label, document) for every poisoned variant of every file type."""
    for case in (FLOAT_CASE, INT_CASE):
        yield from (("case", label, doc) for label, doc in poisoned(case, mark))
        yield from (("entry", label, doc) for label, doc in poisoned({**ENTRY_TEXT, "case": case}, mark))
        yield from (("record", label, doc) for label, doc in poisoned(_record(case), mark))


def test_the_base_files_are_valid_so_each_poisoned_field_is_what_is_tested(tmp_path):
    for case in (FLOAT_CASE, INT_CASE):
        program = load_program(validate_case(copy.deepcopy(case)).program_source())
        program(*materialize_all(case))
        write_bundle(Record.from_dict(_record(case)), str(tmp_path / f"bundle-{case['dtype']}"))


@pytest.mark.e2e     # every reader over every planted file: about 20 s
def test_no_reader_runs_planted_code(tmp_path, mark):
    """The library's readers, on every variant: validation, program text and its gate, the
    program run on its inputs, and the bundle writer (repro.py, ISSUE.md)."""
    counts, accepted = {"case": 0, "entry": 0, "record": 0}, {"case": 0, "entry": 0, "record": 0}
    for kind, label, document in _documents(mark):
        counts[kind] += 1
        folder = tmp_path / f"{kind}-{counts[kind]}"
        try:
            if kind == "case":
                case = validate_case(document)
                load_program(case.program_source())(*materialize_all(case.to_dict()))
            elif kind == "entry":
                path = tmp_path / f"entry-{counts[kind]}.json"
                path.write_text(json.dumps(document))
                write_bundle(entry_record(read_entry(str(path))), str(folder))
            else:
                write_bundle(Record.from_dict(document), str(folder))
        except (CaseError, CorruptEntry, BundleError, BadRecord):
            continue
        accepted[kind] += 1
        assert not bundle_code_calls_payload(folder), f"{kind} {label}: a payload became code in the bundle"
    # Free text (notes, messages, titles) is accepted and lands in repro.py and ISSUE.md, so the
    # bundle writer really met the payloads; every field of every type was tried.
    assert min(counts.values()) >= 200 and accepted["entry"] >= 20 and accepted["record"] >= 20, (counts, accepted)


SAMPLE = 31


def _cli(capsys, *argv):
    """The command in this process (as `torchsim-diff ARGV` would run it): (exit status, stderr)."""
    capsys.readouterr()
    status = cli.main(list(argv))
    return status, capsys.readouterr().err


@pytest.mark.e2e     # every command over every planted file, exported repro.py runs included: about 17 s
def test_no_command_runs_planted_code(tmp_path, mark, capsys, monkeypatch):
    """Every command that reads a file, on folders of poisoned files, and every bundle that
    export writes from them, run as a maintainer would run it."""
    entries, cases, run = tmp_path / "entries", tmp_path / "cases", tmp_path / "run"
    for folder in (entries, cases, run):
        folder.mkdir()
    records = []
    # every command on a sample of the variants (the reader test above takes them all)
    for n, (kind, label, document) in enumerate(list(_documents(mark))[::SAMPLE]):
        if kind == "case":
            (cases / f"{n}.json").write_text(json.dumps(document))
        elif kind == "entry":
            (entries / f"{n}.json").write_text(json.dumps(document))
        else:
            records.append({**document, "bucket": f"b{n}"})
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    store = BucketStore(str(tmp_path / "buckets.sqlite"))
    for record in records:
        try:
            store.add(Record.from_dict(record))
        except BadRecord:
            pass                # refused as the results reader refuses it
    store.close()

    monkeypatch.chdir(tmp_path)
    history = str(tmp_path / "buckets.sqlite")
    commands = [("replay", str(cases), str(entries), "--routes", "eager"), ("table", str(run)),
                ("table", str(run), "--format", "html"), ("table", str(run), "--tables", "history", "--buckets", history),
                ("reduce", str(next(cases.iterdir())), "--route", "eager")]
    for n, record in enumerate(records):
        commands.append(("export", record["bucket"], "--from", str(run), "--to", str(tmp_path / f"x{n}")))
        commands.append(("export", record["bucket"], "--buckets", history, "--to", str(tmp_path / f"h{n}")))
    commands += [("export", str(path), "--to", str(tmp_path / f"e{n}"))      # runs repro.py
                 for n, path in enumerate(sorted(entries.iterdir())[::6])]
    for argv in commands:
        status, err = _cli(capsys, *argv)
        assert status in (0, 1, 2) and "Traceback" not in err, (argv, err[-2000:])
    bundles = sorted(tmp_path.glob("x*/repro.py"))
    assert len(bundles) >= 5, "too few bundles written to check"
    for folder in [b.parent for b in bundles] + sorted(tmp_path.glob("h*")):
        assert not bundle_code_calls_payload(folder), folder
    for script in bundles[::4]:      # and run some, as a maintainer would
        subprocess.run([sys.executable, str(script)], capture_output=True, cwd=script.parent, timeout=300)


def test_no_launch_file_field_runs_code_but_its_own_kernel(tmp_path, mark):
    """kernel replay runs the captured kernel.py (a kernel is code, as repro.py is); no string
    of launch.json may make it run anything else, such as a file outside its folder."""
    evil = tmp_path / "evil.py"
    evil.write_text(PAYLOADS[0].format(mark=mark) + "\n")
    variants = list(poisoned(_launch(), mark))
    variants += [(f"source={where}", {**_launch(), "source": where}) for where in ("../evil.py", str(evil))]
    for n, (label, document) in enumerate(variants):
        folder = tmp_path / f"launch{n}"
        (folder / "buffers").mkdir(parents=True)
        for name in ("before", "after"):
            (folder / "buffers" / f"buf0.{name}.bin").write_bytes(bytes(16))
        (folder / "kernel.py").write_text("# the captured kernel; this one defines nothing\n")
        (folder / "launch.json").write_text(json.dumps(document))
        assert cli.main(["kernel", "replay", str(folder)]) in (0, 1, 2), label
