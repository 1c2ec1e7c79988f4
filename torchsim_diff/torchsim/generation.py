"""Which generation of PyTorchSim a checkout is, decided from the files it holds.

PyTorchSim has changed shape several times (docs/pytorchsim.md, "Generations"):

    A   Dec 2025   MLIR route; device built by Scheduler.scheduler.PyTorchSimRunner
    B   v1.1.0     MLIR route; package PyTorchSimDevice registers device "npu"
    C1  feature/triton-codegen   Triton route in PyTorchSimFrontend/triton_backend
        (opt-in TORCHSIM_TRITON_CODEGEN=1); its MLIR route is B's, unchanged
    C2  newest     Triton route only: PyTorchSimCodegen/ + Simulator/

Each route drives only the generations it knows. A checkout that matches none of them
is unknown, and the route is unavailable with the files that were looked for: guessing
would drive a simulator through an interface it does not have.
"""
from __future__ import annotations

import dataclasses
import os

MLIR_ROUTE = "torchsim-mlir"
TRITON_ROUTE = "torchsim-triton"


@dataclasses.dataclass(frozen=True)
class Generation:
    """A detected generation: its name and the files that decided it."""

    name: str
    evidence: str


class UnknownGeneration(Exception):
    """The checkout matches no generation this route can drive."""


def _has(root: str, relpath: str) -> bool:
    return os.path.exists(os.path.join(root, relpath))


# Marker files, newest generation first: a later generation keeps its predecessors'
# folders, so the first match is the newest code present.
TRITON_MARKERS = (
    ("C2", ("PyTorchSimCodegen/__init__.py",)),
    ("C1", ("PyTorchSimFrontend/triton_backend/__init__.py",)),
)
MLIR_MARKERS = (
    ("B", ("PyTorchSimDevice", "PyTorchSimFrontend/mlir/mlir_scheduling.py")),
    ("A", ("Scheduler/scheduler.py", "PyTorchSimFrontend/extension_device.cpp")),
)
# In a C2 checkout the device registers only the Triton backend, whatever MLIR
# sources remain beside it.
MLIR_EXCLUDED_BY = "PyTorchSimCodegen/__init__.py"


def detect(route: str, torchsim_dir: str) -> Generation:
    """The generation of the checkout at `torchsim_dir` as `route` must drive it.

    Raises UnknownGeneration naming what was looked for when nothing matches.
    """
    if not torchsim_dir or not os.path.isdir(torchsim_dir):
        raise UnknownGeneration(
            f"TORCHSIM_DIR={torchsim_dir!r} is not a directory; set it to the PyTorchSim checkout")
    if route == TRITON_ROUTE:
        return _match(route, torchsim_dir, TRITON_MARKERS)
    if route == MLIR_ROUTE:
        if _has(torchsim_dir, MLIR_EXCLUDED_BY):
            raise UnknownGeneration(
                f"{torchsim_dir} is a C2 checkout ({MLIR_EXCLUDED_BY} present): its npu device "
                f"registers only the Triton backend; use route {TRITON_ROUTE!r} or an A/B checkout")
        return _match(route, torchsim_dir, MLIR_MARKERS)
    raise ValueError(f"route={route!r} is not a PyTorchSim route; expected {MLIR_ROUTE!r} or {TRITON_ROUTE!r}")


def _match(route: str, root: str, markers) -> Generation:
    for name, files in markers:
        if all(_has(root, f) for f in files):
            evidence = ", ".join(files)
            if name == "B" and _has(root, "PyTorchSimFrontend/triton_backend/__init__.py"):
                evidence += " (a C1 checkout: its MLIR route is B's)"
            return Generation(name, evidence)
    wanted = "; ".join(f"{name}: {' + '.join(files)}" for name, files in markers)
    raise UnknownGeneration(
        f"{root} matches no PyTorchSim generation that route {route!r} drives "
        f"(looked for {wanted}); point TORCHSIM_DIR at a supported checkout")


def checkout_revision(torchsim_dir: str) -> str:
    """Commit of the checkout, read from .git without running git ("" when unknown)."""
    git = os.path.join(torchsim_dir, ".git")
    try:
        with open(os.path.join(git, "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        ref_file = os.path.join(git, ref)
        if os.path.isfile(ref_file):
            with open(ref_file) as f:
                return f"{ref.rsplit('/', 1)[-1]}@{f.read().strip()[:12]}"
        with open(os.path.join(git, "packed-refs")) as f:
            for line in f:
                if line.strip().endswith(" " + ref):
                    return f"{ref.rsplit('/', 1)[-1]}@{line.split()[0][:12]}"
    except OSError:
        pass
    return ""
