"""Route `inductor`: torch.compile with Inductor's C++ backend on CPU."""
from __future__ import annotations

from torchsim_diff.routes import compile_options
from torchsim_diff.routes.base import FunctionCompiled, ReportFacts, Route
from torchsim_diff.routes.inductor.machine import share_precompiled_headers, share_vec_isa_checks


class InductorRoute(Route):
    name = "inductor"
    report = ReportFacts(project="pytorch", compiler={"pytorch": "torch.compile (Inductor CPU)"},
                         toolchain="C++ compiler", script=("", compile_options.TORCH_COMPILE), torch_compile=True,
                         plainest=0, bisect=True)
    description = "torch.compile(fullgraph; options dynamic, mode, freezing), Inductor C++ kernels on CPU"
    compile_settings = True         # takes routes/compile_options.py's settings
    option_names = tuple(compile_options.PARSERS)

    @classmethod
    def worker_env(cls, options):
        # One thread keeps two workers per 2-core machine from fighting over cores.
        return {"OMP_NUM_THREADS": "1"}

    def setup(self):
        import torch
        torch.set_num_threads(1)
        share_precompiled_headers()
        share_vec_isa_checks()

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
        ctx.metrics.same_function = reused
        compiled(*example_inputs)   # torch.compile is lazy: compile errors (and recompiles) surface here
        return FunctionCompiled(compiled)

    def versions(self):
        import torch
        return {"torch": torch.__version__, **compile_options.settings(self.options)}


def _increment(x):
    return x + 1
