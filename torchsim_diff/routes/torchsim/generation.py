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

Evidence, per generation (read-only, from public copies of PyTorchSim):
    A   anonymousresearcher01/PyTorchSim fe04c9a: Scheduler/scheduler.py,
        PyTorchSimFrontend/extension_device.cpp, configs/*.json
    B   WHUDYF/PyTorchSim bee6c84 (PSAL's merge #221): PyTorchSimDevice/torch_openreg,
        PyTorchSimFrontend/mlir/mlir_scheduling.py, configs/*.yml, thirdparty/*.json
    C1  PSAL-POSTECH/PyTorchSim 4c077b4 PyTorchSimDevice/torch_openreg/__init__.py switches
        on CONFIG_TRITON_CODEGEN; 1c5dde5 registers the Triton backend unconditionally
    C2  PSAL-POSTECH/PyTorchSim PyTorchSimCodegen/, Simulator/functional.py (5d7d840)
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
        if triton_registered_unconditionally(torchsim_dir):
            raise UnknownGeneration(
                f"{torchsim_dir} registers the Triton backend for npu unconditionally ({DEVICE_INIT} has "
                f"no TORCHSIM_TRITON_CODEGEN switch), so its MLIR route cannot be selected; use route "
                f"{TRITON_ROUTE!r} here, or an A/B checkout (or a C1 one that still switches) for {MLIR_ROUTE!r}")
        return _match(route, torchsim_dir, MLIR_MARKERS)
    raise ValueError(f"route={route!r} is not a PyTorchSim route; expected {MLIR_ROUTE!r} or {TRITON_ROUTE!r}")


DEVICE_INIT = "PyTorchSimDevice/torch_openreg/__init__.py"


def triton_registered_unconditionally(root: str) -> bool:
    """Whether the checkout's npu device registers the Triton backend with no switch to
    keep the MLIR one (later C1, PSAL-POSTECH 1c5dde5): torchsim-mlir would then run the
    Triton route while reporting MLIR."""
    try:
        with open(os.path.join(root, DEVICE_INIT)) as f:
            text = f.read()
    except OSError:
        return False
    return "TritonNPUScheduling" in text and "TRITON_CODEGEN" not in text


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


# Files whose presence means PyTorchSim can check each buffer Spike produced against a
# CPU golden (config key pytorchsim_functional_verify_per_kernel).
VERIFY_MODULES = ("Simulator/functional_verify.py", "PyTorchSimFrontend/extension_functional_verify.py")


def has_per_kernel_verify(torchsim_dir: str) -> bool:
    return any(_has(torchsim_dir, rel) for rel in VERIFY_MODULES)


def compiler_dir(name: str, torchsim_dir: str, env=None) -> str | None:
    """The Triton-route compiler checkout a generation uses, as PyTorchSim resolves it:
    C1 PSTO_DIR, else TNPU_DIR, else $TORCHSIM_DIR/triton-npu (extension_config.py
    CONFIG_TNPU_DIR); C2 TORCHSIM_COMPILE_DIR. None for the MLIR generations."""
    env = os.environ if env is None else env
    if name == "C1":
        return env.get("PSTO_DIR") or env.get("TNPU_DIR") or os.path.join(torchsim_dir, "triton-npu")
    if name == "C2":
        return env.get("TORCHSIM_COMPILE_DIR") or None
    return None


def thirdparty_pins(torchsim_dir: str) -> dict:
    """Toolchain pins of the checkout's thirdparty/*.json (B and later): {"spike": "v1.0.1", ...}."""
    import glob
    import json
    pins = {}
    for path in sorted(glob.glob(os.path.join(torchsim_dir, "thirdparty", "*.json"))):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        stem = os.path.splitext(os.path.basename(path))[0]
        for key, value in data.items() if isinstance(data, dict) else ():
            if isinstance(value, dict):
                pin = value.get("release_tag") or value.get("commit") or value.get("ref")
                if pin:
                    pins[key] = f"{value.get('repository', '')}@{pin}".lstrip("@")
            elif key in ("commit", "ref", "release_tag") and isinstance(value, str):
                pins[stem] = value
    return pins
