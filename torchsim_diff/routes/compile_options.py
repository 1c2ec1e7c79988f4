"""Compile settings of the torch.compile routes (`inductor`, `triton`, `triton-cuda`), as
route options:

    --route-option inductor.dynamic=true          symbolic shapes (torch.compile dynamic=True)
    --route-option triton.mode=max-autotune-no-cudagraphs
    --route-option inductor.emulate_precision_casts=false   (torch's own default)

`emulate_precision_casts` (Inductor config) rounds fp16/bf16 intermediates the way eager
does. It is on by default here, unlike torch: without it Inductor drops an explicit
`x.to(float16).to(float32)` round trip (measured: 1.7e-3 off eager on a sum of 37 values, 0 with
it), which is a documented Inductor choice, not a bug, and would flood campaigns with findings. Every setting is recorded
in the route's versions, so a record says what compiled it.

Worker-side module: standard library only at import time.
"""
from __future__ import annotations

BOOLEANS = {"true": True, "false": False, "1": True, "0": False, True: True, False: False, 1: True, 0: False}
MODES = ("default", "max-autotune-no-cudagraphs", "max-autotune", "reduce-overhead")
DEFAULTS = {"dynamic": False, "mode": "default", "emulate_precision_casts": True}


def _boolean(key):
    def parse(value):
        if value not in BOOLEANS:
            raise ValueError(f"{key}={value!r} is not a boolean; use {key}=true or {key}=false")
        return BOOLEANS[value]
    return parse


def _mode(value):
    if value not in MODES:
        raise ValueError(f"mode={value!r} is not a torch.compile mode; use one of {', '.join(MODES)}")
    return value


PARSERS = {"dynamic": _boolean("dynamic"), "mode": _mode,
           "emulate_precision_casts": _boolean("emulate_precision_casts")}


def settings(options: dict) -> dict:
    """The compile settings in `options` (route options of other kinds are left alone),
    defaults filled in; raises ValueError naming a bad value and the fix."""
    chosen = dict(DEFAULTS)
    for key, parse in PARSERS.items():
        if key in options:
            chosen[key] = parse(options[key])
    return chosen


def compile_program(program, options: dict):
    """`torch.compile(program, fullgraph=True)` with the settings in `options`."""
    import torch
    from torch._inductor import config
    chosen = settings(options)
    config.emulate_precision_casts = chosen["emulate_precision_casts"]
    mode = None if chosen["mode"] == "default" else chosen["mode"]
    return torch.compile(program, backend="inductor", fullgraph=True, dynamic=chosen["dynamic"], mode=mode)
