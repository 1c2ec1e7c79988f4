"""PyTorchSim's npu device, and moving case inputs onto it with their exact layout.

Each input is a view into a guarded 1-D storage. The whole storage goes to the device
and is viewed there with the case's shape, strides and offset, so the compiled kernels
see the same addressing as eager does (PR #308's bugs were exactly layout bugs). After
the run the device storage comes back whole: mutations land in the caller's views, and
a write outside a view shows up in the guards.
"""
from __future__ import annotations

import dataclasses
import sys


def open_device(generation: str, torchsim_dir: str):
    """The npu device of a generation (imports PyTorchSim: call inside the worker)."""
    import torch
    if torchsim_dir not in sys.path:
        sys.path.insert(0, torchsim_dir)
    if generation == "A":
        from Scheduler.scheduler import PyTorchSimRunner
        return PyTorchSimRunner.setup_device().custom_device()
    import torch_openreg  # noqa: F401 - registers device "npu" (also done by autoload)
    return torch.device("npu:0")


@dataclasses.dataclass
class DeviceInput:
    host_view: object      # the caller's view (CPU)
    storage: object        # whole storage on the device (None: the device has no as_strided)
    view: object           # the view on the device, same shape/strides/offset when storage is set


def to_device(view, device) -> DeviceInput:
    """Copy `view`'s whole storage to `device` and rebuild the view there.

    A device without `as_strided` gets the view itself (`.to`, which keeps dense strides
    and makes gapped ones contiguous); then only the view's own elements come back.
    """
    from torchsim_diff.case.layout import storage_of
    storage = storage_of(view).to(device)
    try:
        dev_view = storage.as_strided(view.shape, view.stride(), view.storage_offset())
    except (RuntimeError, NotImplementedError):
        return DeviceInput(view, None, view.to(device))
    return DeviceInput(view, storage, dev_view)


def write_back(item: DeviceInput) -> None:
    """Copy the device storage (all of it, guards included) back into the caller's."""
    from torchsim_diff.case.layout import is_overlapping, storage_of
    if item.storage is None:
        if not is_overlapping(item.host_view.shape, item.host_view.stride()):   # read-only aliases
            item.host_view.copy_(item.view.cpu())
        return
    storage_of(item.host_view).copy_(item.storage.cpu())


def wait_for_timing() -> None:
    """Block until an open TOGSim simulator has finished queued kernels (B, C2 run it
    beside the program; its cycle figures are whole only when it is done)."""
    import torch
    npu = getattr(torch, "npu", None)
    simulator = npu.get_tog_simulator() if npu is not None and hasattr(npu, "get_tog_simulator") else None
    if simulator is not None:
        simulator.until()


def wrong_backend(route_name: str) -> str:
    """Why the npu backend PyTorchSim registered is not the one `route_name` drives ("" when
    it is, or when torch cannot say). Later C1 checkouts register the Triton backend
    unconditionally (PSAL-POSTECH/PyTorchSim 1c5dde5, PyTorchSimDevice/torch_openreg/__init__.py):
    the MLIR route would then run Triton kernels while reporting MLIR."""
    try:
        from torch._inductor.codegen.common import get_wrapper_codegen_for_device
        wrapper = get_wrapper_codegen_for_device("npu")
    except (ImportError, AttributeError, RuntimeError):
        return ""
    if wrapper is None:
        return ""
    where = f"{wrapper.__module__}.{wrapper.__qualname__}"
    triton = "triton" in where.lower() or wrapper.__module__.startswith("PyTorchSimCodegen")
    if route_name == "torchsim-mlir" and triton:
        return (f"PyTorchSim registered {where} for npu, the Triton route: torchsim-mlir would run "
                f"Triton kernels and call them MLIR; use torchsim-triton with this checkout")
    return ""


def wrap_module_functions(module_names, attribute: str, wrap) -> list:
    """Replace `attribute` of each importable module by wrap(original); returns the
    modules patched (PyTorchSim calls these through the module, so the patch is seen)."""
    import importlib
    patched = []
    for name in module_names:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, attribute):
            setattr(module, attribute, wrap(getattr(module, attribute)))
            patched.append(name)
    return patched
