"""Deliberately wrong Spike launchers for route triton-spike, each one a bug PyTorchSim's
Triton route really had (PR #308), built on our SpikeLauncher by overriding one hook. Plug
one in with make_route("triton-spike", {"launcher": "doubles.spike_launchers:ReversedGrid"}).
The capture still records the launch Inductor asked for, so its interpreter replay is the
reference that localises the fault to the kernel.
"""
from __future__ import annotations

import torch

from torchsim_diff.routes.triton_spike.launcher import SpikeLauncher


def _storage_index(plan, arg):
    for index, storage in enumerate(plan.storages):
        if storage.untyped_storage().data_ptr() == arg.untyped_storage().data_ptr():
            return index
    raise LookupError("argument storage not in the plan")


class StridesAsContiguous(SpikeLauncher):
    """Sends each strided input with its elements laid out contiguously from its offset,
    while the kernel still indexes it by the planned strides (their .contiguous())."""

    def storage_contents(self, launch, plan):
        contents = super().storage_contents(launch, plan)
        for name, arg in zip(launch.arg_names, launch.args):
            if isinstance(arg, torch.Tensor) and "out_ptr" not in name and not arg.is_contiguous():
                raw = bytearray(contents[_storage_index(plan, arg)])
                dense = arg.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                start = arg.storage_offset() * arg.element_size()
                raw[start:start + len(dense)] = dense
                contents[_storage_index(plan, arg)] = bytes(raw)
        return contents


class ZeroSeededInOut(SpikeLauncher):
    """Seeds every out_ptr / in_out_ptr storage with zeros (their write_inputs treated a
    mutated buffer as a pure output)."""

    def storage_contents(self, launch, plan):
        contents = super().storage_contents(launch, plan)
        for name, arg in zip(launch.arg_names, launch.args):
            if isinstance(arg, torch.Tensor) and "out_ptr" in name:
                index = _storage_index(plan, arg)
                contents[index] = bytes(len(contents[index]))
        return contents


class ReversedGrid(SpikeLauncher):
    """Walks the grid given outermost-first (z, y, x) as if it were (x, y, z)."""

    def grid(self, launch):
        return tuple(reversed(super().grid(launch)))


class WrongBlockSize(SpikeLauncher):
    """Compiles the kernel with half the launch's XBLOCK (a block size it did not set)."""

    def constexprs(self, launch):
        chosen = super().constexprs(launch)
        if chosen.get("XBLOCK", 1) > 1:
            chosen["XBLOCK"] //= 2
        return chosen
