"""Route `eager`: the program run by eager PyTorch in the case dtype.

A self-check: it must never fail. A finding on this route is a bug in torchsim-diff
(generator, oracle or harness), not in PyTorch.
"""
from __future__ import annotations

from torchsim_diff.routes.base import FunctionCompiled, ReportFacts, Route


class EagerRoute(Route):
    name = "eager"
    report = ReportFacts(project="pytorch", toolchain="", script=("", "eager"))
    description = "eager PyTorch in the case dtype (self-check: must never fail)"

    def compile(self, program, example_inputs, ctx):
        return FunctionCompiled(program)
