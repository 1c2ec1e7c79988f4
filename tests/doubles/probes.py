"""The prototype's five probe graphs as cases: reduction over a transposed input, softmax,
indexed row write into an input, permute + broadcast, matmul through the Triton template.

`python -m doubles.probes ROUTE [ARTIFACT_ROOT]` (from tests/) runs them on ROUTE in this process and prints
one JSON line {probe: "pass" | "fail" | "unsupported: ..." | "error: ..."}; tests use it to
run a route that needs a process of its own (triton-cuda needs TRITON_INTERPRET unset).
"""
from __future__ import annotations

import json
import sys

from doubles.cases import CaseRun, make_case, tensor_spec

PROBES = {
    "g1_relu_t_add_sum": (
        "import torch\ndef program(x0, x1):\n    return (torch.relu(x0.t() + x1).sum(1),)\n",
        [tensor_spec("x0", [64, 32]), tensor_spec("x1", [32, 64])]),
    "g2_softmax": (
        "import torch\ndef program(x0):\n    return (torch.softmax(x0, dim=-1),)\n",
        [tensor_spec("x0", [33, 47])]),
    "g3_index_put_rows": (
        "import torch\ndef program(x0, x1, x2):\n    x0[x1, :] = x2\n    return ()\n",
        [tensor_spec("x0", [32, 16], mutated=True),
         tensor_spec("x1", [8], dtype="int64", domain={"kind": "unique_index", "high": 32}),
         tensor_spec("x2", [8, 16])]),
    "g4_permute_broadcast": (
        "import torch\ndef program(x0, x1):\n    return (x0.permute(2, 0, 1) + x1,)\n",
        [tensor_spec("x0", [6, 10, 14]), tensor_spec("x1", [10])]),
    "g5_matmul_template": (
        "import torch\ndef program(x0, x1):\n    return (x0 @ x1,)\n",
        [tensor_spec("x0", [32, 48]), tensor_spec("x1", [48, 16])]),
}


def run_probes(route, artifact_root=None) -> dict:
    import os

    from torchsim_diff.routes.base import Unsupported
    results = {}
    for name, (source, inputs) in sorted(PROBES.items()):
        folder = os.path.join(artifact_root, name) if artifact_root else None
        try:
            run = CaseRun(route, source, make_case(*inputs), artifact_dir=folder)
            results[name] = "pass" if run.matches_eager() and run.kernels() else "fail"
        except Unsupported as exc:
            results[name] = f"unsupported: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported to the parent test
            results[name] = f"error: {type(exc).__name__}: {exc}"
    return results


def main(argv) -> int:
    from torchsim_diff.routes import make_route
    route = make_route(argv[0])
    artifact_root = argv[1] if len(argv) > 1 else None
    ok, reason = route.available()
    if not ok:
        print(json.dumps({"unavailable": reason}))
        return 0
    route.setup()
    print(json.dumps(run_probes(route, artifact_root)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
