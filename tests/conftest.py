import os
import resource

# Tests that run Triton's interpreter in this process need TRITON_INTERPRET=1 before anything
# imports Inductor's triton_helpers (it picks its libdevice at import time); routes that need it
# unset (triton-cuda, triton-spike's TTIR compiler) run in child processes with their own env.
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from tests.route_doubles import DOUBLES
from torchsim_diff.case.graph import Case
from torchsim_diff.generate import policy
from torchsim_diff.routes import EXTRA_ROUTES_ENV
from torchsim_diff.generate.strategies import no_local_constants

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _child_cpu_time(request):
    """The CPU time of the child processes (route workers, repro.py runs, compilers) this test
    reaped, as the junit property `child_cpu_s`: benchmarks/suite_durations.py adds it up per
    file. A shared worker's time falls to the test that closes it (a fixture's teardown)."""
    before = _reaped_cpu()
    yield
    request.node.user_properties.append(("child_cpu_s", round(_reaped_cpu() - before, 2)))


def _reaped_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@pytest.fixture(autouse=True)
def _draws_decided_by_the_seed_alone():
    """Hypothesis mixes literals mined from the local modules imported so far into its draws, so
    which tests an xdist worker had run changed a seeded test's cases (a generator share test
    failed on a fresh clone once a module was added). Every test draws without them."""
    with no_local_constants():
        yield


@pytest.fixture
def no_planted_edges(monkeypatch):
    """Draw without edge nodes (this process and its workers). For tests whose planted double
    (output 0's first element off by one, say) a planted NaN, Inf or huge value upstream can
    hide, or split into buckets of their own: they test the campaign's plumbing, not the draws."""
    monkeypatch.setenv(policy.ENV, "edge_percent=0")


@pytest.fixture
def double_routes(monkeypatch):
    """Register the test-double routes for this process and its workers."""
    monkeypatch.setenv(EXTRA_ROUTES_ENV, ",".join(f"{k}={v}" for k, v in DOUBLES.items()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    return DOUBLES


def make_case(nodes, inputs, outputs, dtype="float32", seed=0) -> Case:
    """A hand-written case; inputs are (name, shape, strides, offset, storage_size, extra);
    extra["storage"]: the storage's values (drawn from the seed otherwise)."""
    import torch
    from torchsim_diff.case import layout, values
    specs = []
    for name, shape, strides, offset, size, extra in inputs:
        spec = {"name": name, "shape": shape, "dtype": extra.get("dtype", dtype),
                "domain": extra.get("domain", {"kind": "real"}),
                "layout": {"classes": extra.get("classes", ["contiguous"]), "strides": strides,
                           "offset": offset, "storage_size": size},
                "mutated": extra.get("mutated", False)}
        if "storage" in extra:
            spec["data"] = values.encode(torch.tensor(extra["storage"], dtype=layout.dtype_of(spec["dtype"])))
        specs.append(spec)
    return Case.from_dict({"schema": 1, "dtype": dtype, "inputs": specs, "nodes": nodes,
                           "outputs": outputs, "values": {"seed": seed}})


@pytest.fixture
def add_case():
    """relu(x0.t() + x1) over a transposed, offset input with guard elements on both sides."""
    return make_case(
        nodes=[{"id": "v0", "op": "transpose", "args": ["x0"], "attrs": {"dim0": 0, "dim1": 1}},
               {"id": "v1", "op": "add", "args": ["v0", "x1"], "attrs": {}},
               {"id": "v2", "op": "relu", "args": ["v1"], "attrs": {}}],
        inputs=[("x0", [3, 5], [1, 3], 2, 20, {}), ("x1", [5, 3], [3, 1], 0, 15, {})],
        outputs=["v2"])


@pytest.fixture
def inout_case():
    """x0[:, 1:3].copy_(x1) on a mutated input; returns nothing but the mutation."""
    return make_case(
        nodes=[{"id": "v0", "op": "copy_", "args": ["x0", "x1"],
                "attrs": {"view": {"kind": "slice", "dim": 1, "start": 1, "stop": 3, "step": 1}}}],
        inputs=[("x0", [4, 5], [5, 1], 0, 22, {"mutated": True, "classes": ["sliced", "inout"]}),
                ("x1", [4, 2], [2, 1], 0, 8, {})],
        outputs=[])


@pytest.fixture(scope="session")
def route_checker(tmp_path_factory):
    """One Checker (warm route workers) shared by every test of an xdist worker that runs cases
    on real routes: a route's worker start and first compile (Inductor's machine checks, the
    Triton shims, the MLIR toolchain probe) are paid once per xdist worker, not once per module.
    A test that needs a fresh worker (counting start-ups, killing or timing one) makes its own
    Checker and says why."""
    from torchsim_diff.run.checker import Checker
    with Checker(out_dir=str(tmp_path_factory.mktemp("routes"))) as shared:
        yield shared


# Same-size integer dtype per element size: a tensor's bits, as JSON numbers.
_BITS_BY_SIZE = "{1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}"


def inputs_built_by(script: str) -> list:
    """What the `inputs()` of a generated repro.py builds, run in a fresh Python as a
    maintainer's would (generated text is never exec'd in the test process): per input,
    {"shape", "stride", "offset", "dtype", "bits"} with the view's values as integer bits."""
    import ast
    import json
    import subprocess
    import sys
    tree = ast.parse(script)
    inputs = next(node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "inputs")
    probe = "\n".join([
        "import json, torch", ast.get_source_segment(script, inputs),
        f"BITS = {_BITS_BY_SIZE}",
        "print(json.dumps([{'shape': list(x.shape), 'stride': list(x.stride()), 'offset': x.storage_offset(), "
        "'dtype': str(x.dtype), 'bits': x.contiguous().view(BITS[x.element_size()]).tolist()} for x in inputs()]))"])
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)
