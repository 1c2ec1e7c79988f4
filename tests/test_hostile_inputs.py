"""Inputs are data: hostile options and files given to every command that reads input.

Each row is run through the real command line and must end in one line starting with
`torchsim-diff: error:` on stderr, exit status 2, no traceback, and the fragment that says
what was wrong. Nothing here may start a route worker or compile: bad input is caught
before any work starts. Rows that could hang or exhaust memory on a regression (a FIFO,
/dev/zero) either run in a subprocess with a time limit, or in this process with a writer
that opens the FIFO after a few seconds, so that a reader which blocks on it gets end of
file and the row fails instead of hanging.

tests/test_bad_inputs.py holds the earlier table (case contents, plain option values); the
rows below are new.
"""
import contextlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import threading

import pytest

from tests.conftest import REPO

SEED_CASE = json.load(open(os.path.join(REPO, "corpora", "seed", "seed-00-float32.json")))["case"]
MiB = 1 << 20
# fuzz options that keep a regression (an option accepted after all) short: one case on eager,
# in the test's own folder, no history and no reduction.
FUZZ = ["fuzz", "--routes", "eager", "--max-examples", "1", "--no-reduce", "--out", "{tmp}/run",
        "--buckets", "none", "--known-bugs", "none"]
RECORD = {"case_id": "c1", "route": "inductor", "status": "fail", "kind": "wrong_values", "bucket": "b1",
          "ops": ["relu"], "case": SEED_CASE, "message": "output 0: values differ", "n_nodes": 1}


def nested(depth: int):
    value = []
    for _ in range(depth - 1):
        value = [value]
    return value


def launch_meta(**changes) -> dict:
    """A launch.json that passes every check (a kernel is never run: the rows fail first)."""
    meta = {"format": "torchsim-diff.kernel-launch", "schema": 1, "kernel_name": "k", "source": "kernel.py",
            "executor": "interpreter", "grid": [1, 1, 1], "constexprs": {"XBLOCK": 8}, "numels": {"xnumel": 4},
            "launch_options": {}, "signature": {"in_ptr0": "*fp32", "xnumel": "i32"},
            "args": [{"name": "in_ptr0", "kind": "tensor", "role": "in", "buffer": "buf0", "dtype": "float32",
                      "size": [4], "stride": [1], "storage_offset": 0, "span": 4},
                     {"name": "xnumel", "kind": "scalar", "dtype": "i32", "value": 4}],
            "buffers": {"buf0": {"dtype": "float32", "nbytes": 16, "graph_input": 0,
                                 "before": "buffers/buf0.before.bin", "after": "buffers/buf0.after.bin"}}}
    meta.update(changes)
    return meta


def with_arg(**changes) -> dict:
    meta = launch_meta()
    meta["args"][0].update(changes)
    return meta


# -- the files the rows refer to as {name} ---------------------------------------------------
class World:
    """Every hostile file, made once for the module; `paths` maps {name} to a path."""

    def __init__(self, root):
        self.root, self.paths, self.fifos = root, {"root": str(root)}, []

    def file(self, name: str, content) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content if isinstance(content, bytes) else
                         (content if isinstance(content, str) else json.dumps(content)).encode())
        return self.add(name, path)

    def folder(self, name: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(path, exist_ok=True)
        return self.add(name, path)

    def fifo(self, name: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(path)
        self.fifos.append(path)
        return self.add(name, path)

    def link(self, name: str, target: str) -> str:
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(target, path)
        return self.add(name, path)

    def sparse(self, name: str, size: int) -> str:
        """A regular file of `size` bytes that takes no disk (caps are checked before reading)."""
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.truncate(size)
        return self.add(name, path)

    def results(self, name: str, *lines) -> str:
        text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
        return self.file(name, text)

    def launch(self, name: str, meta, *, kernel: str = "k = None\n") -> str:
        folder = self.folder(name)
        self.file(f"{name}/kernel.py", kernel)
        self.file(f"{name}/buffers/buf0.before.bin", bytes(16))
        self.file(f"{name}/buffers/buf0.after.bin", bytes(16))
        if meta is not None:
            self.file(f"{name}/launch.json", meta if isinstance(meta, (str, bytes)) else json.dumps(meta))
        return folder

    def add(self, name: str, path: str) -> str:
        self.paths[name.replace("/", "_").replace(".", "_").replace("-", "_")] = path
        return path


def _make_world(w: World) -> None:
    secret = w.folder("secret")
    w.file("secret/id_rsa", "not for bundles")
    w.file("a_file", "x")
    w.file("good.json", {"case": SEED_CASE})
    # case files and corpus entries
    w.fifo("fifo.json")
    w.link("zero.json", "/dev/zero")
    w.sparse("huge.json", 65 * MiB)
    w.file("deep.json", "[" * 100_000 + "]" * 100_000)
    w.file("deep-note.json", {"case": SEED_CASE, "note": nested(100)})
    w.file("latin1.json", '{"case": "caf\xe9"}'.encode("latin-1"))
    w.file("route-list.json", {"route": ["inductor"], "bucket": "b1", "case": SEED_CASE})
    w.file("bucket-object.json", {"route": "inductor", "bucket": {"id": 1}, "case": SEED_CASE})
    w.file("note-number.json", {"route": "inductor", "bucket": "b1", "note": 7, "case": SEED_CASE})
    w.file("seed-entry.json", {"case": SEED_CASE, "note": "a seed entry, not a known bug"})
    w.link("loop-a.json", os.path.join(w.root, "loop-b.json"))
    w.link("loop-b.json", os.path.join(w.root, "loop-a.json"))
    w.folder("entries-with-fifo")
    w.fifo("entries-with-fifo/one.json")
    # results files
    w.results("bucket-list.jsonl", {**RECORD, "bucket": ["b1"]})
    w.results("deep.jsonl", "[" * 100_000 + "]" * 100_000)
    w.results("deep-field.jsonl", {**RECORD, "second_size": nested(80)})
    w.results("ops-number.jsonl", {**RECORD, "ops": 5})
    w.results("case-text.jsonl", {**RECORD, "case": "relu(x)"})
    w.results("node-op-number.jsonl", {**RECORD, "case": {**SEED_CASE, "nodes": [{"op": 3}]}})
    w.results("shape-text.jsonl", {**RECORD, "case": {**SEED_CASE, "inputs": [{"shape": ["2"]}]}})
    w.results("n-nodes-text.jsonl", {**RECORD, "n_nodes": "one"})
    w.results("op-errors-list.jsonl", {**RECORD, "op_errors": [1, 2]})
    w.results("status-number.jsonl", {**RECORD, "status": 0})
    w.results("known-text.jsonl", {**RECORD, "known": "yes"})
    w.results("time-text.jsonl", {**RECORD, "t_case": "1s"})
    w.results("artifacts-number.jsonl", {**RECORD, "artifacts": 42})
    w.file("long-line.jsonl", b'{"x": "' + b"y" * (17 * MiB) + b'"}\n')
    w.sparse("huge.jsonl", 5 << 30)
    w.fifo("fifo.jsonl")
    w.link("zero-run/results.jsonl", "/dev/zero")
    w.add("zero-run", os.path.join(w.root, "zero-run"))
    w.folder("dir-run/results.jsonl")
    w.add("dir-run", os.path.join(w.root, "dir-run"))
    # run folders whose record points its artifacts elsewhere
    for name, artifacts in (("abs", secret), ("dotdot", "../secret"), ("link", "artifacts/inductor/link"),
                            ("dotdot-inside", "artifacts/../../secret"), ("run-itself", "artifacts")):
        w.folder(f"run-{name}/artifacts/inductor/c1")
        w.results(f"run-{name}/results.jsonl", {**RECORD, "artifacts": artifacts})
        w.add(f"run-{name}", os.path.join(w.root, f"run-{name}"))
    w.link("run-link/artifacts/inductor/link", secret)
    # bucket histories
    w.folder("history-dir")
    w.fifo("history-fifo.sqlite")
    w.folder("legacy-dir.json")
    w.sparse("history-huge.sqlite", 5 << 30)
    _history(w, "history-outside.sqlite", {**RECORD, "artifacts": secret})
    w.folder("r/artifacts")
    _history(w, "history-dotdot.sqlite", {**RECORD, "artifacts": "x"},
             record_sql=json.dumps({**RECORD, "artifacts": os.path.join(w.root, "r/artifacts/../../secret")}))
    w.folder("run-h/artifacts/inductor")
    w.link("run-h/artifacts/inductor/c1", secret)
    _history(w, "history-link.sqlite", {**RECORD, "artifacts": os.path.join(w.root, "run-h/artifacts/inductor/c1")})
    _history(w, "history-list.sqlite", RECORD, record_sql="[1, 2]")
    _history(w, "history-route-number.sqlite", RECORD, record_sql=json.dumps({**RECORD, "route": 5}))
    # kernel captures
    w.launch("launch-not-json", "{nope")
    w.launch("launch-list", "[1, 2]")
    w.launch("launch-deep", "[" * 100_000 + "]" * 100_000)
    w.launch("launch-no-name", {k: v for k, v in launch_meta().items() if k != "kernel_name"})
    w.launch("launch-name-code", launch_meta(kernel_name="k; import os"))
    w.launch("launch-grid-text", launch_meta(grid="1,1,1"))
    w.launch("launch-grid-negative", launch_meta(grid=[-1]))
    w.launch("launch-source-up", launch_meta(source="../../../../etc/passwd"))
    w.launch("launch-source-abs", launch_meta(source="/etc/passwd"))
    w.launch("launch-buffer-up", launch_meta(buffers={"buf0": {"dtype": "float32", "before": "../../x"}}))
    w.launch("launch-buffers-list", launch_meta(buffers=[1]))
    w.launch("launch-dtype-bogus", launch_meta(buffers={"buf0": {"dtype": "float99", "before": None}}))
    w.launch("launch-size-negative", with_arg(size=[-4]))
    w.launch("launch-stride-rank", with_arg(stride=[1, 1]))
    w.launch("launch-unknown-buffer", with_arg(buffer="buf9"))
    w.launch("launch-arg-kind", with_arg(kind="pointer"))
    w.launch("launch-offset-text", with_arg(storage_offset="0"))
    w.launch("launch-constexprs-list", launch_meta(constexprs=[8]))
    w.launch("launch-wrong-format", launch_meta(format="something-else"))
    w.launch("launch-fifo", None)
    w.fifo("launch-fifo/launch.json")
    w.launch("launch-dir", None)
    w.folder("launch-dir/launch.json")
    w.launch("launch-huge", None)
    w.sparse("launch-huge/launch.json", 17 * MiB)
    w.launch("launch-buffer-fifo", launch_meta(buffers={"buf0": {"dtype": "float32", "before": "pipe.bin"}}))
    w.fifo("launch-buffer-fifo/pipe.bin")
    w.launch("launch-kernel-fifo", launch_meta(source="kernel-pipe.py"))
    w.fifo("launch-kernel-fifo/kernel-pipe.py")
    w.launch("launch-buffer-zero", launch_meta(buffers={"buf0": {"dtype": "float32", "before": "zero.bin"}}))
    w.link("launch-buffer-zero/zero.bin", "/dev/zero")
    for name, launches in (("index-text", "000_k"), ("index-up", ["../../secret"]), ("index-numbers", [0])):
        w.file(f"{name}/index.json", {"format": "torchsim-diff.kernel-capture", "schema": 1, "launches": launches})
        w.add(name, os.path.join(w.root, name))
    w.file("index-nested/kernels/index.json", "[" * 5000 + "]" * 5000)
    w.add("index-nested", os.path.join(w.root, "index-nested"))


def _history(w: World, name: str, record: dict, *, record_sql: str | None = None) -> str:
    """A bucket history holding `record`; `record_sql` replaces its stored JSON as a crafted file would."""
    from torchsim_diff.results.record import Record
    from torchsim_diff.triage.bucket_history import BucketStore
    path = os.path.join(w.root, name)
    store = BucketStore(path)
    store.add(Record.from_dict(record))
    store.close()
    if record_sql is not None:
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("UPDATE buckets SET record = ?", (record_sql,))
    return w.add(name, path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    w = World(tmp_path_factory.mktemp("hostile"))
    _make_world(w)
    return w


# -- the rows --------------------------------------------------------------------------------
# (id, argv with {name} placeholders, fragment of the one line). Rows run in this process.
HOSTILE = [
    # fuzz: route options
    ("route-option key with a space", [*FUZZ, "--routes", "eager,inductor", "--route-option", "inductor.a b=1"],
     "'a b' is not an option name"),
    ("route-option key undecodable", [*FUZZ, "--routes", "eager,inductor", "--route-option", "inductor.\udcff=1"],
     "is not an option name"),
    ("route-option key empty", [*FUZZ, "--routes", "eager,inductor", "--route-option", "inductor.=1"],
     "'' is not an option name"),
    ("route-option key unknown", [*FUZZ, "--routes", "eager,inductor", "--route-option", "inductor.vlen=256"],
     "route inductor has no option 'vlen'"),
    ("route-option for a route without options", [*FUZZ, "--route-option", "eager.fast=1"],
     "route eager has no option 'fast'; it takes no options"),
    ("route-option for a route not run", [*FUZZ, "--route-option", "spike.vlen=256"],
     "which --routes eager does not run"),
    ("route-option value a unicode digit", [*FUZZ, "--routes", "eager,inductor", "--route-option",
                                            "inductor.dynamic=²"],
     "dynamic='²' is not true, false or mixed"),
    ("route-option spike timeout nan", [*FUZZ, "--routes", "spike", "--route-option", "spike.timeout_s=nan"],
     "timeout_s=nan must be a finite positive number"),
    ("route-option spike timeout inf", [*FUZZ, "--routes", "spike", "--route-option", "spike.timeout_s=inf"],
     "timeout_s=inf must be a finite positive number"),
    ("route-option spike vlen odd", [*FUZZ, "--routes", "spike", "--route-option", "spike.vlen=3"],
     "vlen=3 is not supported"),
    ("route-option triton capture not boolean", [*FUZZ, "--routes", "triton", "--route-option", "triton.capture=maybe"],
     "capture='maybe' is not a boolean"),
    ("route-option triton launcher malformed", [*FUZZ, "--routes", "triton", "--route-option", "triton.launcher=os"],
     "launcher='os' is not 'module:Class'"),
    ("route-option triton-spike compile setting", [*FUZZ, "--routes", "triton-spike", "--route-option",
                                                   "triton-spike.dynamic=true"], "has no option 'dynamic'"),
    ("route-option torchsim timeout negative", [*FUZZ, "--routes", "torchsim-mlir", "--route-option",
                                                "torchsim-mlir.gem5_timeout_s=-1"], "gem5_timeout_s='-1' must be"),
    ("route-option torchsim verify unknown", [*FUZZ, "--routes", "torchsim-mlir", "--route-option",
                                              "torchsim-mlir.verify=loud"], "verify='loud'"),
    ("route-option torchsim spike_jobs zero", [*FUZZ, "--routes", "torchsim-triton", "--route-option",
                                               "torchsim-triton.spike_jobs=0"], "spike_jobs=0 is not a positive count"),
    ("route-option torchsim timing word", [*FUZZ, "--routes", "torchsim-triton", "--route-option",
                                           "torchsim-triton.timing=maybe"], "timing='maybe' is not a boolean"),
    # fuzz: numbers
    ("reduce-budget nan", [*FUZZ, "--reduce-budget", "nan"], "'nan' must be a finite number of seconds, 0 or more"),
    ("reduce-budget negative", [*FUZZ, "--reduce-budget", "-1"], "'-1' must be a finite number of seconds"),
    ("reduce-budget inf", [*FUZZ, "--reduce-budget", "inf"], "'inf' must be a finite number of seconds"),
    ("reduce-budget a word", [*FUZZ, "--reduce-budget", "soon"], "'soon' is not a number of seconds"),
    ("repeat 10**20", [*FUZZ, "--repeat", str(10**20)], "is over the cap of 100 runs per case"),
    ("repeat 101", [*FUZZ, "--repeat", "101"], "'101' is over the cap of 100 runs per case"),
    ("max-nodes 10**9", [*FUZZ, "--max-nodes", str(10**9)], "is over the cap of 100 nodes per graph"),
    ("batch 0", [*FUZZ, "--batch", "0"], "'0' is not a positive integer"),
    ("shards without ray", [*FUZZ, "--shards", "4"], "--shards 4 applies only with --ray"),
    ("shards 0 with ray", [*FUZZ, "--ray", "local", "--shards", "0"], "'0' is not a positive integer"),
    ("budget nan", [*FUZZ, "--budget", "nan"], "budget='nan' is not a duration"),
    # fuzz: filters that leave nothing to draw
    ("float-only op with int32", [*FUZZ, "--ops", "exp", "--dtype", "int32"],
     "--ops exp with --dtype int32 leaves nothing to draw: no op there takes dtype int32"),
    ("ops outside their families", [*FUZZ, "--ops", "relu", "--families", "matmul"],
     "none of those ops is in those families"),
    ("float-only family with int64", [*FUZZ, "--families", "normalization", "--dtype", "int64"],
     "--families normalization with --dtype int64 leaves nothing to draw"),
    # fuzz: paths
    ("known-bugs missing", [*FUZZ, "--known-bugs", "{root}/no-such-folder"], "no-such-folder does not exist"),
    ("known-bugs a file", [*FUZZ, "--known-bugs", "{a_file}"], "a_file is not a folder"),
    ("results file is a folder", [*FUZZ, "--out", "{dir_run}"],
     "results.jsonl is a folder; the results file must be a regular file"),
    ("bucket history a folder", [*FUZZ, "--buckets", "{history_dir}"], "a folder, not a regular file"),
    ("bucket history over its cap", [*FUZZ, "--buckets", "{history_huge_sqlite}"],
     "over the 4 GiB cap on bucket histories"),
    ("legacy bucket history a folder", [*FUZZ, "--buckets", "{legacy_dir_json}"], "a folder, not a regular file"),
    ("bucket history under a file", [*FUZZ, "--buckets", "{a_file}/h.sqlite"], "cannot be created"),
    # replay
    ("replay case over the cap", ["replay", "{huge_json}", "--routes", "eager"], "over the 64 MiB cap on case files"),
    ("replay case nested 100000 deep", ["replay", "{deep_json}", "--routes", "eager"], "nested deeper than 64 levels"),
    ("replay entry with a note nested 100 deep", ["replay", "{deep_note_json}", "--routes", "eager"],
     "nested deeper than 64 levels"),
    ("replay case not UTF-8", ["replay", "{latin1_json}", "--routes", "eager"], "not UTF-8 text"),
    ("replay entry route a list", ["replay", "{route_list_json}", "--routes", "eager"],
     "route=['inductor'] must be text"),
    ("replay entry bucket an object", ["replay", "{bucket_object_json}", "--routes", "eager"],
     "bucket={'id': 1} must be text"),
    ("replay case a symlink loop", ["replay", "{loop_a_json}", "--routes", "eager"], "no such file"),
    ("replay folder holding a FIFO entry", ["replay", "{entries_with_fifo}", "--routes", "eager"],
     "a FIFO, not a regular file"),
    # reduce
    ("reduce FIFO case", ["reduce", "{fifo_json}", "--route", "eager"], "a FIFO, not a regular file"),
    ("reduce case over the cap", ["reduce", "{huge_json}", "--route", "eager"], "over the 64 MiB cap on case files"),
    ("reduce case nested deep", ["reduce", "{deep_json}", "--route", "eager"], "nested deeper than 64 levels"),
    ("reduce output a folder", ["reduce", "{good_json}", "--route", "eager", "--output", "{root}"],
     "is a folder, not a file"),
    ("reduce output under a file", ["reduce", "{good_json}", "--route", "eager", "--output", "{a_file}/r.json"],
     "a_file' is a file, not a folder"),
    # export: a bucket id from run folders
    ("export --to an existing file", ["export", "b1", "--to", "{a_file}", "--from", "{run_abs}"],
     "is a file, not a folder"),
    ("export --to under a file", ["export", "b1", "--to", "{a_file}/bundle", "--from", "{run_abs}"],
     "cannot be created"),
    ("export --from missing", ["export", "b1", "--to", "{tmp}/b", "--from", "{root}/no-such-run"],
     "no-such-run: no such run folder or results file"),
    ("export bucket id a JSON list", ["export", "b1", "--to", "{tmp}/b", "--from", "{bucket_list_jsonl}"],
     "a record whose bucket is not text or null"),
    ("export artifacts an absolute path elsewhere", ["export", "b1", "--to", "{tmp}/b", "--from", "{run_abs}"],
     "lies outside its run folder's artifacts/"),
    ("export artifacts through ..", ["export", "b1", "--to", "{tmp}/b", "--from", "{run_dotdot}"],
     "artifact folder '../secret' lies outside"),
    ("export artifacts through a symlink", ["export", "b1", "--to", "{tmp}/b", "--from", "{run_link}"],
     "artifact folder 'artifacts/inductor/link' lies outside"),
    ("export artifacts through artifacts/..", ["export", "b1", "--to", "{tmp}/b", "--from", "{run_dotdot_inside}"],
     "'artifacts/../../secret' lies outside"),
    ("export artifacts the whole artifacts folder", ["export", "b1", "--to", "{tmp}/b", "--from", "{run_run_itself}"],
     "artifact folder 'artifacts' lies outside"),
    ("export artifacts a number", ["export", "b1", "--to", "{tmp}/b", "--from", "{artifacts_number_jsonl}"],
     "a record whose artifacts is not a folder name or null"),
    ("export results FIFO", ["export", "b1", "--to", "{tmp}/b", "--from", "{fifo_jsonl}"],
     "a FIFO, not a regular file"),
    ("export results nested deep", ["export", "b1", "--to", "{tmp}/b", "--from", "{deep_jsonl}"],
     "nested deeper than 64 levels"),
    # export: a bucket id from the bucket history
    ("export history a folder", ["export", "b1", "--to", "{tmp}/b", "--buckets", "{history_dir}"],
     "a folder, not a regular file"),
    ("export history artifacts outside any run", ["export", "b1", "--to", "{tmp}/b", "--buckets",
                                                  "{history_outside_sqlite}"], "is not in a run folder's artifacts/"),
    ("export history artifacts through ..", ["export", "b1", "--to", "{tmp}/b", "--buckets", "{history_dotdot_sqlite}"],
     "is not in a run folder's artifacts/"),
    ("export history artifacts through a symlink", ["export", "b1", "--to", "{tmp}/b", "--buckets",
                                                    "{history_link_sqlite}"],
     "lies outside its run folder's artifacts/"),
    ("export history record a list", ["export", "b1", "--to", "{tmp}/b", "--buckets", "{history_list_sqlite}"],
     "its record is unusable"),
    ("export history route a number", ["export", "b1", "--to", "{tmp}/b", "--buckets",
                                       "{history_route_number_sqlite}"], "a record whose route is not text"),
    # export: a corpus entry
    ("export entry FIFO", ["export", "{fifo_json}", "--to", "{tmp}/b"], "a FIFO, not a regular file"),
    ("export entry over the cap", ["export", "{huge_json}", "--to", "{tmp}/b"], "over the 64 MiB cap"),
    ("export entry route a list", ["export", "{route_list_json}", "--to", "{tmp}/b"],
     "route=['inductor'] must be text"),
    ("export entry note a number", ["export", "{note_number_json}", "--to", "{tmp}/b"], "note=7 must be text"),
    ("export a seed entry", ["export", "{seed_entry_json}", "--to", "{tmp}/b"], "not a known-bug entry"),
    # table
    ("table line nested 100000 deep", ["table", "{deep_jsonl}"], "1 JSON nested deeper than 64 levels"),
    ("table field nested 80 deep", ["table", "{deep_field_jsonl}"], "JSON nested deeper than 64 levels"),
    ("table bucket a list", ["table", "{bucket_list_jsonl}"], "a record whose bucket is not text or null"),
    ("table ops a number", ["table", "{ops_number_jsonl}"], "a record whose ops is not a list of op names"),
    ("table case text", ["table", "{case_text_jsonl}"], "a record whose case is not a case object or null"),
    ("table case node op a number", ["table", "{node_op_number_jsonl}"], "whose case is not a case object"),
    ("table case shape text", ["table", "{shape_text_jsonl}"], "whose case is not a case object"),
    ("table n_nodes text", ["table", "{n_nodes_text_jsonl}"], "a record whose n_nodes is not a number or null"),
    ("table op_errors a list", ["table", "{op_errors_list_jsonl}"], "a record whose op_errors is not an object"),
    ("table status a number", ["table", "{status_number_jsonl}"], "a record whose status is not text"),
    ("table known text", ["table", "{known_text_jsonl}"], "a record whose known is not true or false"),
    ("table t_case text", ["table", "{time_text_jsonl}"], "a record whose t_case is not a number or null"),
    ("table a line over its cap", ["table", "{long_line_jsonl}"], "a line over the 16 MiB cap on results lines"),
    ("table results over its cap", ["table", "{huge_jsonl}"], "over the 4 GiB cap on results files"),
    ("table results FIFO", ["table", "{fifo_jsonl}"], "unreadable file (a FIFO, not a regular file"),
    ("table results.jsonl a folder", ["table", "{dir_run}"], "no results*.jsonl found"),
    ("table history a folder", ["table", "{bucket_list_jsonl}", "--tables", "history", "--buckets", "{history_dir}"],
     "bucket history"),
    # kernel replay
    ("launch.json not JSON", ["kernel", "replay", "{launch_not_json}"], "not valid JSON"),
    ("launch.json a list", ["kernel", "replay", "{launch_list}"], "holds list JSON; expected an object"),
    ("launch.json nested deep", ["kernel", "replay", "{launch_deep}"], "nested deeper than 64 levels"),
    ("launch.json without kernel_name", ["kernel", "replay", "{launch_no_name}"], "kernel_name=None must be"),
    ("launch.json kernel_name code", ["kernel", "replay", "{launch_name_code}"], "must be a Python identifier"),
    ("launch.json grid text", ["kernel", "replay", "{launch_grid_text}"], "grid='1,1,1' must be a list"),
    ("launch.json grid negative", ["kernel", "replay", "{launch_grid_negative}"], "grid=[-1] must be a list"),
    ("launch.json source up the tree", ["kernel", "replay", "{launch_source_up}"],
     "must be a file name inside the launch folder"),
    ("launch.json source absolute", ["kernel", "replay", "{launch_source_abs}"],
     "source='/etc/passwd' must be a file name inside"),
    ("launch.json buffer up the tree", ["kernel", "replay", "{launch_buffer_up}"],
     "buffers.buf0.before='../../x' must be null or a file name inside"),
    ("launch.json buffers a list", ["kernel", "replay", "{launch_buffers_list}"], "buffers=[1] must be an object"),
    ("launch.json dtype bogus", ["kernel", "replay", "{launch_dtype_bogus}"], "unknown dtype 'float99'"),
    ("launch.json size negative", ["kernel", "replay", "{launch_size_negative}"], "args[0].size=[-4] must be"),
    ("launch.json stride of another rank", ["kernel", "replay", "{launch_stride_rank}"], "args[0].stride=[1, 1]"),
    ("launch.json arg on an unknown buffer", ["kernel", "replay", "{launch_unknown_buffer}"],
     "args[0].buffer='buf9' must be one of the buffers"),
    ("launch.json arg kind unknown", ["kernel", "replay", "{launch_arg_kind}"], "args[0].kind='pointer'"),
    ("launch.json offset text", ["kernel", "replay", "{launch_offset_text}"], "args[0].storage_offset='0'"),
    ("launch.json constexprs a list", ["kernel", "replay", "{launch_constexprs_list}"],
     "constexprs=[8] must be an object"),
    ("launch.json format foreign", ["kernel", "replay", "{launch_wrong_format}"], "format='something-else'"),
    ("launch.json FIFO", ["kernel", "replay", "{launch_fifo}/launch.json"], "a FIFO, not a regular file"),
    ("launch.json a folder", ["kernel", "replay", "{launch_dir}"], "a folder, not a regular file"),
    ("launch.json over its cap", ["kernel", "replay", "{launch_huge}"], "over the 16 MiB cap on launch.json files"),
    ("kernel buffer FIFO", ["kernel", "replay", "{launch_buffer_fifo}"], "pipe.bin: cannot read: a FIFO"),
    ("kernel source FIFO", ["kernel", "replay", "{launch_kernel_fifo}"], "kernel-pipe.py: cannot read: a FIFO"),
    ("capture index launches text", ["kernel", "replay", "{index_text}"], "launches='000_k' must be a list"),
    ("capture index launch up the tree", ["kernel", "replay", "{index_up}"], "must be a list of launch folder names"),
    ("capture index launch a number", ["kernel", "replay", "{index_numbers}"], "launches=[0]"),
    ("capture index nested deep", ["kernel", "replay", "{index_nested}"], "nested deeper than 64 levels"),
    # routes and ops
    ("routes name undecodable", ["routes", "--routes", "\udcff"], "unknown route '\\udcff'"),
    ("routes format unknown", ["routes", "--format", "yaml"], "invalid choice: 'yaml'"),
    ("routes stray argument", ["routes", "extra"], "unrecognized arguments: extra"),
    ("ops format unknown", ["ops", "--format", "xml"], "invalid choice: 'xml'"),
    ("ops format empty", ["ops", "--format", ""], "invalid choice: ''"),
    ("ops stray argument", ["ops", "relu"], "unrecognized arguments: relu"),
]

# Rows whose regression would block the reader or read without end: run in a child with a time
# limit and an address-space limit (a read of /dev/zero stops at it instead of the machine's memory).
IN_A_CHILD = [
    ("replay FIFO case", ["replay", "{fifo_json}", "--routes", "eager"], "a FIFO, not a regular file"),
    ("replay case a symlink to /dev/zero", ["replay", "{zero_json}", "--routes", "eager"],
     "a character device, not a regular file"),
    ("table results a symlink to /dev/zero", ["table", "{zero_run}"], "a character device, not a regular file"),
    ("table history FIFO", ["table", "{bucket_list_jsonl}", "--tables", "history", "--buckets",
                            "{history_fifo_sqlite}"], "a FIFO, not a regular file"),
    ("export history FIFO", ["export", "b1", "--to", "{root}/never", "--buckets", "{history_fifo_sqlite}"],
     "a FIFO, not a regular file"),
    ("kernel buffer a symlink to /dev/zero", ["kernel", "replay", "{launch_buffer_zero}"],
     "buffers.buf0.before='zero.bin' must be null or a file name inside the launch folder"),
]


def _argv(argv, world, tmp_path) -> list:
    return [a.format(**world.paths, tmp=tmp_path) for a in argv]


def _one_clean_line(code, out, err, fragment):
    assert code == 2, (code, out, err)
    assert "Traceback" not in out + err, err
    assert err.count("\n") == 1 and err.startswith("torchsim-diff: error:"), err
    assert fragment in err, err


@contextlib.contextmanager
def _fifos_end(fifos, after_s: float = 3.0):
    """Should the command block opening or reading one of `fifos` (the bug these rows guard
    against), a writer opens it after `after_s` and closes at once: the reader sees end of
    file and goes on, so the row fails on its message instead of hanging."""
    done = threading.Event()

    def unblock():
        if done.wait(after_s):
            return
        while not done.is_set():
            for path in fifos:
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:
                    pass                  # no reader waiting on it
            done.wait(0.05)

    thread = threading.Thread(target=unblock, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.mark.parametrize("argv,fragment", [r[1:] for r in HOSTILE], ids=[r[0] for r in HOSTILE])
def test_hostile_input_is_one_line_and_exit_2(world, tmp_path, capsys, argv, fragment):
    from torchsim_diff.cli import main
    argv = _argv(argv, world, tmp_path)
    with _fifos_end(world.fifos):
        code = main(argv)
    captured = capsys.readouterr()
    _one_clean_line(code, captured.out, captured.err, fragment)
    assert not os.path.exists(tmp_path / "run"), "fuzz started work before refusing its options"
    assert not os.path.exists(tmp_path / "b") or not os.listdir(tmp_path / "b"), "export wrote a bundle"


def _address_space_limit():
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))


@pytest.mark.parametrize("argv,fragment", [r[1:] for r in IN_A_CHILD], ids=[r[0] for r in IN_A_CHILD])
def test_hostile_input_that_could_hang_is_one_line_and_exit_2(world, tmp_path, argv, fragment):
    done = subprocess.run([sys.executable, "-m", "torchsim_diff", *_argv(argv, world, tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, preexec_fn=_address_space_limit)
    _one_clean_line(done.returncode, done.stdout, done.stderr, fragment)


def test_there_are_at_least_70_hostile_inputs():
    rows = HOSTILE + IN_A_CHILD
    assert len(rows) >= 70 and len({r[0] for r in rows}) == len(rows)


# -- what the rules keep working ---------------------------------------------------------------
def test_a_bad_line_among_good_ones_is_skipped_and_counted(world, tmp_path, capsys):
    from torchsim_diff.cli import main
    good = {**RECORD, "status": "pass", "bucket": None, "kind": None}
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (good, {**RECORD, "bucket": ["b1"]}, good)) + "\n")
    assert main(["table", str(path), "--tables", "summary"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 1 unreadable line(s)" in err and "bucket is not text" in err


def test_records_store_artifacts_relative_to_their_run_folder(tmp_path):
    """Written relative (a run folder can move), read back absolute inside it."""
    from torchsim_diff.results.jsonl import ResultsWriter, read_records
    from torchsim_diff.results.record import Record
    run = tmp_path / "run"
    (run / "artifacts" / "inductor" / "c1").mkdir(parents=True)
    with ResultsWriter(str(run / "results.jsonl")) as writer:
        elsewhere = tmp_path / "elsewhere" / "artifacts" / "inductor" / "c0"
        writer.write(Record.from_dict({**RECORD, "artifacts": str(run / "artifacts" / "inductor" / "c1"),
                                       "reduced_artifacts": str(elsewhere)}))
    stored = json.loads((run / "results.jsonl").read_text())
    assert stored["artifacts"] == os.path.join("artifacts", "inductor", "c1")
    assert stored["reduced_artifacts"] is None          # another run's folder is not this run's to name
    moved = tmp_path / "moved"
    os.rename(run, moved)
    (record,) = read_records(str(moved / "results.jsonl"))
    assert record.artifacts == os.path.realpath(moved / "artifacts" / "inductor" / "c1")


def test_an_old_record_with_an_absolute_artifact_folder_still_exports(world, tmp_path, capsys):
    """It exports; and where bundles copy run files, regular files only: a FIFO and a symlink
    out of the folder stay behind."""
    from torchsim_diff.cli import main
    run = tmp_path / "run"
    artifacts = run / "artifacts" / "inductor" / "c1"
    artifacts.mkdir(parents=True)
    (artifacts / "kernel.py").write_text("k = 1\n")
    os.mkfifo(artifacts / "pipe")
    os.symlink(os.path.join(world.paths["secret"], "id_rsa"), artifacts / "leak")
    (run / "results.jsonl").write_text(json.dumps({**RECORD, "artifacts": str(artifacts)}) + "\n")
    assert main(["export", "b1", "--to", str(tmp_path / "bundle"), "--from", str(run)]) == 0, capsys.readouterr()
    assert not os.path.exists(tmp_path / "bundle" / "artifacts")      # repro.py needs torch alone: no run files
    from torchsim_diff.report.bundles import _copy_artifacts         # where a bundle does carry them
    assert _copy_artifacts(str(artifacts), str(tmp_path / "copy" / "artifacts")) == ["artifacts/kernel.py"]


def test_an_old_record_with_artifacts_relative_to_where_the_campaign_ran_still_resolves(tmp_path, monkeypatch):
    from torchsim_diff.results.jsonl import read_records
    run = tmp_path / "reports" / "run1"
    (run / "artifacts" / "inductor" / "c1").mkdir(parents=True)
    (run / "results.jsonl").write_text(json.dumps({**RECORD, "artifacts": "reports/run1/artifacts/inductor/c1"}) + "\n")
    monkeypatch.chdir(tmp_path)
    (record,) = read_records(str(run / "results.jsonl"))
    assert record.artifacts == os.path.realpath(run / "artifacts" / "inductor" / "c1")


def test_a_bundle_carries_the_runs_sources_and_ir_not_its_objects_buffers_or_caches(tmp_path):
    from torchsim_diff.report.bundles import _copy_artifacts, _keep_shipped
    run = tmp_path / "run"
    for name in ("artifacts/k/kernel.ttir", "artifacts/k/kernel.linalg.mlir", "artifacts/k/kernel.ll",
                 "artifacts/k/buffers/buf0.bin", "artifacts/k/launch.json", "workers/cache/x.py", "localised.sqlite"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("x")
    assert _copy_artifacts(str(run / "artifacts"), str(tmp_path / "b" / "artifacts")) == \
        ["artifacts/k/kernel.linalg.mlir", "artifacts/k/kernel.ttir", "artifacts/k/launch.json"]
    _keep_shipped(str(run))
    kept = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())
    assert kept == ["artifacts/k/kernel.linalg.mlir", "artifacts/k/kernel.ttir", "artifacts/k/launch.json"]


# -- text from records reaches a terminal or a spreadsheet only as data -------------------
HOSTILE_TITLE = "relu\x1b]0;owned\x07 and \x1b[2J cleared"


def _ledger_with_title(tmp_path, title: str) -> str:
    from tests.conftest import make_case
    case = make_case(nodes=[{"id": "v0", "op": "relu", "args": ["x0"], "attrs": {}}],
                     inputs=[("x0", [2], [1], 0, 2, {})], outputs=["v0"])
    folder = tmp_path / "known" / "a-cause"
    folder.mkdir(parents=True)
    (folder / "cause.json").write_text(json.dumps({"title": title, "project": "pytorch", "status": "new"}))
    (folder / "e.json").write_text(json.dumps({"route": "inductor", "kind": "wrong_values", "bucket": "=1+2",
                                               "signature": "inductor|wrong_values|relu|output",
                                               "cause": "inductor|wrong_values|relu|any", "case": case.to_dict()}))
    return str(tmp_path / "known")


def test_terminal_escapes_in_a_title_are_printed_as_text(tmp_path, capsys):
    from torchsim_diff.cli import main
    assert main(["causes", "--known-bugs", _ledger_with_title(tmp_path, HOSTILE_TITLE)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "relu\\x1b]0;owned\\x07 and \\x1b[2J cleared" in out


def test_a_csv_cell_a_spreadsheet_would_evaluate_is_quoted(tmp_path, capsys):
    from torchsim_diff.cli import main
    assert main(["causes", "--known-bugs", _ledger_with_title(tmp_path, "=HYPERLINK(\"https://x\")"),
                 "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "'=HYPERLINK" in out and ",=HYPERLINK" not in out and '"=HYPERLINK' not in out
