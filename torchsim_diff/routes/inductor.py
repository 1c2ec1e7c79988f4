"""Route `inductor`: torch.compile with Inductor's C++ backend on CPU."""
from __future__ import annotations

from torchsim_diff.routes.base import FunctionCompiled, Route


class InductorRoute(Route):
    name = "inductor"
    description = "torch.compile(fullgraph, dynamic=False), Inductor C++ kernels on CPU"

    @classmethod
    def worker_env(cls, options):
        # One thread keeps two workers per 2-core machine from fighting over cores.
        return {"OMP_NUM_THREADS": "1"}

    def setup(self):
        import torch
        torch.set_num_threads(1)

    def compile(self, program, example_inputs, ctx):
        import torch
        compiled = torch.compile(program, backend="inductor", fullgraph=True, dynamic=False)
        compiled(*example_inputs)   # torch.compile is lazy: compile errors surface here
        return FunctionCompiled(compiled)

    def versions(self):
        import torch
        return {"torch": torch.__version__}
