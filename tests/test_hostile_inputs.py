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
    w.results("good.jsonl", RECORD)
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
    w.launch("launch-good", launch_meta())
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
    # run folders whose inside is not the run's to write
    w.link("out-report-link/report.html", os.path.join(secret, "id_rsa"))
    w.link("out-artifacts-link/artifacts", secret)
    w.folder("out-report-dir/report.html")
    w.file("out-buckets-file/buckets", "x")
    for name in ("out-report-link", "out-artifacts-link", "out-report-dir", "out-buckets-file"):
        w.add(name, os.path.join(w.root, name))


def _history(w: World, name: str, record: dict, *, record_sql: str | None = None) -> str:
    """A bucket history holding `record`; `record_sql` replaces its stored JSON as a crafted file would."""
    from torchsim_diff.results.record import Record
    from torchsim_diff.buckets.bucket_history import BucketStore
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
    ("budget of 400 nines", [*FUZZ, "--budget", "9" * 400], "is over 30 days; pass at most 720h"),
    ("budget of 31 days", [*FUZZ, "--budget", "744h"], "budget='744h' is over 30 days"),
    ("timeout 1e308", [*FUZZ, "--timeout", "1e308"], "'1e308' is over a day; pass at most 86400 seconds"),
    ("timeout of nine days (past select's limit)", [*FUZZ, "--timeout", str(9 * 86400)], "'777600' is over a day"),
    ("reduce-budget 1e308", [*FUZZ, "--reduce-budget", "1e308"], "'1e308' is over a day"),
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
    ("out with report.html a symlink", [*FUZZ, "--out", "{out_report_link}"],
     "report.html is a symbolic link: a run writes only into its own folder"),
    ("out with artifacts a symlink", [*FUZZ, "--out", "{out_artifacts_link}"], "artifacts is a symbolic link"),
    ("out with report.html a folder", [*FUZZ, "--out", "{out_report_dir}"],
     "report.html is a folder where the run writes a file"),
    ("out with buckets a file", [*FUZZ, "--out", "{out_buckets_file}"], "buckets is a file where the run makes a folder"),
    ("out a 600-character folder name", [*FUZZ, "--out", "{root}/" + "d" * 600],
     "holds a name of 600 characters; the file system takes at most 255 bytes per name"),
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
    ("reduce jobs 10000", ["reduce", "{good_json}", "--route", "eager", "--jobs", "10000"],
     f"'10000' is over the cap of {os.cpu_count()} jobs (one per core here)"),
    ("reduce timeout 1e308", ["reduce", "{good_json}", "--route", "eager", "--timeout", "1e308"], "is over a day"),
    ("replay timeout 1e308", ["replay", "{good_json}", "--routes", "eager", "--timeout", "1e308"], "is over a day"),
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


# -- folders the user cannot write ---------------------------------------------------------
@contextlib.contextmanager
def read_only_folder(folder, fill=lambda folder: None):
    """`folder`, holding what `fill(folder)` writes there, made read-only: a tmpfs remounted
    read-only when root (root writes through permissions), else a chmod'ed folder."""
    if os.geteuid() != 0:
        fill(folder)
        os.chmod(folder, 0o500)
        try:
            yield folder
        finally:
            os.chmod(folder, 0o700)
        return
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        fill(folder)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)     # lazy: a file left open does not keep it


def test_a_read_only_current_folder_without_out_is_one_line_before_any_work(tmp_path, monkeypatch, capsys):
    from torchsim_diff.cli import main
    here = tmp_path / "here"
    here.mkdir()
    with read_only_folder(here):
        monkeypatch.chdir(here)
        try:
            code = main([a for a in FUZZ if "{tmp}" not in a and a != "--out"])
        finally:
            monkeypatch.chdir(tmp_path)         # out of the folder before it is unmounted
    captured = capsys.readouterr()
    _one_clean_line(code, captured.out, captured.err, "no --out given, and the default run folder 'reports/run-")
    assert "is not writable" in captured.err and "pass another folder with --out" in captured.err


# -- the bucket history is verified before it is trusted ------------------------------------
def _made_history(folder, bucket: str = "b1") -> str:
    from torchsim_diff.results.record import Record
    from torchsim_diff.buckets.bucket_history import BucketStore
    path = os.path.join(folder, "h.sqlite")
    store = BucketStore(path)
    store.add(Record.from_dict({**RECORD, "bucket": bucket}))
    store.settle(bucket)
    store.close()
    return path


def _table_history(capsys, results, history) -> tuple:
    from torchsim_diff.cli import main
    code = main(["table", str(results), "--tables", "history", "--buckets", str(history)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.out, captured.err


def _other_applications_file(path) -> bytes:
    """An SQLite file of another application, in rollback-journal mode."""
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('mine')")
    return open(path, "rb").read()


def test_a_file_the_tool_did_not_make_is_refused_in_one_line_and_left_as_it_is(world, tmp_path, capsys):
    from torchsim_diff.cli import main
    results = world.paths["good_jsonl"]
    foreign = tmp_path / "notes.sqlite"
    before = _other_applications_file(foreign)
    old_results = tmp_path / "old" / "results.jsonl"
    old_results.parent.mkdir()
    old_results.write_text(json.dumps(RECORD) + "\n")
    runs = tmp_path / "runs"
    for argv, fragment in ((["table", results, "--tables", "history", "--buckets", str(foreign)],
                            "its table(s) 'notes' are not ours"),
                           (_argv([*FUZZ, "--buckets", str(foreign), "--out", str(runs / "a")], world, tmp_path),
                            "is no history torchsim-diff made"),
                           (_argv([*FUZZ, "--buckets", str(old_results), "--out", str(runs / "b")], world, tmp_path),
                            "results.jsonl is no SQLite file")):
        code = main(argv)
        captured = capsys.readouterr()
        _one_clean_line(code, captured.out, captured.err, fragment)
    assert foreign.read_bytes() == before and sorted(os.listdir(tmp_path / "old")) == ["results.jsonl"]
    assert sorted(os.listdir(tmp_path)) == ["notes.sqlite", "old"], "a refused history was renamed or a run began"


def test_a_read_command_changes_nothing_and_reads_a_history_in_a_read_only_folder(world, tmp_path, capsys):
    from torchsim_diff.buckets.history_file import COLUMNS
    results = world.paths["good_jsonl"]
    older = tmp_path / "older.sqlite"        # an earlier version's history: one table, rollback journal
    with contextlib.closing(sqlite3.connect(older)) as db, db:
        db.execute(f"CREATE TABLE buckets ({', '.join(COLUMNS['buckets'])})")
        db.execute("INSERT INTO buckets VALUES ('b-old', 'r', 'wrong_values', 'relu', 'm', 'then', 2, '[1, 1, 1]', '{}')")
    before = older.read_bytes()
    code, out, err = _table_history(capsys, results, older)
    assert code == 0 and "b-old" in out and not err, (out, err)
    assert older.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["older.sqlite"]
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    with read_only_folder(shelf, _made_history) as folder:
        code, out, err = _table_history(capsys, results, os.path.join(folder, "h.sqlite"))
    assert code == 0 and "b1" in out and not err, (out, err)


def test_a_damaged_history_in_a_read_only_folder_is_copied_aside_with_a_warning(world, tmp_path, capsys):
    damaged = b"SQLite format 3\x00" + b"\x13" * 500
    shelf = tmp_path / "shelf"
    shelf.mkdir()

    def fill(folder):
        with open(os.path.join(folder, "h.sqlite"), "wb") as handle:
            handle.write(damaged)
    with read_only_folder(shelf, fill) as folder:
        code, out, err = _table_history(capsys, world.paths["good_jsonl"], os.path.join(folder, "h.sqlite"))
        assert open(os.path.join(folder, "h.sqlite"), "rb").read() == damaged
    assert code == 0 and err.count("\n") == 1 and "could not be read" in err and "left where it is" in err, err
    copy = err.split("copied to ")[1].split(", read as empty")[0]
    assert open(copy, "rb").read() == damaged
    os.unlink(copy)


def test_a_cell_of_the_wrong_type_is_left_out_and_counted(world, tmp_path, capsys):
    path = _made_history(tmp_path, "b1")
    _made_history(tmp_path, "b2")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE buckets SET message = CAST(x'ff00fe' AS TEXT), count = 'many' WHERE bucket = 'b1'")
    code, out, err = _table_history(capsys, world.paths["good_jsonl"], path)
    assert code == 0 and "b2" in out and "b1" not in out, out
    assert err.count("\n") == 1 and "1 row(s) left out, their cells not of their column's type" in err, err


def _history_with_its_log(folder) -> tuple:
    """A history whose last buckets are still in its write-ahead log (a writer holds it open),
    copied with its log into `folder`: (path, the log's bytes)."""
    from torchsim_diff.results.record import Record
    from torchsim_diff.buckets.bucket_history import BucketStore
    live = os.path.join(folder, "live")
    os.mkdir(live)
    store = BucketStore(os.path.join(live, "h.sqlite"))
    store._db.execute("PRAGMA wal_autocheckpoint=0")
    for bucket in ("b1", "b2", "b3"):
        store.add(Record.from_dict({**RECORD, "bucket": bucket}))
    path = os.path.join(folder, "h.sqlite")
    for suffix in ("", "-wal"):
        with open(os.path.join(live, "h.sqlite" + suffix), "rb") as source, open(path + suffix, "wb") as copy:
            copy.write(source.read())
    store.close()
    return path, open(path + "-wal", "rb").read()


def test_damaged_frames_of_the_history_log_are_noticed_not_read_as_no_buckets(world, tmp_path, capsys):
    path, log = _history_with_its_log(tmp_path)
    page = int.from_bytes(log[8:12], "big")
    damaged = bytearray(log)
    damaged[32 + 24 + 100] ^= 0xFF                       # the first frame's page: every frame after it is dropped
    with open(path + "-wal", "wb") as handle:
        handle.write(damaged)
    code, out, err = _table_history(capsys, world.paths["good_jsonl"], path)
    assert code == 0 and err.count("\n") == 1, err
    frames = (len(log) - 32) // (24 + page)
    assert f"its write-ahead log holds {frames} frame(s) past a damaged one" in err, err
    copy = err.split("copied with its log to ")[1].strip()
    assert open(copy + "-wal", "rb").read() == bytes(damaged)


def test_a_torn_last_transaction_of_the_history_log_is_no_damage(world, tmp_path, capsys):
    """A writer killed mid-commit (or still writing while this reads) leaves a last frame that
    fails its checksum with no whole commit after it: SQLite rightly drops it, silently."""
    path, log = _history_with_its_log(tmp_path)
    torn = bytearray(log)
    torn[-100] ^= 0xFF                                   # the last frame's page
    with open(path + "-wal", "wb") as handle:
        handle.write(torn)
    code, out, err = _table_history(capsys, world.paths["good_jsonl"], path)
    assert code == 0 and "b1" in out and not err, (out, err)


# -- the end of a run: hang-ups, closed output, signals while starting ----------------------
class _NotTakenOver(Exception):
    pass


def _not_taken_over(signum, frame):
    raise _NotTakenOver(signum)


def test_sighup_ends_a_run_as_sigterm_does_unless_nohup_ignores_it():
    """SIGHUP raises what SIGTERM raises inside the command's block. Outside it (and should the
    block not take SIGHUP over) a handler of the test's own catches it, not the default action,
    which would end this process."""
    import signal
    import time
    from torchsim_diff.campaign.interrupts import Terminated, sigterm_as_interrupt
    outer = signal.signal(signal.SIGHUP, _not_taken_over)
    try:
        with pytest.raises(Terminated) as raised, sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(100):          # the handler runs between two bytecodes of this loop
                time.sleep(0.05)
        assert raised.value.signum == signal.SIGHUP
        signal.signal(signal.SIGHUP, signal.SIG_IGN)          # as under nohup
        with sigterm_as_interrupt():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, outer)


def test_a_signal_during_start_up_still_prints_the_summary_and_writes_the_report(tmp_path, monkeypatch, capsys):
    import signal
    from torchsim_diff.campaign import fuzz
    from torchsim_diff.campaign.interrupts import Terminated
    from torchsim_diff.cli import main

    def signal_arrives(opts):
        raise Terminated("SIGTERM received", signal.SIGTERM)
    monkeypatch.setattr(fuzz, "load_known", signal_arrives)          # the first step of the campaign's start-up
    code = main([a.format(tmp=tmp_path) for a in FUZZ])
    out = capsys.readouterr().out
    assert code == 143 and "Summary" in out and "(interrupted by SIGTERM)" in out, out
    assert os.path.isfile(tmp_path / "run" / "report.html")


def test_output_whose_reader_left_changes_neither_the_exit_status_nor_the_report(tmp_path, double_routes,
                                                                                 monkeypatch):
    """`fuzz ... | head -1`: here the pipe's reader is gone before the first line."""
    from torchsim_diff.cli import EXIT_FINDINGS, main
    read_end, write_end = os.pipe()
    os.close(read_end)
    monkeypatch.setattr(sys, "stdout", open(write_end, "w", buffering=1))
    argv = ["fuzz", "--routes", "double-wrong-element", "--ops", "relu", "--max-examples", "1", "--no-reduce",
            "--no-self-check", "--buckets", "none", "--known-bugs", "none", "--out", str(tmp_path / "run")]
    assert main(argv) == EXIT_FINDINGS
    assert os.path.isfile(tmp_path / "run" / "report.html")


# -- odd but real ---------------------------------------------------------------------------
def test_a_route_entry_that_cannot_load_a_newline_in_a_file_name_and_cuda_without_a_gpu_are_one_line(
        world, tmp_path, capsys, monkeypatch):
    from torchsim_diff.cli import main
    from torchsim_diff.routes import EXTRA_ROUTES_ENV
    monkeypatch.setenv(EXTRA_ROUTES_ENV, "gone=no_such_module_anywhere:Route,typo=tests.route_doubles:NoSuchRoute")
    broken = tmp_path / "two\nlines.json"
    broken.write_text("{nope")
    rows = [([*FUZZ, "--routes", "gone"], "route 'gone' cannot be loaded from 'no_such_module_anywhere:Route' "
                                          "(ModuleNotFoundError"),
            (["reduce", "{good_json}", "--route", "typo"], "route 'typo' cannot be loaded"),
            (["replay", str(broken), "--routes", "eager"], "two\\nlines.json")]
    import torch
    if not torch.cuda.is_available():
        rows.append((["kernel", "replay", "{launch_good}", "--executor", "cuda"],
                     "--executor cuda needs a CUDA GPU and a CUDA build of torch; none is available here"))
    for argv, fragment in rows:
        code = main(_argv(argv, world, tmp_path))
        captured = capsys.readouterr()
        _one_clean_line(code, captured.out, captured.err, fragment)


def _outside_fences(markdown: str) -> str:
    """The text of `markdown` outside its code fences (a fence closes only on its own length)."""
    outside, fence = [], None
    for line in markdown.splitlines():
        run = len(line) - len(line.lstrip("`"))
        if fence is None and run >= 3:
            fence = run
        elif fence is not None and run >= fence and not line.strip("`"):
            fence = None
        elif fence is None:
            outside.append(line)
    return "\n".join(outside)


def test_raw_html_from_a_message_or_a_cause_lands_in_issue_md_only_inside_code_fences(tmp_path):
    from torchsim_diff.report.bundles import write_bundle
    from torchsim_diff.results.record import Record
    message = "output 0: values differ\n```\n<img src=x onerror=alert(1)>\n````"
    record = Record.from_dict({**RECORD, "route": "eager", "message": message})
    folder = write_bundle(record, str(tmp_path / "bundle"), heading="<script>alert(1)</script> in `a<b`",
                          analysis="cast<Ty>() fails; <iframe src=x></iframe>")
    issue = open(os.path.join(folder, "ISSUE.md"), encoding="utf-8").read()
    assert "<img src=x onerror=alert(1)>" in issue          # the message is quoted whole, as data
    outside = _outside_fences(issue)
    assert "`a<b`" in outside and "&lt;script>" in outside and "cast&lt;Ty>()" in outside
    for tag in ("<img", "<script", "<iframe"):
        assert tag not in outside, outside


def test_a_history_on_a_file_system_without_flock_opens_on_sqlites_locks_alone(tmp_path, monkeypatch):
    """Two campaigns opening one history take turns through flock on its folder
    (buckets.history_file); where the file system has no flock (some network ones), the history
    still opens, for writing and for reading, instead of failing with a traceback."""
    import fcntl
    from torchsim_diff.buckets.bucket_history import BucketStore

    def no_locks(fd, operation):
        raise OSError(37, "No locks available")
    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = str(tmp_path / "buckets.sqlite")
    BucketStore(path).close()
    assert BucketStore(path, read_only=True).buckets == {}
