"""Deliberately broken routes (test doubles) for the harness's own tests.

Registered through the TORCHSIM_DIFF_ROUTES environment variable (see `double_routes`
in tests/conftest.py), so they run in real worker subprocesses like any route.
"""
import ctypes
import json
import time

import torch

from torchsim_diff.case.layout import storage_of
from torchsim_diff.routes.base import Compiled, Route


def _corrupt_first_element(t) -> None:
    """Off by one in place (flipped, for a bool output such as a comparison's; 0 where one more
    leaves it as it was: a non-finite or a huge value)."""
    first = (0,) * t.dim()             # an index, not a view: t may be a strided input
    if t.dtype == torch.bool:
        t[first] = ~t[first]
    elif t.dtype.is_floating_point:
        old = t[first].clone()
        t[first] += 1
        if not bool(torch.isfinite(old)) or bool(t[first] == old):    # +1 leaves it as it was
            t[first] = 1.0 if bool(old == 0) else 0.0
    else:
        t[first] += 1


def _odd_seed(ctx) -> bool:
    return ctx.case["values"]["seed"] % 2 == 1


class _Eager(Compiled):
    def __init__(self, program, after=None):
        self.program, self.after = program, after

    def __call__(self, inputs, ctx):
        outputs = self.program(*inputs)
        if self.after:
            self.after(inputs, outputs, ctx)
        return outputs


class GuardWriterRoute(Route):
    """Correct outputs, but writes one element just past the end of input 0's view."""

    name = "double-guard-writer"

    def compile(self, program, example_inputs, ctx):
        def scribble(inputs, outputs, ctx):
            storage_of(inputs[0])[-1] = 7.0
        return _Eager(program, scribble)


class WrongElementRoute(Route):
    """Returns output 0 with its first element off by one; a graph with no output (only in-place
    updates) has its first mutated input off by one instead."""

    name = "double-wrong-element"

    def compile(self, program, example_inputs, ctx):
        mutated = [i for i, spec in enumerate(ctx.case["inputs"]) if spec.get("mutated")]

        class _Corrupting(Compiled):
            def __call__(self, inputs, ctx):
                outputs = list(program(*inputs))
                if not outputs:
                    _corrupt_first_element(inputs[mutated[0]])
                    return ()
                first = outputs[0].contiguous().clone()
                _corrupt_first_element(first)
                return tuple([first] + outputs[1:])
        return _Corrupting()


class ZeroSeededInoutRoute(Route):
    """Treats mutated inputs as pure outputs: zeroes them before running (PR #308's bug)."""

    name = "double-zero-inout"

    def compile(self, program, example_inputs, ctx):
        mutated = [i for i, spec in enumerate(ctx.case["inputs"]) if spec.get("mutated")]

        class _Zeroing(Compiled):
            def __call__(self, inputs, ctx):
                for i in mutated:
                    inputs[i].zero_()
                return program(*inputs)
        return _Zeroing()


class _OddSeedFault(Route):
    """Runs eager, except that compiling a case with an odd seed triggers `fault()`.

    Not cacheable: the fault depends on the values' seed, not on the graph."""

    cacheable = False

    def fault(self):  # pragma: no cover - overridden
        raise NotImplementedError

    def compile(self, program, example_inputs, ctx):
        if _odd_seed(ctx):
            self.fault()
        return _Eager(program)


class SegfaultRoute(_OddSeedFault):
    """Segfaults on cases with an odd seed, runs eager on the others."""

    name = "double-segfault"

    def fault(self):
        ctypes.string_at(0)


class HangRoute(_OddSeedFault):
    """Hangs on cases with an odd seed, runs eager on the others."""

    name = "double-hang"

    def fault(self):
        time.sleep(3600)


class HangOnExpRoute(Route):
    """Hangs compiling any graph containing `exp`, runs eager on the others."""

    name = "double-hang-on-exp"

    def compile(self, program, example_inputs, ctx):
        if any(n["op"] == "exp" for n in ctx.case["nodes"]):
            time.sleep(3600)
        return _Eager(program)


class RaisingRoute(Route):
    """Fails to compile any graph containing `exp` with a message carrying sizes."""

    name = "double-raising"

    def compile(self, program, example_inputs, ctx):
        if any(n["op"] == "exp" for n in ctx.case["nodes"]):
            shape = list(example_inputs[0].shape)
            raise RuntimeError(f"LoweringException: cannot lower exp at buf{len(shape)} for size {shape}")
        return _Eager(program)


class NondeterministicRoute(Route):
    """Correct up to rounding noise that changes from run to run."""

    name = "double-nondeterministic"

    def compile(self, program, example_inputs, ctx):
        import torch

        class _Noisy(Compiled):
            def __call__(self, inputs, ctx):
                outputs = list(program(*inputs))
                noise = torch.rand(()) * 1e-9
                return tuple([outputs[0] + noise] + outputs[1:])
        return _Noisy()


class UnavailableRoute(Route):
    name = "double-unavailable"

    def available(self):
        return False, "the double toolchain is not installed (set DOUBLE_HOME)"


DOUBLES = {cls.name: f"tests.route_doubles:{cls.__name__}" for cls in (
    GuardWriterRoute, WrongElementRoute, ZeroSeededInoutRoute, SegfaultRoute, HangRoute, HangOnExpRoute,
    RaisingRoute, NondeterministicRoute, UnavailableRoute)}


class WrongUnlessExpRoute(Route):
    """Fails to compile graphs containing `exp`; on other graphs output 0 is off by one.

    Two failure buckets on one route: a reducer must not trade one for the other.
    """

    name = "double-wrong-unless-exp"

    def compile(self, program, example_inputs, ctx):
        if any(n["op"] == "exp" for n in ctx.case["nodes"]):
            raise RuntimeError("LoweringException: exp is not supported by this double")

        class _Corrupting(Compiled):
            def __call__(self, inputs, ctx):
                outputs = list(program(*inputs))
                first = outputs[0].contiguous().clone()
                _corrupt_first_element(first)
                return tuple([first] + outputs[1:])
        return _Corrupting()


DOUBLES[WrongUnlessExpRoute.name] = f"tests.route_doubles:{WrongUnlessExpRoute.__name__}"


class DiesAtStartRoute(Route):
    """Its worker kills itself (SIGKILL) while starting, the first N times: N is read from
    DOUBLE_START_KILLS (default: always), starts are counted in the file DOUBLE_START_COUNT."""

    name = "double-dies-at-start"

    def available(self):
        import os
        import signal
        counter = os.environ["DOUBLE_START_COUNT"]
        with open(counter, "a") as handle:
            handle.write("start\n")
        with open(counter) as handle:
            starts = len(handle.readlines())
        if starts <= int(os.environ.get("DOUBLE_START_KILLS", "1000000")):
            os.kill(os.getpid(), signal.SIGKILL)
        return True, ""

    def compile(self, program, example_inputs, ctx):
        return _Eager(program)


class AdapterBugRoute(Route):
    """A slip in adapter code of ours: asks torchsim_diff.case.layout for an input spec without
    a layout, which raises KeyError inside our package (a tool_error, not a compiler bug)."""

    name = "double-adapter-bug"

    def compile(self, program, example_inputs, ctx):
        from torchsim_diff.case import layout
        layout.materialize({"name": "x", "shape": [2], "dtype": "float32"}, 0, 0)
        return _Eager(program)


class SlowStartRoute(Route):
    """Correct, but its one-time set-up takes SLOW_START_S seconds (a first compile that
    is slower than the case limit, as Inductor's is on some machines)."""

    name = "double-slow-start"
    SLOW_START_S = 4.0

    def setup(self):
        time.sleep(self.SLOW_START_S)

    def compile(self, program, example_inputs, ctx):
        return _Eager(program)


class HostPartRoute(Route):
    """Runs part of the program on the host, as triton-spike does with an op Inductor leaves to
    ATen; output 0 is off by one for odd seeds (a bug in the part it did run)."""

    name = "double-host-part"

    def compile(self, program, example_inputs, ctx):
        ctx.metrics.host_parts = ["op ran outside Triton as extern_kernels.mm"]

        def corrupt(inputs, outputs, ctx):
            if _odd_seed(ctx):
                _corrupt_first_element(outputs[0])
        return _Eager(program, corrupt)


class TrapReportingRoute(Route):
    """Reports a crash of the program it runs (as triton-spike reports a Spike trap) for every
    case, while the worker itself lives on."""

    name = "double-reports-trap"

    def compile(self, program, example_inputs, ctx):
        from torchsim_diff.routes.base import RouteFailure
        raise RouteFailure("crash", "run", "Spike trap: mcause=5 (load access fault)")


class ScratchRoute(Route):
    """Correct; its set-up makes a scratch folder in the worker's folder, as the Spike routes
    make one for their ELFs, and close() removes it."""

    name = "double-scratch"

    def setup(self):
        import tempfile
        self.scratch = tempfile.mkdtemp(prefix="double-scratch-", dir=".")

    def compile(self, program, example_inputs, ctx):
        return _Eager(program)

    def close(self):
        import shutil
        shutil.rmtree(self.scratch)


class WrongWhenWarmRoute(WrongElementRoute):
    """Wrong (as double-wrong-element) only once its worker has compiled an earlier case: a
    bug in state that cases leave behind, which a fresh process running the case alone (a
    bundle's repro.py) does not see."""

    name = "double-wrong-when-warm"
    compiled = 0

    def compile(self, program, example_inputs, ctx):
        WrongWhenWarmRoute.compiled += 1
        if WrongWhenWarmRoute.compiled == 1:
            return _Eager(program)
        return super().compile(program, example_inputs, ctx)


class WrongOnFirstSightRoute(WrongElementRoute):
    """Wrong the first time its worker meets a case, right on every run after: a flake."""

    name = "double-wrong-on-first-sight"
    cacheable = False
    seen: set = set()

    def compile(self, program, example_inputs, ctx):
        key = json.dumps(ctx.case, sort_keys=True)
        if key in WrongOnFirstSightRoute.seen:
            return _Eager(program)
        WrongOnFirstSightRoute.seen.add(key)
        return super().compile(program, example_inputs, ctx)


for _cls in (DiesAtStartRoute, AdapterBugRoute, SlowStartRoute, HostPartRoute, TrapReportingRoute, ScratchRoute,
             WrongWhenWarmRoute, WrongOnFirstSightRoute):
    DOUBLES[_cls.name] = f"tests.route_doubles:{_cls.__name__}"


class _TwoOpFaults(torch.overrides.TorchFunctionMode):
    """floor_divide rounds toward zero; relu returns 0 for NaN (eager keeps the NaN)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.floor_divide:
            return torch.div(*args, rounding_mode="trunc", **kwargs)
        if func is torch.relu:
            (x,) = args
            return torch.where(torch.isnan(x), torch.zeros_like(x), func(x, **kwargs))
        return func(*args, **kwargs)


class TwoValueBugsRoute(Route):
    """Two wrong-value bugs in one route (_TwoOpFaults): a reduction of a failure of the one
    must not end on the other, and each is its own cause."""

    name = "double-two-value-bugs"

    def compile(self, program, example_inputs, ctx):
        class _Faulty(Compiled):
            def __call__(self, inputs, ctx):
                with _TwoOpFaults():
                    return program(*inputs)
        return _Faulty()


DOUBLES[TwoValueBugsRoute.name] = f"tests.route_doubles:{TwoValueBugsRoute.__name__}"


def sum_rounding_each_partial(x, dim=None, keepdim=False):
    """torch.sum adding one element at a time in x's own dtype, each partial sum rounded to it
    (eager accumulates float16 in float32 and pairwise)."""
    if x.dim() == 0:
        return x.clone()
    dims = sorted({d % x.dim() for d in (range(x.dim()) if dim is None or dim == () else
                                         (dim if isinstance(dim, (tuple, list)) else (dim,)))})
    kept = [d for d in range(x.dim()) if d not in dims]
    flat = x.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], -1)
    total = torch.zeros(flat.shape[:-1], dtype=x.dtype)
    for k in range(flat.shape[-1]):
        total = total + flat[..., k]
    return total.reshape([1 if d in dims else size for d, size in enumerate(x.shape)]) if keepdim else total


class HalfSum(torch.overrides.TorchFunctionMode):
    """torch.sum of a float16 tensor accumulated in float16 (sum_rounding_each_partial); every
    other function as eager computes it."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.sum and args[0].dtype == torch.float16 and "dtype" not in kwargs:
            return sum_rounding_each_partial(*args, **kwargs)
        return func(*args, **kwargs)


class HalfSumRoute(Route):
    """Eager, but sums float16 with float16 accumulation (HalfSum): one op in reduced precision,
    for the per-op tolerance figures (only `sum` may need a larger tolerance)."""

    name = "double-half-sum"

    def compile(self, program, example_inputs, ctx):
        class _Half(Compiled):
            def __call__(self, inputs, ctx):
                with HalfSum():
                    return program(*inputs)
        return _Half()


DOUBLES[HalfSumRoute.name] = f"tests.route_doubles:{HalfSumRoute.__name__}"
