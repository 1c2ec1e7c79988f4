"""Routes with compile settings that mis-handle a case's second size, as a guard or
recompilation bug would; the second-size replay must catch them."""
from torchsim_diff.routes import compile_options
from torchsim_diff.routes.base import Compiled, Route


class _Eager(Compiled):
    def __init__(self, program, first_numel=None):
        self.program, self.first_numel = program, first_numel

    def __call__(self, inputs, ctx):
        outputs = list(self.program(*inputs))
        if self.first_numel is not None:
            # A kernel still bounded by the first size: elements past it are never written.
            first = outputs[0].contiguous().clone()
            first.view(-1)[self.first_numel:] = 0
            outputs[0] = first
        return tuple(outputs)


class StaleBoundRoute(Route):
    """Right at every first size; at a second size (the same compiled function) output 0 is
    written only as far as the first size's element count."""

    name = "double-stale-bound"
    compile_settings = True

    def __init__(self, options=None):
        super().__init__(options)
        self.first_numel: dict = {}

    def compile(self, program, example_inputs, ctx):
        key = compile_options.graph_key(ctx.case)
        outputs = program(*example_inputs)
        if compile_options.SECOND_SIZE_MARK not in ctx.case["values"]:
            self.first_numel[key] = outputs[0].numel()
            return _Eager(program)
        return _Eager(program, self.first_numel.get(key))


class AlwaysRightRoute(StaleBoundRoute):
    """The same route without the bug: a second size passes."""

    name = "double-dynamic-right"

    def compile(self, program, example_inputs, ctx):
        return _Eager(program)
