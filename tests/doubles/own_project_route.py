"""A route added in one file: its compiler, its upstream project and how its bug reports speak of
it, all on the class (routes.base.ReportFacts). Nothing else in torchsim-diff names it.

Its compiler is eager PyTorch that drops the last element of every float output to zero (the
bug its reports show); its upstream is a tracker none of the built-in routes files with.
"""
from torchsim_diff.routes.base import Compiled, Project, ReportFacts, Route

TOYCC = Project("toycc", "example/toycc", "https://github.com/example/toycc/issues/new",
                ("## What goes wrong", "## Toolchain"))


class _LastElementZeroed(Compiled):
    def __init__(self, program):
        self.program = program

    def __call__(self, inputs, ctx):
        outputs = list(self.program(*inputs))
        first = outputs[0].clone()
        first.view(-1)[-1] = 0
        return [first] + outputs[1:]


class OwnProjectRoute(Route):
    name = "double-own-project"
    description = "eager with the last element of output 0 zeroed, filed with toycc"
    report = ReportFacts(project="toycc", upstream=TOYCC, compiler={"toycc": "toycc -O2"})

    def compile(self, program, example_inputs, ctx):
        return _LastElementZeroed(program)

    def versions(self):
        return {**super().versions(), "toycc": "0.1 (the test double)"}
