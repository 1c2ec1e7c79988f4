"""repro.py for a bug of Triton itself met on the `triton` route: one plain `@triton.jit` kernel
and its launch, with no torch.compile, as Triton's maintainers ask for.

The kernel is Inductor's, taken from the case's kernel capture (kernels.capture) with
its autotuning decorator replaced by `@triton.jit`; the launch is written out literally: each
buffer's values before it runs, the scalar arguments, the block sizes and the grid. What the
kernel should leave in its output is eager PyTorch's value of the program's output, so the
capture must be one launch whose one output is the program's one output, of its shape. A
crash needs no expected values: the launch raising is the bug.

`python repro.py` runs the kernel under TRITON_INTERPRET=1; `python repro.py cuda` runs it
compiled, on a GPU. Exit 1 while the bug shows, 0 once the kernel gives eager's values, 2
when torch or triton is missing.

    source = render_script(plan_launch(case, capture_folder), heading)   # PlainKernelError: cannot
"""
from __future__ import annotations

import ast
import dataclasses
import keyword
import math
import os
import re

from torchsim_diff.report.script_text import check_script, docstring

INLINE_ELEMENTS = 256       # a buffer with more elements than this is not written out literally
# Names Inductor's kernels take from torch's Triton helpers, and the import that gives each.
HELPER_IMPORTS = {
    "triton_helpers": "from torch._inductor.runtime import triton_helpers",
    "libdevice": "from torch._inductor.runtime.triton_helpers import libdevice",
    "tl_math": "from torch._inductor.runtime.triton_helpers import math as tl_math",
}


class PlainKernelError(Exception):
    """The failure cannot be shown as one plain kernel launch (the reason is the message)."""


@dataclasses.dataclass(frozen=True)
class Buffer:
    """One storage the launch sees: its dtype, its values before the launch, and, for the
    program's output, the view eager's value is compared with."""
    name: str
    dtype: str
    before: list
    expected_view: tuple | None = None       # (size, stride, offset) of the output's view
    expected: list | None = None              # eager's output values, row-major over that view


@dataclasses.dataclass(frozen=True)
class PlainLaunch:
    kernel_name: str
    kernel_source: str          # `@triton.jit def ...`, the kernel alone
    helpers: tuple              # lines of HELPER_IMPORTS the kernel needs
    grid: tuple
    constexprs: dict
    args: list                  # ("tensor", buffer, size, stride, offset) or ("scalar", value)
    buffers: list               # of Buffer
    crashes: bool               # the bug is the launch raising: no expected values


def plain_kernel_source(module_text: str, kernel_name: str) -> str:
    """The function `kernel_name` of a kernel module, its decorators replaced by `@triton.jit`."""
    try:
        tree = ast.parse(module_text)
    except SyntaxError as exc:
        raise PlainKernelError(f"the captured kernel module does not parse: {exc}") from None
    found = next((node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == kernel_name),
                 None)
    if found is None:
        raise PlainKernelError(f"the captured kernel module defines no function {kernel_name!r}")
    lines = module_text.splitlines()[found.lineno - 1:found.end_lineno]
    return "\n".join(["@triton.jit", *lines])


def helpers_used(kernel_source: str) -> tuple:
    return tuple(line for name, line in HELPER_IMPORTS.items() if re.search(rf"\b{name}\.", kernel_source))


def plan_launch(case, capture_folder: str, crashes: bool) -> PlainLaunch:
    """The one launch of `capture_folder` (a case's kernels/ folder), with eager's output
    values for its output buffer unless the bug is a crash."""
    from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders
    folders = launch_folders(capture_folder)
    if not folders:
        raise PlainKernelError("the run launched no Triton kernel")
    if len(folders) > 1 and not crashes:
        raise PlainKernelError(f"the program runs {len(folders)} kernels; one plain launch shows one")
    launch = CapturedLaunch(folders[-1])                 # a crash: the launch that raised is the last
    meta = launch.meta
    _check_names([*meta["buffers"], *meta["constexprs"]])
    with open(launch.source_path, encoding="utf-8") as handle:
        source = plain_kernel_source(handle.read(), meta["kernel_name"])
    args = [_argument(arg, meta["buffers"]) for arg in meta["args"]]
    storages = launch.storages("before", "cpu")
    buffers = [_buffer(name, info["dtype"], storages[name]) for name, info in meta["buffers"].items()]
    if not crashes:
        buffers = _with_expected(case, meta, buffers)
    return PlainLaunch(meta["kernel_name"], source, helpers_used(source), tuple(meta["grid"]),
                       dict(meta["constexprs"]), args, buffers, crashes)


def _argument(arg: dict, buffers: dict) -> tuple:
    if arg["kind"] == "tensor":
        if arg["dtype"] != buffers[arg["buffer"]]["dtype"]:
            raise PlainKernelError(f"argument {arg['name']} views buffer {arg['buffer']} as another dtype")
        return ("tensor", arg["buffer"], tuple(arg["size"]), tuple(arg["stride"]), arg["storage_offset"])
    return ("scalar", arg["value"])


def _check_names(names: list) -> None:
    """Buffer and block-size names become Python names in repro.py: identifiers only (a capture is a file)."""
    bad = [name for name in names if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name))]
    if bad:
        raise PlainKernelError(f"the capture names {str(bad[0])[:40]!r}, which is no Python name")


def _buffer(name: str, dtype: str, raw) -> Buffer:
    from torchsim_diff.kernels.capture import torch_dtype
    storage = raw.view(torch_dtype(dtype))
    if storage.numel() > INLINE_ELEMENTS:
        raise PlainKernelError(f"buffer {name} holds {storage.numel()} elements, more than a literal launch shows")
    return Buffer(name, dtype, storage.tolist())


def _with_expected(case, meta: dict, buffers: list) -> list:
    """`buffers` with eager's output values on the one buffer the kernel writes as the output."""
    outputs = _eager_outputs(case)
    if len(outputs) != 1:
        raise PlainKernelError(f"the program has {len(outputs)} outputs; a plain launch compares one")
    out = outputs[0]
    written = [a for a in meta["args"] if a["kind"] == "tensor" and a["role"] == "out"]
    if len(written) != 1 or tuple(written[0]["size"]) != tuple(out.shape):
        raise PlainKernelError("the launch does not write the program's output as one buffer of its shape")
    arg = written[0]
    view = (tuple(arg["size"]), tuple(arg["stride"]), arg["storage_offset"])
    return [dataclasses.replace(b, expected_view=view, expected=out.reshape(-1).tolist())
            if b.name == arg["buffer"] else b for b in buffers]


def _eager_outputs(case) -> tuple:
    from torchsim_diff.case import layout
    from torchsim_diff.case.program_check import load_program
    program = load_program(case.program_source())
    return tuple(program(*layout.materialize_all(case.to_dict())))


def render_script(plan: PlainLaunch, heading: str) -> str:
    """The text of repro.py for `plan` (see the module docstring)."""
    head = f"{heading}\n" + ("Exit 1: the bug reproduces, 0: fixed, 2: cannot run here (no torch, or no triton).\n"
             "python repro.py: the kernel under TRITON_INTERPRET=1; python repro.py cuda: compiled, on a GPU.")
    body = [docstring(head), "import os", "import sys", "",
            'DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cpu"',
            'os.environ["TRITON_INTERPRET"] = "1" if DEVICE == "cpu" else "0"   # before triton is imported',
            "try:", "    import torch", "    import triton", "    import triton.language as tl",
            *(f"    {line}" for line in plan.helpers),
            "except ImportError as exc:", '    sys.exit(print(f"cannot run here: {exc}") or 2)', "", "",
            plan.kernel_source, "", "",
            "# the launch: each buffer as it is before the kernel runs, then the kernel's arguments in order",
            *(_buffer_line(b) for b in plan.buffers),
            "try:",
            f"    {plan.kernel_name}[{_literal(plan.grid)}]({_call_arguments(plan)})",
            "except Exception as exc:  # the launch failing is the bug",
            '    sys.exit(print(f"REPRODUCES: {type(exc).__name__}: {exc}") or 1)']
    body += _comparison(plan) if not plan.crashes else ['print("FIXED: the launch runs")']
    return check_script("\n".join(body) + "\n", head)


def _buffer_line(buffer: Buffer) -> str:
    return (f"{buffer.name} = torch.tensor({_values(buffer.before)}, dtype=torch.{buffer.dtype}, "
            f"device=DEVICE)")


def _call_arguments(plan: PlainLaunch) -> str:
    parts = []
    for arg in plan.args:
        if arg[0] == "tensor":
            _, buffer, size, stride, offset = arg
            parts.append(f"{buffer}.as_strided({_literal(size)}, {_literal(stride)}, {offset})")
        else:
            parts.append(_number(arg[1]))
    parts += [f"{name}={_number(value)}" for name, value in plan.constexprs.items()]
    return ", ".join(parts)


def _comparison(plan: PlainLaunch) -> list:
    out = next(b for b in plan.buffers if b.expected is not None)
    size, stride, offset = out.expected_view
    return [f"got = {out.name}.as_strided({_literal(size)}, {_literal(stride)}, {offset}).cpu()",
            f"expected = torch.tensor({_values(out.expected)}, dtype=torch.{out.dtype}).reshape({_literal(size)})"
            "  # eager PyTorch",
            "try:",
            "    torch.testing.assert_close(got, expected, equal_nan=True)",
            "except AssertionError as exc:",
            '    sys.exit(print(f"kernel differs from eager PyTorch: {exc}\\n  expected {expected.tolist()}\\n'
            '  got      {got.tolist()}\\nREPRODUCES") or 1)',
            'print("FIXED: the kernel gives eager\'s values")']


def _values(values: list) -> str:
    return "[" + ", ".join(_number(v) for v in values) + "]"


def _number(value) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return 'float("nan")' if math.isnan(value) else ('float("inf")' if value > 0 else '-float("inf")')
    return repr(value)


def _literal(values) -> str:
    values = tuple(values)
    return "(" + ", ".join(str(v) for v in values) + ("," if len(values) == 1 else "") + ")"


def description(expression: str, crashes: bool) -> str:
    what = ("raises under `TRITON_INTERPRET=1`" if crashes else
            "leaves a value under `TRITON_INTERPRET=1` that differs from eager PyTorch's")
    return (f"The `@triton.jit` kernel in `repro.py` (the kernel Inductor generates for `{expression}`, its "
            f"autotuning decorator dropped) {what}. `repro.py` writes out the launch: every buffer's values, "
            "the scalar arguments, the block sizes and the grid. `python repro.py cuda` runs the same launch "
            "compiled, on a GPU.")


def versions_text() -> str:
    import platform
    import torch
    from torchsim_diff.report.issue_text import dist_version
    lines = [f"triton: {dist_version('triton')}", f"torch: {torch.__version__} (tensors and the kernel's helpers only)",
             f"numpy: {dist_version('numpy')}", f"python: {platform.python_version()}", "TRITON_INTERPRET=1"]
    return "\n".join(lines) + "\n"


def capture_of(artifact_dir: str | None) -> str | None:
    """The kernels/ capture folder of a triton-route artifact folder, if it has one."""
    folder = os.path.join(artifact_dir, "kernels") if artifact_dir else None
    return folder if folder and os.path.isdir(folder) else None
