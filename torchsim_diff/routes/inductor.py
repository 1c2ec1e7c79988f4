"""Route `inductor`: torch.compile with Inductor's C++ backend on CPU."""
from __future__ import annotations

import os

from torchsim_diff.routes import compile_options
from torchsim_diff.routes.base import FunctionCompiled, Route

PCH_DIR_ENV = "TORCHSIM_DIFF_PCH_DIR"


class InductorRoute(Route):
    name = "inductor"
    description = "torch.compile(fullgraph; options dynamic, mode, freezing), Inductor C++ kernels on CPU"
    compile_settings = True         # takes routes/compile_options.py's settings

    @classmethod
    def worker_env(cls, options):
        # One thread keeps two workers per 2-core machine from fighting over cores.
        return {"OMP_NUM_THREADS": "1"}

    def setup(self):
        import torch
        torch.set_num_threads(1)
        share_precompiled_headers()

    def warm_up(self):
        # Inductor's first compile in a process initialises its C++ toolchain checks and
        # caches: 7-16 s here, about 60 s per process on a GPU machine's image.
        import torch
        compile_options.compile_program(_increment, self.options)(torch.zeros(4))

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        chosen = compile_options.settings(self.options)   # a bad value fails here, before any worker starts
        self.cacheable = not chosen["freezing"]             # a frozen program holds its case's values
        self.compiler = compile_options.Compiler(self.options)

    def compile(self, program, example_inputs, ctx):
        compiled, _, reused = self.compiler.compile(program, ctx.case, example_inputs)
        ctx.metrics["same_function"] = reused
        compiled(*example_inputs)   # torch.compile is lazy: compile errors (and recompiles) surface here
        return FunctionCompiled(compiled)

    def versions(self):
        import torch
        return {"torch": torch.__version__, **compile_options.settings(self.options)}


def _increment(x):
    return x + 1


def share_precompiled_headers() -> None:
    """One folder of Inductor's precompiled C++ headers per machine, shared by every worker.

    Inductor keeps them under its cache folder, which is per worker here (parallel workers
    never share a cache), so each worker spent 7-16 s building the same header before its
    first case. A header's file name hashes the compiler, its flags and the preprocessed
    text, and it is built under a file lock: the first worker on a machine builds it, the
    others (and later campaigns) only read it. TORCHSIM_DIFF_PCH_DIR picks the folder
    (`off`: one per worker, as Inductor does by itself).
    """
    from torch._inductor import codecache
    if not hasattr(codecache, "_HEADER_DIR"):
        return      # a torch without this layout keeps headers per worker: slower, same results
    folder = os.environ.get(PCH_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "torchsim-diff", "inductor-pch")
    if folder == "off":
        return      # for measuring what sharing saves
    codecache._HEADER_DIR = folder
    codecache._HEADER_LOCK_DIR = os.path.join(folder, "locks")
