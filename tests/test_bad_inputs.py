"""Bad input of every sort a user can give: each is one line naming the problem and exit 2
(pytest's own usage exit, 4, for plugin options), never a traceback and never a finding."""
import base64
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

SEED_CASE = json.load(open(os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")))["case"]
X = {"name": "x0", "shape": [2, 3], "dtype": "float32", "domain": {"kind": "real"},
     "layout": {"strides": [3, 1], "offset": 0, "storage_size": 6, "classes": ["contiguous"]}}


def case(*, inputs=None, nodes=None, outputs=None, **top) -> dict:
    """A one-node case (relu of a 2x3 input) with the given parts replaced."""
    data = {"schema": 1, "dtype": "float32", "inputs": inputs if inputs is not None else [X],
            "nodes": nodes if nodes is not None else [{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
            "outputs": outputs if outputs is not None else ["v0"], "values": {"seed": 0}}
    data.update(top)
    return data


def with_input(**changes) -> dict:
    spec = json.loads(json.dumps(X))
    for key, value in changes.items():
        if key in ("strides", "offset", "storage_size", "classes"):
            spec["layout"][key] = value
        else:
            spec[key] = value
    return case(inputs=[spec])


def node(op, args, attrs=None) -> dict:
    return case(nodes=[{"id": "v0", "op": op, "args": args, "attrs": attrs if attrs is not None else {}}])


# Case files: (id, JSON value or raw text, fragment of the one line).
BAD_CASES = [
    ("not json", "{nope", "not valid JSON"),
    ("empty file", "", "not valid JSON"),
    ("a list", [1, 2], "an entry is an object"),
    ("entry without case", {"note": "x"}, "an entry is an object"),
    ("schema 2", case(schema=2), "schema=2 is not supported"),
    ("schema as text", case(schema="1"), "schema='1' is not supported"),
    ("unknown dtype", case(dtype="float8"), "dtype='float8'"),
    ("inputs not a list", case(inputs={"x0": 1}), "inputs must be a list"),
    ("missing nodes", {k: v for k, v in case().items() if k != "nodes"}, "missing the field 'nodes'"),
    ("offset as text", with_input(offset="0"), "offset='0' must be a non-negative integer"),
    ("negative offset", with_input(offset=-1), "offset=-1"),
    ("shape with text", with_input(shape=[2, "3"]), "shape=[2, '3']"),
    ("shape with a bool", with_input(shape=[True, 3]), "shape=[True, 3]"),
    ("negative shape", with_input(shape=[-2, 3]), "shape=[-2, 3]"),
    ("strides of the wrong rank", with_input(strides=[1]), "strides=[1]"),
    ("storage too small", with_input(storage_size=3), "smaller than offset + span = 6"),
    ("storage of 10^12 elements", with_input(storage_size=10**12), "over the cap of 16777216 elements"),
    ("storage size as float", with_input(storage_size=6.0), "storage_size=6.0"),
    ("unknown layout class", with_input(classes=["diagonal"]), "layout.classes"),
    ("unknown domain", with_input(domain={"kind": "imaginary"}), "kind must be one of"),
    ("index domain without high", with_input(domain={"kind": "index"}), "domain.high=None"),
    ("unique indices that cannot be", with_input(domain={"kind": "unique_index", "high": 2, "dim": 1}),
     "too small for 3 distinct indices"),
    ("mutated as text", with_input(mutated="yes"), "mutated='yes'"),
    ("input name not an identifier", with_input(name="x-0"), "is not a usable identifier"),
    ("data not base64", with_input(data="@@@"), ".data"),
    ("data of the wrong length", with_input(data=base64.b64encode(b"1234").decode()), "explicit data holds 4 bytes"),
    ("seed negative", case(values={"seed": -1}), "values.seed=-1"),
    ("seed out of range", case(values={"seed": 2**70}), "values.seed="),
    ("seed as float", case(values={"seed": 1.5}), "values.seed=1.5"),
    ("values not an object", case(values=[0]), "values must be an object"),
    ("op as a list", node(["relu"], ["x0"]), "must be an op name"),
    ("unknown op", node("frobnicate", ["x0"]), "unknown op 'frobnicate'"),
    ("too many arguments", node("relu", ["x0", "x0"]), "torch rejects"),
    ("too few arguments", node("add", ["x0"]), "torch rejects"),
    ("dim out of range", node("sum", ["x0"], {"dim": [5], "keepdim": False}), "torch rejects"),
    ("attribute missing", node("softmax", ["x0"], {}), "attribute 'dim' is missing"),
    ("attrs as a list", node("relu", ["x0"], [1]), "attrs must be an object"),
    ("argument undefined", node("relu", ["x9"]), "argument 'x9' is not defined"),
    ("args not a list", node("relu", "x0"), "args='x0'"),
    ("output names nothing", case(outputs=["v7"]), "outputs[0]='v7' names no input or node"),
    ("input name used twice", case(inputs=[X, X]), "used twice"),
    # content that is code, or too large to be a compiler test
    ("dtype attr holding code", case(dtype="int32", inputs=[{**X, "dtype": "int32"}], nodes=[
        {"id": "v0", "op": "to_float", "args": ["x0"], "attrs": {"dtype": "float32) or print('ran') or (x0"}}]),
     "attribute dtype="),
    ("attr key holding code", node("relu", ["x0"], {"x=print('ran')": 1}), "is not one of this op's attributes"),
    ("int attr as code", node("softmax", ["x0"], {"dim": "__import__('os').getcwd()"}), "must be an integer"),
    ("bool attr as an int", node("sum", ["x0"], {"dim": [0], "keepdim": 1}), "must be true or false"),
    ("attr int of 2**70", node("softmax", ["x0"], {"dim": 2**70}), "must be an integer"),
    ("attr list of 10000 ints", node("sum", ["x0"], {"dim": [0] * 10000, "keepdim": True}), "at most 16 integers"),
    ("attrs nested 100000 deep", '{"a": ' * 100000 + "1" + "}" * 100000, "nested deeper than"),
    ("an integer of 5000 digits", '{"schema": ' + "9" * 5000 + "}", "a number too long to read"),
    ("reduce mode not in the set", node("scatter_reduce", ["x0", "x0", "x0"], {"dim": 0, "reduce": "os",
                                                                             "include_self": True}), "one of 'sum'"),
    ("einsum equation with code", node("einsum", ["x0"], {"equation": "ij->ji'), print('ran'"}), "einsum equation"),
    ("nan attr", '{"schema": 1, "dtype": "float32", "inputs": [' + json.dumps(X) + '], "nodes": [{"id": "v0", '
                 '"op": "leaky_relu", "args": ["x0"], "attrs": {"negative_slope": NaN}}], "outputs": ["v0"]}',
     "must be a finite number"),
    ("shape of 2**70", with_input(shape=[2**70], strides=[0], storage_size=1), "shape=[1180591620717411303424]"),
    ("broadcast view of 2**40 elements", with_input(shape=[2**20, 2**20], strides=[0, 0], storage_size=1),
     "over the limit of 268435456 per tensor"),
    ("expand to 2**40 elements", node("expand", ["x0"], {"size": [2**20, 2**20, 2, 3]}), "per tensor"),
    ("20000 inputs", case(inputs=[{**X, "name": f"x{k}"} for k in range(20000)]), "over the limit of 256"),
    ("1000 nodes", case(nodes=[{"id": f"v{k}", "op": "relu", "args": ["x0"], "attrs": {}} for k in range(1000)],
                        outputs=["v0"]), "over the limit of 512"),
    ("rank 9 input", with_input(shape=[1] * 9, strides=[1] * 9, storage_size=1), "at most 8 non-negative"),
]


@pytest.fixture
def files(tmp_path):
    """Paths the CLI table below refers to as {name} (dots in file names become underscores)."""
    paths = {"tmp": tmp_path}
    for name, content in {"empty.jsonl": "", "junk.jsonl": "no\njson\nhere\n", "lists.jsonl": "[1]\n[2]\n",
                          "partial.jsonl": '{"route": "eager", "status": "pass"}\n',
                          "notes.txt": "hello", "a_file": "x",
                          "good.json": json.dumps({"case": SEED_CASE})}.items():
        (tmp_path / name).write_text(content)
        paths[name.replace(".", "_")] = tmp_path / name
    (tmp_path / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    paths["binary_jsonl"] = tmp_path / "binary.jsonl"
    for folder in ("empty_dir", "run"):
        (tmp_path / folder).mkdir()
        paths[folder] = tmp_path / folder
    record = {"case_id": "c", "route": "eager", "status": "pass", "kind": None, "bucket": None, "ops": ["relu"],
              "case": SEED_CASE}
    (tmp_path / "run" / "results.jsonl").write_text(json.dumps(record) + "\n")
    paths["history"] = tmp_path / "history.sqlite"
    return paths


# CLI: (argv with {name} placeholders, fragment of the one line).
BAD_CLI = [
    (["fuzz", "--max-examples", "0"], "'0' is not a positive integer"),
    (["fuzz", "--max-examples", "-1"], "'-1' is not a positive integer"),
    (["fuzz", "--max-examples", "many"], "'many' is not an integer"),
    (["fuzz", "--max-examples", "1.5"], "'1.5' is not an integer"),
    (["fuzz", "--routes", ""], "names no route"),
    (["fuzz", "--routes", ",,"], "names no route"),
    (["fuzz", "--routes", "nope"], "unknown route 'nope'"),
    (["fuzz", "--routes", "eager,nope"], "unknown route 'nope'"),
    (["fuzz", "--timeout", "0"], "finite number of seconds, at least 1"),
    (["fuzz", "--timeout", "-5"], "finite number of seconds, at least 1"),
    (["fuzz", "--timeout", "nan"], "finite number of seconds, at least 1"),
    (["fuzz", "--timeout", "inf"], "finite number of seconds, at least 1"),
    (["fuzz", "--timeout", "soon"], "is not a number of seconds"),
    (["fuzz", "--dtype", "float8"], "dtype='float8' is not supported"),
    (["fuzz", "--dtype", ""], "dtype='' is not supported"),
    (["fuzz", "--max-nodes", "0"], "not a positive integer"),
    (["fuzz", "--repeat", "0"], "not a positive integer"),
    (["fuzz", "--seed", "x"], "invalid int value"),
    (["fuzz", "--out", "{a_file}"], "is a file, not a folder"),
    (["fuzz", "--out", "{a_file}/sub"], "cannot be created"),
    (["fuzz", "--out", ""], "an empty folder name"),
    (["fuzz", "--routes", "eager", "--ops", "frobnicate"], "ops=['frobnicate']"),
    (["fuzz", "--routes", "eager", "--families", "bogus"], "families=['bogus']"),
    (["fuzz", "--routes", "eager", "--families", ",,"], "names nothing"),
    (["fuzz", "--routes", "eager", "--ops", ""], "names nothing"),
    (["fuzz", "--timeout", "1e-300"], "at least 1"),
    (["fuzz", "--route-option", "spike-vlen"], "ROUTE.KEY=VALUE"),
    (["fuzz", "--route-option", "nope.x=1"], "unknown route 'nope'"),
    (["fuzz", "--frobnicate"], "unrecognized arguments"),
    (["frobnicate"], "invalid choice"),
    ([], "the following arguments are required"),
    (["replay", "does/not/exist.json"], "no such file"),
    (["replay", "{empty_dir}"], "nothing to replay"),
    (["replay", "{notes_txt}"], "nothing to replay"),
    (["replay", "{good_json}", "--routes", ""], "names no route"),
    (["replay", "{good_json}", "--timeout", "0"], "at least 1"),
    (["reduce", "{good_json}", "--route", "nope"], "unknown route 'nope'"),
    (["reduce", "{good_json}"], "the following arguments are required: --route"),
    (["reduce", "does/not/exist.json", "--route", "eager"], "cannot read"),
    (["reduce", "{good_json}", "--route", "eager", "--jobs", "0"], "not a positive integer"),
    (["reduce", "{good_json}", "--route", "eager", "--max-runs", "-3"], "not a positive integer"),
    (["table", "does/not/exist"], "no results"),
    (["table", "{empty_dir}"], "no results"),
    (["table", "{empty_jsonl}"], "no records in"),
    (["table", "{junk_jsonl}"], "skipped 3 unreadable line(s)"),
    (["table", "{lists_jsonl}"], "not a record"),
    (["table", "{partial_jsonl}"], "not a record"),
    (["table", "{binary_jsonl}"], "no records in"),
    (["table", "{run}", "--tables", "bogus"], "'bogus' is not one of"),
    (["table", "{run}", "--format", "yaml"], "invalid choice"),
    (["table", "{run}", "--tables", "history", "--buckets", "{history}"], "no bucket history"),
    (["export", "abc", "--to", "{tmp}/out", "--buckets", "{history}"], "no bucket history"),
    (["export", "abc", "--to", "{tmp}/out", "--from", "{run}"], "bucket 'abc' not found"),
    (["routes", "--routes", "nope"], "unknown route 'nope'"),
    (["routes", "--routes", ""], "names no route"),
    (["kernel", "replay", "does/not/exist"], "no such capture"),
]


def _run(capsys, argv):
    from torchsim_diff.cli import main
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_clean_line(code, out, err, fragment):
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err
    assert err.count("\n") == 1 and err.startswith("torchsim-diff: error:"), err
    assert fragment in err, err


@pytest.mark.parametrize("argv,fragment", BAD_CLI, ids=[" ".join(a) or "(nothing)" for a, _ in BAD_CLI])
def test_bad_command_lines(capsys, files, argv, fragment):
    argv = [a.format(**files) for a in argv]
    _one_clean_line(*_run(capsys, argv), fragment)


def _as_file(content) -> str:
    """Raw text as it is; a case (a dict with a schema) inside a corpus entry, as saved."""
    if isinstance(content, str):
        return content
    return json.dumps({"case": content} if isinstance(content, dict) and "schema" in content else content)


@pytest.mark.parametrize("content,fragment", [c[1:] for c in BAD_CASES], ids=[c[0] for c in BAD_CASES])
def test_bad_case_files_in_replay(tmp_path, capsys, content, fragment):
    path = tmp_path / "case.json"
    path.write_text(_as_file(content))
    code, out, err = _run(capsys, ["replay", str(path), "--routes", "eager"])
    _one_clean_line(code, out, err, fragment)
    assert str(path) in err


@pytest.mark.parametrize("content,fragment", [c[1:] for c in BAD_CASES[4:12]], ids=[c[0] for c in BAD_CASES[4:12]])
def test_bad_case_files_in_reduce(tmp_path, capsys, content, fragment):
    path = tmp_path / "case.json"
    path.write_text(_as_file(content))
    _one_clean_line(*_run(capsys, ["reduce", str(path), "--route", "eager"]), fragment)


def test_a_bad_case_in_the_history_is_refused_by_export(tmp_path, capsys):
    from torchsim_diff.results.record import Record
    from torchsim_diff.buckets.bucket_history import BucketStore
    store = BucketStore(str(tmp_path / "h.sqlite"))
    store.add(Record(bucket="b1", route="eager", kind="wrong_values", status="fail",
                     case=with_input(storage_size=10**12)))
    code, out, err = _run(capsys, ["export", "b1", "--to", str(tmp_path / "o"),
                                   "--buckets", str(tmp_path / "h.sqlite")])
    _one_clean_line(code, out, err, "its case is invalid")


def test_a_read_only_out_folder_is_refused(tmp_path, capsys):
    """A read-only tmpfs when root (root may write through permissions), else a chmod'ed folder."""
    parent = tmp_path / "ro"
    parent.mkdir()
    if os.geteuid() == 0:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(parent)],
                                 capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot mount a read-only tmpfs: {mounted.stderr.decode().strip()}")
    else:
        os.chmod(parent, 0o500)
    try:
        _one_clean_line(*_run(capsys, ["fuzz", "--out", str(parent / "run")]), "not writable")
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", str(parent)], check=False)
        os.chmod(parent, 0o700)


PLUGIN_BAD = [
    (["--routes", "bogus"], "unknown route 'bogus'"),
    (["--routes", ""], "names no route"),
    (["--fuzz-dtypes", "float8"], "dtype='float8'"),
    (["--fuzz-dtypes", ","], "names no dtype"),
    (["--fuzz-examples", "0"], "not a positive integer"),
    (["--fuzz-shards", "0"], "not a positive integer"),
    (["--fuzz-max-nodes", "0"], "not a positive integer"),
    (["--fuzz-timeout", "0"], "at least 1"),
    (["--fuzz-timeout", "nan"], "at least 1"),
    (["--fuzz-timeout", "1e308"], "is over a day"),
    (["--fuzz-budget", "9" * 400], "is over 30 days"),
    (["--fuzz-reduce-budget", "inf"], "must be a finite number of seconds"),
    (["--report-dir", "linked"], "linked/report.html is a symbolic link"),
]


@pytest.mark.slow
@pytest.mark.parametrize("argv,fragment", PLUGIN_BAD, ids=[" ".join(a)[:40] for a, _ in PLUGIN_BAD])
def test_bad_pytest_options_are_usage_errors(tmp_path, argv, fragment):
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "report.html").symlink_to(tmp_path / "test_nothing.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(tmp_path), *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, lines
    assert "Traceback" not in proc.stdout + proc.stderr and len(lines) == 1 and fragment in lines[0], lines


def test_the_console_script_is_clean_too():
    proc = subprocess.run([sys.executable, "-m", "torchsim_diff", "fuzz", "--timeout", "nan"],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
