"""Compile settings of the torch.compile routes (`inductor`, `triton`, `triton-cuda`), as
route options:

    --route-option inductor.dynamic=true          symbolic shapes (torch.compile dynamic=True)
    --route-option inductor.dynamic=mixed         symbolic shapes for a third of the graphs
    --route-option triton.mode=max-autotune-no-cudagraphs
    --route-option inductor.emulate_precision_casts=false   (torch's own default)
    --route-option inductor.freezing=true         inputs never mutated become frozen parameters
    --route-option inductor.simdlen=host          the host's widest vector ISA (default: 256 bits)

`dynamic=mixed` decides per graph, from a hash of the graph without its sizes, so a case,
its replays and its second size (torchsim_diff.run.second_size) always get the same setting;
records carry the decision (`dynamic`). A dynamic case is also run at a second size through
the same compiled function (`Compiler`), which is where recompilation and guard bugs show.

`freezing` wraps the program in a module whose parameters (float inputs) and buffers (the
others) are every input but the first that the graph never mutates, and compiles it under
no_grad with Inductor's `freezing` config, which folds them into the compiled code as
constants. A frozen program is only valid for the values it was compiled with, so the routes
stop reusing compiled programs across cases when it is on.

`emulate_precision_casts` (Inductor config) rounds fp16/bf16 intermediates the way eager
does. It is on by default here, unlike torch: without it Inductor drops an explicit
`x.to(float16).to(float32)` round trip (measured: 1.7e-3 off eager on a sum of 37 values, 0 with
it), which is a documented Inductor choice, not a bug, and would flood campaigns with findings. Every setting is recorded
in the route's versions, so a record says what compiled it.

`simdlen` (Inductor's `cpp.simdlen`) is the width of the C++ kernels' vectors: 256 bits by
default (AVX2, which every x86-64 host of the last decade has), `512`, `0` for scalar code, or
`host` for Inductor's own pick, the widest the host has. Inductor's pick made verdicts depend on
the machine: its AVX2 remainder overflows for a subnormal divisor and its AVX-512 one does not,
so a known bug stopped reproducing on an AVX-512 host. A host other than x86-64 gets its own pick.

Worker-side module: standard library only at import time.
"""
from __future__ import annotations

import collections
import hashlib
import json

BOOLEANS = {"true": True, "false": False, "1": True, "0": False, True: True, False: False, 1: True, 0: False}
MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")
DEFAULTS = {"dynamic": False, "mode": "default", "emulate_precision_casts": True, "freezing": False,
            "simdlen": 256}
TORCH_COMPILE = "torch.compile"     # the compiler's name in a bug report's repro.py
HOST = "host"
SIMDLENS = (256, 512, 0, HOST)
MIXED = "mixed"
MIXED_SHARE = 3            # dynamic=mixed: one graph in MIXED_SHARE is compiled with dynamic shapes
SECOND_SIZE_MARK = "second_size_of"     # values key of a case that resizes an earlier one


def boolean(key):
    def parse(value):
        if value not in BOOLEANS:
            raise ValueError(f"{key}={value!r} is not a boolean; use {key}=true or {key}=false")
        return BOOLEANS[value]
    return parse


def _dynamic(value):
    if value == MIXED:
        return MIXED
    if value not in BOOLEANS:
        raise ValueError(f"dynamic={value!r} is not true, false or mixed; use dynamic=true, "
                         f"dynamic=false or dynamic=mixed (a third of the graphs)")
    return BOOLEANS[value]


def _mode(value):
    if value not in MODES:
        raise ValueError(f"mode={value!r} is not a torch.compile mode; use one of {', '.join(MODES)}")
    return value


def _simdlen(value):
    chosen = value if value == HOST else int(value) if str(value).isdigit() else None
    if chosen not in SIMDLENS:
        raise ValueError(f"simdlen={value!r} is not a vector width; use simdlen=256, 512, 0 (scalar) or host")
    return chosen


PARSERS = {"dynamic": _dynamic, "mode": _mode,
           "emulate_precision_casts": boolean("emulate_precision_casts"), "freezing": boolean("freezing"),
           "simdlen": _simdlen}


def settings(options: dict) -> dict:
    """The compile settings in `options` (route options of other kinds are left alone),
    defaults filled in; raises ValueError naming a bad value and the fix."""
    chosen = dict(DEFAULTS)
    for key, parse in PARSERS.items():
        if key in options:
            chosen[key] = parse(options[key])
    return chosen


def graph_key(case: dict) -> str:
    """The case's graph without its sizes, strides and values: equal for a case and its
    second size."""
    inputs = [(i["name"], i["dtype"], len(i["shape"]), i.get("domain", {}).get("kind"), bool(i.get("mutated")))
              for i in case["inputs"]]
    return json.dumps([case["dtype"], inputs, case["nodes"], case["outputs"]], sort_keys=True)


def dynamic_for(options: dict, case: dict) -> bool:
    """Whether `case` compiles with dynamic shapes under these options."""
    chosen = settings(options)["dynamic"]
    if chosen != MIXED:
        return chosen
    digest = hashlib.sha256(graph_key(case).encode()).hexdigest()
    return int(digest[:8], 16) % MIXED_SHARE == 0


def replays_second_size(options: dict, case: dict) -> bool:
    """Whether `case` is also run at a second size: dynamic shapes, and no frozen inputs
    (a frozen program holds the first size's values)."""
    return dynamic_for(options, case) and not settings(options)["freezing"]


def compile_program(program, options: dict, case: dict | None = None, example_inputs=None):
    """`torch.compile(program, fullgraph=True)` with the settings in `options` (and, for
    dynamic=mixed, the decision for `case`). With freezing on, the returned callable still
    takes every input, and ignores the frozen ones: they are `example_inputs`' values."""
    import torch
    from torch._inductor import config
    chosen = settings(options)
    config.emulate_precision_casts = chosen["emulate_precision_casts"]
    config.freezing = chosen["freezing"]
    config.cpp.simdlen = inductor_simdlen(chosen["simdlen"])
    dynamic = dynamic_for(options, case) if case is not None else chosen["dynamic"] is True
    mode = None if chosen["mode"] == "default" else chosen["mode"]
    if chosen["freezing"] and case is not None and example_inputs is not None:
        return _frozen(program, case, example_inputs, dynamic, mode)
    return torch.compile(program, backend="inductor", fullgraph=True, dynamic=dynamic, mode=mode)


def inductor_simdlen(chosen) -> int | None:
    """Inductor's cpp.simdlen for the setting: None lets it pick; a width the host has no ISA
    of (0 among them) gives scalar code. The default width is asked for on x86-64 hosts only."""
    import platform
    if chosen == HOST or (chosen == DEFAULTS["simdlen"] and platform.machine() not in ("x86_64", "AMD64")):
        return None
    return chosen or 1


def frozen_positions(case: dict) -> list:
    """Inputs that become parameters or buffers: every one but the first that is never mutated."""
    return [i for i, spec in enumerate(case["inputs"]) if i > 0 and not spec.get("mutated")]


def _frozen(program, case, example_inputs, dynamic, mode):
    import torch
    frozen = frozen_positions(case)
    module = _program_module_class()(program, example_inputs, frozen)
    compiled = torch.compile(module, backend="inductor", fullgraph=True, dynamic=dynamic, mode=mode)

    def run(*inputs):
        free = [x for i, x in enumerate(inputs) if i not in frozen]
        with torch.no_grad():
            return compiled(*free)
    return run


def _program_module_class():
    import torch

    class ProgramModule(torch.nn.Module):
        """The program with its frozen inputs held as parameters (floats) or buffers."""

        def __init__(self, program, example_inputs, frozen):
            super().__init__()
            self.program, self.frozen, self.count = program, list(frozen), len(example_inputs)
            for i in self.frozen:
                tensor = example_inputs[i]
                if tensor.dtype.is_floating_point:
                    self.register_parameter(f"p{i}", torch.nn.Parameter(tensor, requires_grad=False))
                else:
                    self.register_buffer(f"p{i}", tensor)

        def forward(self, *free):
            rest = iter(free)
            args = [getattr(self, f"p{i}") if i in self.frozen else next(rest) for i in range(self.count)]
            return self.program(*args)
    return ProgramModule


class Compiler:
    """Compiles programs for a route and keeps the last few compiled functions per graph
    (without sizes), so that a case's second size runs through the function its first size
    compiled: Dynamo then checks its guards and recompiles, or not, as a user's code would."""

    KEEP = 8

    def __init__(self, options: dict):
        self.options = dict(options)
        self.functions: collections.OrderedDict = collections.OrderedDict()

    def compile(self, program, case: dict, example_inputs) -> tuple:
        """(compiled function, notes, reused): notes is a dict the route may fill for a
        later reuse (e.g. the generated code); reused says the function came from an
        earlier size of the same graph."""
        key = graph_key(case)
        if SECOND_SIZE_MARK in case.get("values", {}) and key in self.functions \
                and replays_second_size(self.options, case):
            self.functions.move_to_end(key)
            return (*self.functions[key], True)
        fn = compile_program(program, self.options, case, example_inputs)
        self.functions[key] = (fn, {})
        while len(self.functions) > self.KEEP:
            self.functions.popitem(last=False)
        return (*self.functions[key], False)
