"""Deliberately wrong kernel launchers, each one a bug PyTorchSim's Triton route really had
(PR #308). Plug one in with TritonInterpreterRoute(options={"launcher": SwappedGrid()}); the
capture still records the launch Inductor asked for, so replaying it is the reference.
"""
from __future__ import annotations

import torch

from torchsim_diff.routes.triton.shims import run_interpreted


class SwappedGrid:
    """Launches with grid axes x and y exchanged (their grid_of emitted outermost-first)."""

    def launch(self, launch):
        gx, gy, gz = launch.grid
        run_interpreted(launch, grid=(gy, gx, gz))


class ZeroSeededOutputs:
    """Fills every out_ptr / in_out_ptr argument with zeros before the launch (their
    write_inputs treated a mutated graph input as "out" and seeded it with zeros)."""

    def launch(self, launch):
        for name, arg in zip(launch.arg_names, launch.args):
            if isinstance(arg, torch.Tensor) and "out_ptr" in name:
                arg.zero_()
        run_interpreted(launch)


class StridedAsContiguous:
    """Passes each strided input with its elements laid out contiguously, while the kernel
    still indexes it by the planned strides (their write_inputs called .contiguous())."""

    def launch(self, launch):
        args = [self._as_contiguous_data(arg) if self._strided_input(name, arg) else arg
                for name, arg in zip(launch.arg_names, launch.args)]
        run_interpreted(launch, args=args)

    @staticmethod
    def _strided_input(name, arg):
        return isinstance(arg, torch.Tensor) and "out_ptr" not in name and not arg.is_contiguous()

    @staticmethod
    def _as_contiguous_data(arg):
        offset, numel = arg.storage_offset(), arg.numel()
        storage_numel = arg.untyped_storage().nbytes() // arg.element_size()
        flat = torch.zeros(max(storage_numel, offset + numel), dtype=arg.dtype)
        flat[offset:offset + numel] = arg.contiguous().reshape(-1)
        return flat.as_strided(arg.shape, arg.stride(), offset)
