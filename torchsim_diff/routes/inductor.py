"""Route `inductor`: torch.compile with Inductor's C++ backend on CPU."""
from __future__ import annotations

from torchsim_diff.routes import compile_options
from torchsim_diff.routes.base import FunctionCompiled, Route


class InductorRoute(Route):
    name = "inductor"
    description = "torch.compile(fullgraph; options dynamic, mode), Inductor C++ kernels on CPU"

    @classmethod
    def worker_env(cls, options):
        # One thread keeps two workers per 2-core machine from fighting over cores.
        return {"OMP_NUM_THREADS": "1"}

    def setup(self):
        import torch
        torch.set_num_threads(1)

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        compile_options.settings(self.options)      # a bad value fails here, before any worker starts

    def compile(self, program, example_inputs, ctx):
        compiled = compile_options.compile_program(program, self.options)
        compiled(*example_inputs)   # torch.compile is lazy: compile errors surface here
        return FunctionCompiled(compiled)

    def versions(self):
        import torch
        return {"torch": torch.__version__, **compile_options.settings(self.options)}
