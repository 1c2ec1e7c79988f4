"""Benchmark of route `triton`: seconds per case for small graphs, warm process.

Each case is a new graph (at most 4 nodes, at most 4,096 elements per tensor) compiled and
run once through the route, as a fuzzing campaign does; the first case warms the process
and is left out. Prints per-case figures, the median seconds per case (target <= 1.5 s) and
the share of the case spent inside Triton's interpreter running kernels.

    .venv/bin/python benchmarks/bench_triton.py [--cases N] [--no-capture]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="bench_triton_inductor_"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from torchsim_diff.case import layout  # noqa: E402
from torchsim_diff.routes import make_route  # noqa: E402
from torchsim_diff.routes.base import RunContext, Unsupported  # noqa: E402

SHAPES = ([64, 64], [32, 128], [4096], [16, 16, 16], [48, 80])
UNARY = ("torch.exp", "torch.tanh", "torch.relu", "torch.sigmoid", "torch.abs", "torch.sqrt")
TEMPLATES = (
    "    v0 = {u}(x0) + x1\n    v1 = v0 * 2\n    return (v1,)\n",
    "    v0 = {u}(x0.t()) * x1.t()\n    v1 = v0.sum(-1)\n    return (v0, v1)\n",
    "    v0 = torch.softmax(x0 + x1, dim=-1)\n    v1 = {u}(v0)\n    return (v1,)\n",
    "    v0 = {u}(x0)\n    x1.add_(v0)\n    v1 = x1.amax(0)\n    return (v1,)\n",
    "    v0 = x0 @ x1.t()\n    v1 = {u}(v0)\n    return (v1,)\n",
)


def spec(name, shape, transposed=False, mutated=False):
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    if transposed and len(shape) == 2:
        strides = [1, shape[0]]
    size = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
    return {"name": name, "shape": shape, "dtype": "float32", "domain": {"kind": "positive"},
            "layout": {"classes": [], "strides": strides, "offset": 0, "storage_size": size},
            "mutated": mutated}


def cases(n):
    for i in range(n):
        template = TEMPLATES[i % len(TEMPLATES)]
        shape = SHAPES[(i // len(TEMPLATES)) % len(SHAPES)]
        if "@" in template and len(shape) != 2 or "t()" in template and len(shape) != 2:
            shape = [48, 80]
        source = "import torch\ndef program(x0, x1):\n" + template.format(u=UNARY[i % len(UNARY)])
        inputs = [spec("x0", shape, transposed=(i % 3 == 1)), spec("x1", shape, mutated="add_" in template)]
        yield source, {"schema": 1, "dtype": "float32", "inputs": inputs, "nodes": [], "outputs": [],
                       "values": {"seed": i, "special": False}}


def run_case(route, source, case):
    namespace = {}
    exec(source, namespace)
    ctx = RunContext(artifact_dir=tempfile.mkdtemp(prefix="bench_triton_case_"), case=case)
    start = time.perf_counter()
    compiled = route.compile(namespace["program"], layout.materialize_all(case), ctx)
    compiled_at = time.perf_counter()
    compiled(layout.materialize_all(case), ctx)
    end = time.perf_counter()
    return {"t_compile": compiled_at - start, "t_run": end - compiled_at, "t_case": end - start,
            "t_kernels": ctx.metrics.stage_s.get("kernels", 0.0) + ctx.metrics.stage_s.get("kernels_compile", 0.0),
            "launches": ctx.metrics.kernel_launches or 0}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--no-capture", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    route = make_route("triton", {"capture": not args.no_capture})
    ok, reason = route.available()
    if not ok:
        print(f"route triton unavailable: {reason}")
        return 2
    route.setup()
    rows = []
    for i, (source, case) in enumerate(cases(args.cases + 1)):
        try:
            row = run_case(route, source, case)
        except Unsupported as exc:
            print(f"case {i}: unsupported: {exc}")
            continue
        if i == 0:
            print(f"warm-up case: {row['t_case']:.2f} s (left out)")
            continue
        rows.append(row)
        print(f"case {i:2d}: case {row['t_case']:.3f} s  compile {row['t_compile']:.3f} s  "
              f"run {row['t_run']:.3f} s  in interpreter {row['t_kernels']:.3f} s  launches {row['launches']}")
    median = statistics.median(r["t_case"] for r in rows)
    share = sum(r["t_kernels"] for r in rows) / sum(r["t_case"] for r in rows)
    print(f"\nmedian seconds per case: {median:.3f} s over {len(rows)} cases (target <= 1.5 s)")
    print("(a case = compile, which runs the program once, + one captured run; interpreter time counts both)")
    print(f"share of case time in the interpreter: {100 * share:.1f}% "
          f"(median {statistics.median(r['t_kernels'] for r in rows):.3f} s per case)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
