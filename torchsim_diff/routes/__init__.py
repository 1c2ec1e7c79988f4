"""Route registry: route name -> "module:Class", plus the `torchsim_diff.routes` entry points.

Adding a route touches one new file in this folder and one line here (or, for a route
living in another package, one entry point in that package's metadata): how its bug reports
speak of it is on its class (`base.ReportFacts`).
"""
from __future__ import annotations

import importlib
import os

BUILTIN_ROUTES = {
    "eager": "torchsim_diff.routes.eager.eager:EagerRoute",
    "inductor": "torchsim_diff.routes.inductor.inductor:InductorRoute",
    "triton": "torchsim_diff.routes.triton.triton:TritonInterpreterRoute",
    "triton-cuda": "torchsim_diff.routes.triton.triton:TritonCudaRoute",
    "mlir": "torchsim_diff.routes.mlir.mlir:MlirJitRoute",
    "spike": "torchsim_diff.routes.spike.spike:SpikeRoute",
    "triton-spike": "torchsim_diff.routes.triton_spike.triton_spike:TritonSpikeRoute",
    "torchsim-mlir": "torchsim_diff.routes.torchsim.torchsim:TorchSimMlirRoute",
    "torchsim-triton": "torchsim_diff.routes.torchsim.torchsim:TorchSimTritonRoute",
}
ENTRY_POINT_GROUP = "torchsim_diff.routes"
# Extra routes without packaging: "name=module:Class,name2=module:Class". Read by the
# fuzzer and (inherited) by its workers; used for test doubles and local experiments.
EXTRA_ROUTES_ENV = "TORCHSIM_DIFF_ROUTES"


class UnknownRoute(ValueError):
    """A route name that is neither built in nor provided by an entry point."""


def route_targets() -> dict:
    """Every known route name -> "module:Class" target."""
    targets = dict(BUILTIN_ROUTES)
    try:
        from importlib.metadata import entry_points
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            targets.setdefault(ep.name, ep.value)
    except Exception:  # noqa: BLE001 - broken third-party metadata must not hide our routes
        pass
    for item in filter(None, os.environ.get(EXTRA_ROUTES_ENV, "").split(",")):
        name, _, target = item.partition("=")
        if name and ":" in target:
            targets[name.strip()] = target.strip()
    return targets


def route_names() -> list:
    return list(route_targets())


def route_class(name: str):
    """The Route subclass registered under `name`."""
    targets = route_targets()
    if name not in targets:
        raise UnknownRoute(f"unknown route {name!r}; known routes: {', '.join(targets)}")
    module_name, _, class_name = targets[name].partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # noqa: BLE001 - whatever a named module raises on import, the entry is at fault
        raise UnknownRoute(f"route {name!r} cannot be loaded from {targets[name]!r} ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}); fix its entry in {EXTRA_ROUTES_ENV} "
                           f"or its package's entry point") from None


def make_route(name: str, options: dict | None = None):
    return route_class(name)(options)
