"""Reproducer bundles: one folder per bucket that reproduces a finding without torchsim-diff.

    >>> write_bundle(record, "reports/run/bundles/1cfb0bfb18")

A bundle (DESIGN.md, "Reproducer bundle") holds:
    repro.py      standalone script: imports torch (and the route's own toolchain), never
                  torchsim_diff. Rebuilds the inputs bit for bit (whole storages, guards
                  included, exact sizes/strides/offsets), runs float64 eager, eager and the
                  route, prints the comparison and exits 1 when the bug reproduces, 0 when it
                  does not, 2 when the route cannot run standalone or here.
    case.json     the case; inputs.bin the storages' raw bytes (also embedded in repro.py
                  when small); artifacts/ the route's files from the run; ISSUE.md the text
                  to paste upstream.
The comparison rule in repro.py is a small copy of torchsim_diff.oracle's, generated from
the oracle's own constants (TOLERANCES, MARGIN, MANTISSA_BITS), so the two cannot drift.
"""
from __future__ import annotations

import base64
import json
import os
import pprint
import re
import shutil
import subprocess
from importlib import metadata

from torchsim_diff import layout, oracle
from torchsim_diff.graph import Case

# Above this many bytes of input storages, repro.py reads inputs.bin instead of embedding them.
EMBED_LIMIT_BYTES = 256 * 1024
INPUTS_FILE = "inputs.bin"
SHIMS_FILE = "triton_interpreter_shims.py"
PYTHON_PACKAGES = ("torch", "triton", "torch-mlir", "numpy", "spike", "torchsim-diff")
TOOLS = ("clang-19", "clang", "spike", "riscv64-unknown-elf-gcc")


class BundleError(ValueError):
    """A record that cannot be turned into a bundle (message names the field)."""


def write_bundle(record: dict, to_dir: str, *, artifacts_dir: str | None = None) -> str:
    """Write the reproducer bundle of a results.jsonl `record` into `to_dir`; returns `to_dir`.

    `artifacts_dir` overrides the record's `artifacts` folder (e.g. after a run was moved).
    """
    case = _case_of(record)
    route = record.get("route")
    if not route:
        raise BundleError("record has no 'route'; pass a results.jsonl record (Verdict.record())")
    os.makedirs(to_dir, exist_ok=True)
    storages = [layout.storage_of(t).contiguous() for t in layout.materialize_all(case.to_dict())]
    blob = b"".join(_raw_bytes(s) for s in storages)
    _write_text(os.path.join(to_dir, "case.json"), case.to_json() + "\n")
    with open(os.path.join(to_dir, INPUTS_FILE), "wb") as handle:
        handle.write(blob)
    copied = _copy_artifacts(artifacts_dir or record.get("artifacts"), os.path.join(to_dir, "artifacts"))
    if route in ("triton", "triton-cuda"):
        _copy_triton_shims(to_dir)
    _write_text(os.path.join(to_dir, "repro.py"), render_script(record, case, blob))
    _write_text(os.path.join(to_dir, "ISSUE.md"), render_issue(record, case, copied))
    return to_dir


def _case_of(record: dict) -> Case:
    if not isinstance(record, dict) or "case" not in record:
        raise BundleError("record has no 'case'; pass a results.jsonl record (Verdict.record())")
    return Case.from_dict(record["case"])


def _raw_bytes(storage) -> bytes:
    import torch
    if storage.dtype == torch.bool:
        storage = storage.to(torch.uint8)
    return storage.view(torch.uint8).numpy().tobytes()


def _write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _copy_artifacts(source: str | None, target: str) -> list:
    """Copy the route's artifact folder; the relative paths of the files copied."""
    if not source or not os.path.isdir(source):
        return []
    shutil.copytree(source, target, dirs_exist_ok=True)
    found = []
    for root, _dirs, names in os.walk(target):
        found += [os.path.relpath(os.path.join(root, n), os.path.dirname(target)) for n in names]
    return sorted(found)


def _copy_triton_shims(to_dir: str) -> None:
    """The interpreter shims the triton routes run under (standalone: stdlib, torch, triton, numpy)."""
    from torchsim_diff.routes import triton_shims
    shutil.copyfile(triton_shims.__file__, os.path.join(to_dir, SHIMS_FILE))


# -- versions ------------------------------------------------------------------------------
def component_versions() -> dict:
    """{component: version or "not installed"} for every package and tool a route may use."""
    found = {}
    for package in PYTHON_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    for tool in TOOLS:
        found[tool] = _tool_version(tool)
    return found


def _tool_version(tool: str) -> str:
    path = shutil.which(tool)
    if not path:
        return "not installed"
    # spike has no --version; its usage banner names the release.
    flag = "--help" if tool == "spike" else "--version"
    try:
        done = subprocess.run([path, flag], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{path} (version unknown: {exc})"
    banner = done.stdout + done.stderr
    release = re.search(r"\d+\.\d+(\.\d+)?(-\w+)?", banner)
    return f"{release.group(0) if release else 'version unknown'} ({path})"


def _route_facts(route: str) -> dict:
    """The route's description and own versions(), or what stopped us from reading them."""
    from torchsim_diff.routes import UnknownRoute, route_class
    try:
        cls = route_class(route)
    except (UnknownRoute, ImportError, AttributeError) as exc:
        return {"description": f"(route {route!r} is not registered here: {exc})", "versions": {}}
    try:
        versions = cls().versions()
    except Exception as exc:  # noqa: BLE001 - a broken toolchain still gets its bundle
        versions = {"error": f"{type(exc).__name__}: {exc}"}
    return {"description": cls.description, "versions": versions}


# -- repro.py ------------------------------------------------------------------------------
def render_script(record: dict, case: Case, blob: bytes) -> str:
    """The text of repro.py for `record` whose input storages are `blob`."""
    route = record["route"]
    constants = {
        "ROUTE": route,
        "RECORDED_KIND": record.get("kind"),
        "RECORDED_MESSAGE": (record.get("message") or "").splitlines()[0] if record.get("message") else "",
        "DTYPE": case.dtype,
        "SEED": int(case.values.get("seed", 0)),
        "INPUTS": _input_manifest(case),
        "INPUT_DATA": base64.b64encode(blob).decode("ascii") if len(blob) <= EMBED_LIMIT_BYTES else None,
        "TOLERANCES": {layout.dtype_name(d): list(tol) for d, tol in oracle.TOLERANCES.items()},
        "MARGIN": oracle.MARGIN,
        "LOW_PRECISION_MARGIN": oracle.LOW_PRECISION_MARGIN,
        "FEW_ELEMENTS": oracle.FEW_ELEMENTS,
        "FEW_ELEMENTS_FACTOR": oracle.FEW_ELEMENTS_FACTOR,
        "MANTISSA_BITS": {layout.dtype_name(d): bits for d, bits in oracle.MANTISSA_BITS.items()},
    }
    assignments = "\n".join(f"{name} = {_literal(value)}" for name, value in constants.items())
    header = _SCRIPT_HEADER.format(route=route, kind=record.get("kind"), op=record.get("op"),
                                   version=_own_version())
    prelude = _ROUTE_PRELUDE.get(route, "")
    return (header + prelude + "import torch\n\n" + assignments + "\n\n\n"
            + _program_body(case) + _SCRIPT_BODY + _route_compiler(route) + _SCRIPT_MAIN)


def _literal(value) -> str:
    if isinstance(value, str) and len(value) > 100:
        # Long base64: wrapped so the script stays readable in an editor.
        chunks = [value[i:i + 96] for i in range(0, len(value), 96)]
        return "(\n" + "".join(f"    {c!r}\n" for c in chunks) + ")"
    if isinstance(value, (dict, list)):
        return pprint.pformat(value, width=110, sort_dicts=False)
    return repr(value)


def _input_manifest(case: Case) -> list:
    manifest, at = [], 0
    for spec in case.inputs:
        dtype = layout.dtype_of(spec["dtype"])
        size = int(spec["layout"]["storage_size"])
        item = 1 if spec["dtype"] == "bool" else dtype.itemsize
        manifest.append({"name": spec["name"], "dtype": spec["dtype"], "shape": list(spec["shape"]),
                         "strides": list(spec["layout"]["strides"]), "offset": int(spec["layout"]["offset"]),
                         "storage_size": size, "mutated": bool(spec.get("mutated")), "byte_offset": at})
        at += size * item
    return manifest


def _program_body(case: Case) -> str:
    source = case.program_source()
    return source.split("\n", 1)[1].lstrip("\n") + "\n\n"   # drop its `import torch`


def _own_version() -> str:
    from torchsim_diff import __version__
    return __version__


_SCRIPT_HEADER = '''#!/usr/bin/env python3
"""Reproducer: route {route}, {kind} in op {op}.

Generated by torchsim-diff {version}; needs only torch (and the route's own toolchain).
    python repro.py      exit 1: the bug reproduces, 0: it does not, 2: cannot run here
Inputs are rebuilt bit for bit: each is a view (sizes, strides, storage offset) into a 1-D
storage whose elements outside the view hold guard values. The route's result is judged
against float64 eager, allowing MARGIN times eager's own error plus a per-dtype floor.
"""
import base64
import math
import os
import sys

'''

_ROUTE_PRELUDE = {
    # Must be set before torch/triton are imported: Inductor reads it when kernels are created.
    "triton": 'os.environ["TRITON_INTERPRET"] = "1"\n',
    "triton-cuda": 'os.environ["TRITON_INTERPRET"] = "0"\n',
}

_SCRIPT_BODY = r'''HERE = os.path.dirname(os.path.abspath(__file__))
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "bool": torch.bool}


class CannotRun(Exception):
    """The route cannot run standalone or on this machine (exit 2)."""


# -- inputs ----------------------------------------------------------------------------------
def input_bytes():
    if INPUT_DATA is not None:
        return base64.b64decode(INPUT_DATA)
    with open(os.path.join(HERE, "inputs.bin"), "rb") as handle:
        return handle.read()


def build_inputs(as_dtype=None):
    """Fresh views over fresh copies of the recorded storages (float inputs cast to as_dtype)."""
    raw, views = bytearray(input_bytes()), []
    for spec in INPUTS:
        dtype = DTYPES[spec["dtype"]]
        item = 1 if dtype == torch.bool else torch.empty((), dtype=dtype).element_size()
        chunk = raw[spec["byte_offset"]:spec["byte_offset"] + spec["storage_size"] * item]
        flat = torch.frombuffer(chunk, dtype=torch.uint8).clone()
        storage = flat.to(torch.bool) if dtype == torch.bool else flat.view(dtype)
        if as_dtype is not None and dtype.is_floating_point:
            storage = storage.to(as_dtype)
        views.append(storage.as_strided(spec["shape"], spec["strides"], spec["offset"]))
    return views


def storage_of(view):
    n = view.untyped_storage().nbytes() // view.element_size()
    return view.as_strided((n,), (1,), 0)


def covered_mask(spec):
    mask = torch.zeros(spec["storage_size"], dtype=torch.bool)
    if all(s > 0 for s in spec["shape"]):
        index = torch.arange(spec["storage_size"]).as_strided(spec["shape"], spec["strides"], spec["offset"])
        mask[index.reshape(-1)] = True
    return mask


def is_overlapping(shape, strides):
    numel = math.prod(shape)
    if numel <= 1:
        return False
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    return span < numel or torch.arange(span).as_strided(shape, strides, 0).unique().numel() < numel


def run(fn, views):
    outputs = tuple(fn(*views))
    return [o.detach().clone() for o in outputs], [storage_of(v).clone() for v in views]


# -- the comparison rule (a copy of torchsim_diff.oracle's) -----------------------------------
def distance(a, b):
    if not (a.dtype.is_floating_point and b.dtype.is_floating_point) or a.shape != b.shape:
        return torch.zeros(b.shape, dtype=torch.float64)
    return (a.double() - b.double()).abs().nan_to_num(nan=math.inf)


def sensitivity(truth_outputs, truth_storages):
    """How far the float64 result moves when every input moves by up to one ulp of DTYPE."""
    if not DTYPES[DTYPE].is_floating_point:
        return ([torch.zeros(o.shape, dtype=torch.float64) for o in truth_outputs],
                [torch.zeros(s.shape, dtype=torch.float64) for s in truth_storages])
    eps = torch.finfo(DTYPES[DTYPE]).eps
    gen = torch.Generator().manual_seed(SEED + 7)
    views = build_inputs(torch.float64)
    dense = []
    for view in views:
        copy = view.detach().clone()
        if copy.dtype == torch.float64:
            copy = copy * (1 + eps * (torch.rand(copy.shape, generator=gen, dtype=torch.float64) * 2 - 1))
        dense.append(copy)
    outputs = program(*dense)
    out_sens = [distance(o, t) for o, t in zip(outputs, truth_outputs)]
    storage_sens = []
    for view, final, truth in zip(views, dense, truth_storages):
        moved = storage_of(view).clone()
        if final.dtype == torch.float64 and not is_overlapping(list(view.shape), list(view.stride())):
            moved.as_strided(view.shape, view.stride(), view.storage_offset()).copy_(final)
        storage_sens.append(distance(moved, truth))
    return out_sens, storage_sens


def same_bits(a, b):
    if a.dtype.is_floating_point:
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.view(as_int) == b.view(as_int)
    return a == b


def same_class(a, b):
    return ((torch.isfinite(a) & torch.isfinite(b)) | (torch.isnan(a) & torch.isnan(b))
            | (torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))))


def compare(where, got, want, truth, sens):
    """A list of report lines: empty when `got` passes."""
    if list(got.shape) != list(want.shape):
        return [f"{where}: shape {list(got.shape)} != eager's {list(want.shape)}"]
    if got.dtype != want.dtype:
        return [f"{where}: dtype {got.dtype} != eager's {want.dtype}"]
    if not got.dtype.is_floating_point:
        wrong = (got != want) & (got != truth.to(got.dtype))
        return describe(where, "exact values differ", wrong, got, want) if wrong.any() else []
    rtol, atol = TOLERANCES[str(got.dtype).replace("torch.", "")]
    g, e, t = got.double(), want.double(), truth.double()
    rounded = truth.to(got.dtype).double()
    bad_nonfinite = ~same_class(g, e) & ~same_class(g, rounded)
    if bad_nonfinite.any():
        return describe(where, "non-finite pattern differs", bad_nonfinite, g, e)
    finite = torch.isfinite(g) & torch.isfinite(e) & torch.isfinite(t)
    err = torch.where(finite, (g - t).abs(), torch.zeros_like(t))
    eager_err = torch.where(finite, (e - t).abs(), torch.zeros_like(t))
    eager_max = float(eager_err.max()) if eager_err.numel() else 0.0
    sens_max = float(sens.max()) if sens.numel() else 0.0
    margin = (LOW_PRECISION_MARGIN if got.dtype in (torch.float16, torch.bfloat16) else MARGIN) * (
        FEW_ELEMENTS_FACTOR if t.numel() <= FEW_ELEMENTS else 1.0)
    allowed = atol + rtol * t.abs().nan_to_num(0.0) + margin * (torch.clamp(eager_err, min=eager_max) + sens_max)
    wrong = finite & (err > allowed)
    print(f"  {where}: {figures(err, eager_err, t, got.dtype, atol)}")
    return describe(where, "values differ", wrong, g, t, err, allowed, e) if wrong.any() else []


def figures(err, eager_err, t, dtype, atol):
    if err.numel() == 0:
        return "empty"
    magnitude = t.abs().nan_to_num(0.0)
    rel = torch.where(magnitude > atol, err / magnitude.clamp(min=atol), torch.zeros_like(err))
    info = torch.finfo(dtype)
    ulp = torch.pow(2.0, torch.floor(torch.log2(magnitude.clamp(min=info.smallest_normal, max=info.max)))
                    - MANTISSA_BITS[str(dtype).replace("torch.", "")])
    route_err, eager = float(err.max()), float(eager_err.max())
    ratio = "inf" if eager == 0.0 and route_err > 0 else f"{route_err / eager:.3g}" if eager else "0"
    return (f"max abs err {route_err:.6g}, max rel err {float(rel.max()):.6g}, max ulp {float((err / ulp).max()):.6g}, "
            f"eager's max abs err {eager:.6g}, route/eager {ratio}")


def unravel(flat, shape):
    index = []
    for size in reversed(list(shape)):
        index.append(flat % size if size else 0)
        flat //= max(size, 1)
    return tuple(reversed(index))


def describe(where, what, wrong, got, expected, err=None, allowed=None, eager=None):
    total, count = wrong.numel(), int(wrong.sum())
    lines = [f"{where}: {what}", f"  Mismatched elements: {count} / {total} ({100.0 * count / max(total, 1):.1f}%)"]
    if err is not None:
        flat = int(torch.where(wrong, err, torch.full_like(err, -1.0)).reshape(-1).argmax())
        lines.append(f"  Greatest absolute difference: {float(err.reshape(-1)[flat]):.6g} at index "
                     f"{unravel(flat, wrong.shape)} (up to {float(allowed.reshape(-1)[flat]):.3g} allowed); "
                     f"got {float(got.reshape(-1)[flat]):.9g}, float64 truth {float(expected.reshape(-1)[flat]):.9g}, "
                     f"eager {float(eager.reshape(-1)[flat]):.9g}")
    else:
        flat = int(wrong.reshape(-1).nonzero()[0])
        lines.append(f"  First mismatch at index {unravel(flat, wrong.shape)}: "
                     f"got {got.reshape(-1)[flat].item()!r}, expected {expected.reshape(-1)[flat].item()!r}")
    return lines


def check_storage(spec, init, got, want, truth, sens):
    where = f"input {spec['name']} (whole storage)"
    if got.shape != init.shape or got.dtype != init.dtype:
        return [f"{where}: storage came back as {got.dtype}{list(got.shape)}"]
    covered = covered_mask(spec)
    guard_changed = ~covered & ~same_bits(got, init)
    if guard_changed.any():
        positions = guard_changed.nonzero().reshape(-1)[:8].tolist()
        return [f"{where}: route wrote {int(guard_changed.sum())} guard elements outside the view "
                f"(storage positions {positions}; view offset {spec['offset']}, strides {spec['strides']})"]
    if not spec["mutated"]:
        changed = covered & ~same_bits(got, init)
        return [f"{where}: route changed {int(changed.sum())} elements of a read-only input"] if changed.any() else []
    got_c, want_c, truth_c, sens_c = got[covered], want[covered], truth[covered], sens[covered]
    lines = compare(where, got_c, want_c, truth_c, sens_c)
    untouched = same_bits(want, init)[covered]
    if lines and not compare(where, got_c[~untouched], want_c[~untouched], truth_c[~untouched], sens_c[~untouched]):
        count = int((~same_bits(got_c, want_c) & untouched).sum())
        lines.insert(0, f"{where}: route changed {count} elements the in-place op must leave alone")
    return lines


# -- the route -------------------------------------------------------------------------------
'''

_LOAD_SHIMS = '''def load_shims():
    """The documented patches the triton routes run under (triton_interpreter_shims.py, next to this file)."""
    import importlib.util
    path = os.path.join(HERE, "triton_interpreter_shims.py")
    spec = importlib.util.spec_from_file_location("triton_interpreter_shims", path)
    shims = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = shims   # its dataclasses look their module up there
    spec.loader.exec_module(shims)
    return shims


'''

_COMPILERS = {
    "eager": '''def compile_route(fn):
    """Route eager: the program itself (the harness's self-check)."""
    return fn
''',
    "inductor": '''def compile_route(fn):
    """Route inductor: Inductor's C++ backend on CPU, one thread (as the fuzzer ran it)."""
    torch.set_num_threads(1)
    return torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False)
''',
    "triton": '''def compile_route(fn):
    """Route triton: Inductor's Triton kernels on CPU under Triton's interpreter.

    Stock torch cannot run Inductor's Triton kernels on CPU tensors; the patches that make
    it possible (each documented) are in triton_interpreter_shims.py next to this file.
    """
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        raise CannotRun(f"route triton needs the triton package: {exc}")
    shims = load_shims()
    shims.install_interpreter_shims()
    shims.enable_triton_gemm()
    return torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False)
''',
    "triton-cuda": '''def compile_route(fn):
    """Route triton-cuda: Inductor's Triton kernels on a CUDA GPU; inputs are whole-storage
    copies on the GPU with the same sizes/strides/offsets, copied back after the run."""
    if not torch.cuda.is_available():
        raise CannotRun("route triton-cuda needs a CUDA GPU (torch.cuda.is_available() is False)")
    shims = load_shims()
    shims.enable_triton_gemm()   # matmul-like ops through Inductor's Triton templates
    compiled = torch.compile(fn, backend="inductor", fullgraph=True, dynamic=False)

    def on_gpu(*views):
        device = [torch.empty(0, dtype=v.dtype).set_(v.untyped_storage()).cuda()
                  .as_strided(v.shape, v.stride(), v.storage_offset()) for v in views]
        outputs = compiled(*device)
        for host, dev in zip(views, device):
            storage_of(host).copy_(storage_of(dev).cpu())
        return tuple(o.cpu() for o in outputs)
    return on_gpu
''',
}

_NOT_STANDALONE = '''def compile_route(fn):
    raise CannotRun(
        "route {route!r} cannot be expressed standalone (it is driven by torchsim-diff's own "
        "harness); re-run this bundle's case.json with: torchsim-diff replay case.json --routes {route}")
'''


def _route_compiler(route: str) -> str:
    compiler = _COMPILERS.get(route) or _NOT_STANDALONE.format(route=route)
    return (_LOAD_SHIMS + compiler) if route in ("triton", "triton-cuda") else compiler


def standalone_routes() -> list:
    """Routes whose repro.py runs the route itself (others print why and exit 2)."""
    return sorted(_COMPILERS)


_SCRIPT_MAIN = r'''

def run_route():
    """The route's outputs and final storages on fresh inputs (after a warm-up compile run)."""
    try:
        compiled = compile_route(program)
    except CannotRun:
        raise
    except Exception as exc:  # noqa: BLE001 - setting the route up is not the finding
        raise CannotRun(f"setting up route {ROUTE} failed: {type(exc).__name__}: {exc}") from exc
    compiled(*build_inputs())   # torch.compile is lazy: compile (and its errors) happen here
    return run(compiled, build_inputs())


def main():
    print(f"route {ROUTE}; recorded {RECORDED_KIND}: {RECORDED_MESSAGE}")
    print(f"torch {torch.__version__}")
    initial = [storage_of(v).clone() for v in build_inputs()]
    eager_out, eager_st = run(program, build_inputs())
    if DTYPES[DTYPE].is_floating_point:
        truth_out, truth_st = run(program, build_inputs(torch.float64))
    else:
        truth_out, truth_st = eager_out, eager_st
    out_sens, st_sens = sensitivity(truth_out, truth_st)
    try:
        got_out, got_st = run_route()
    except CannotRun as exc:
        print(f"CANNOT RUN: {exc}")
        return 2
    except Exception as exc:  # noqa: BLE001 - the route failing to compile or run is the finding
        import traceback
        traceback.print_exc()
        print(f"REPRODUCED: route {ROUTE} raised {type(exc).__name__}: {exc}")
        return 1
    problems = []
    if len(got_out) != len(eager_out):
        problems.append(f"route returned {len(got_out)} outputs, eager {len(eager_out)}")
    for i, (got, want, truth) in enumerate(zip(got_out, eager_out, truth_out)):
        problems += compare(f"output {i}", got, want, truth, out_sens[i])
    for i, spec in enumerate(INPUTS):
        problems += check_storage(spec, initial[i], got_st[i], eager_st[i], truth_st[i], st_sens[i])
    if problems:
        print("\n".join(problems))
        print(f"REPRODUCED: route {ROUTE} disagrees with eager/float64")
        return 1
    print(f"NOT REPRODUCED: route {ROUTE} agrees with eager/float64 on every output and input storage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


# -- ISSUE.md ------------------------------------------------------------------------------
def render_issue(record: dict, case: Case, artifacts: list) -> str:
    """Markdown ready to paste upstream."""
    route, facts = record["route"], _route_facts(record["route"])
    sections = [
        f"# [{route}] {record.get('kind') or record.get('status', 'result')} in `{record.get('op')}`"
        f"{': ' + _first_line(record) if _first_line(record) else ''}",
        f"Route `{route}`: {facts['description']}",
        "## Minimal program\n\n```python\n" + case.program_source() + "```",
        "## Inputs\n\n" + _inputs_table(case),
        "## How the route runs it\n\n```python\n" + _route_call(route) + "```",
        "## Expected vs actual\n\n" + _expected_vs_actual(record),
        "## Versions\n\n" + _versions_table(facts["versions"]),
        "## How to reproduce\n\n" + _how_to_run(route, record.get("kind"), artifacts),
    ]
    return "\n\n".join(sections) + "\n"


def _route_call(route: str) -> str:
    """The route's compile call as repro.py makes it (its compile_route function)."""
    text = _COMPILERS.get(route) or _NOT_STANDALONE.format(route=route)
    return re.sub(r'\n    """.*?"""\n', "\n", text, flags=re.S)


def _first_line(record: dict) -> str:
    message = record.get("message") or ""
    return message.splitlines()[0] if message else ""


def _inputs_table(case: Case) -> str:
    rows = ["| input | dtype | shape | strides | storage offset | storage size | layout | mutated |",
            "|---|---|---|---|---|---|---|---|"]
    for spec in case.inputs:
        lay = spec["layout"]
        rows.append(f"| `{spec['name']}` | {spec['dtype']} | {spec['shape']} | {lay['strides']} | {lay['offset']} "
                    f"| {lay['storage_size']} | {', '.join(lay['classes'])} | {bool(spec.get('mutated'))} |")
    guard = layout.GUARD["float"]
    return ("\n".join(rows) + "\n\nEach input is a view into a 1-D storage: "
            "`storage.as_strided(shape, strides, storage_offset)`; storage elements outside the view "
            f"hold guard values ({guard} for floats). Exact values: `inputs.bin` (raw storages in input "
            "order) and embedded in `repro.py`.")


def _expected_vs_actual(record: dict) -> str:
    message = record.get("message") or "(no message recorded)"
    figures = [(name, record.get(name)) for name in ("max_abs_err", "max_rel_err", "max_ulp", "err_ratio")]
    lines = ["Expected: the route agrees with eager PyTorch, judged against a float64 eager run: an element may "
             f"differ from float64 by at most {oracle.MARGIN:g} x eager's own error plus the dtype's "
             "torch.testing tolerance; non-finite values must match; storage outside the views "
             "and read-only inputs must be unchanged.", "", "Actual:", "", "```", message, "```", ""]
    if record.get("max_abs_err"):
        lines += ["Error figures over the elements compared (route vs float64):", ""]
        lines += [f"- {name}: {value}" for name, value in figures if value is not None]
    return "\n".join(lines)


def _versions_table(route_versions: dict) -> str:
    rows = ["| component | version |", "|---|---|"]
    rows += [f"| {name} | {value} |" for name, value in component_versions().items()]
    if route_versions:
        rows.append(f"| route's own report | {json.dumps(route_versions, sort_keys=True)} |")
    return "\n".join(rows)


def _how_to_run(route: str, kind: str | None, artifacts: list) -> str:
    lines = ["```", "python repro.py    # exit 1: reproduces, 0: does not, 2: cannot run here", "```", ""]
    if kind in ("crash", "timeout"):
        lines += ["The route runs in the script's own process: a crash ends it with the signal's status "
                  "(e.g. -11) instead of 1, and a hang hangs it (stop it with Ctrl-C or `timeout`).", ""]
    if route not in _COMPILERS:
        lines += [f"Route `{route}` cannot be run standalone; `repro.py` says so and exits 2. "
                  f"Re-run the case with torchsim-diff: `torchsim-diff replay case.json --routes {route}`.", ""]
    if route in ("triton", "triton-cuda"):
        lines += [f"`{SHIMS_FILE}` holds the documented patches the route runs under.", ""]
    lines.append("Bundle: `repro.py`, `case.json`, `inputs.bin`, `ISSUE.md`"
                 + (", route artifacts:" if artifacts else " (the run kept no route artifacts)."))
    lines += [f"- `{path}`" for path in artifacts]
    return "\n".join(lines)
