"""The body of a plain repro.py: torch only, in the terms PyTorch's own tests use.

    program      the minimal program, as the case's op graph writes it
    inputs       views with the failing sizes, strides and storage offset of storages written
                 out exactly (-0.0, NaN, subnormals kept); a large one comes from a one-line
                 seeded generator where its values cannot matter (a compile error), else from
                 inputs.pt beside the script
    the check    compiled against eager with torch.testing.assert_close, at torch.testing's
                 default tolerances where they show the bug, else at a tolerance per output
                 written as numbers with their reason; the indices of argmax, argmin and
                 argsort are compared by the values they pick (ties may go either way); on a
                 mismatch, the float64 reference, eager and compiled values of the first
                 differing elements

No part of torchsim-diff is imported: a maintainer runs it with torch alone. Exit 1 while
the bug reproduces, 0 once fixed, 2 where it cannot run.
"""
from __future__ import annotations

import dataclasses
import math
import os

import torch

from torchsim_diff.case import layout
from torchsim_diff.case.graph import Case
from torchsim_diff.results.kinds import Kind

INLINE_ELEMENTS = 64          # larger storages come from a generator or inputs.pt
INPUTS_FILE = "inputs.pt"
SHOWN = 5                     # differing elements printed per output
# torch.testing.assert_close's default rtol per dtype (its atol defaults are absolute, 1e-5
# and up, and would hide a bug in small or subnormal values: atol is eager's own error here).
DEFAULT_RTOL = {torch.float16: 1e-3, torch.bfloat16: 1.6e-2, torch.float32: 1.3e-6, torch.float64: 1e-7}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    rtol: float | None      # None: torch.testing's default for the dtype (and atol's too)
    atol: float | None
    reason: str

    def literal(self) -> str:
        return "dict()" if self.rtol is None else f"dict(rtol={self.rtol!r}, atol={self.atol!r})"


def checked(case: Case) -> list:
    """What the script compares, in order: each output, then each mutated input."""
    picks = picked_outputs(case)
    return [f"output {i}" + (" (the values its indices pick)" if i in picks else "") for i in range(len(case.outputs))] \
        + [f"input {spec['name']}" for spec in case.inputs if spec.get("mutated")]


def tolerances(case: Case, program, at_defaults: bool = False) -> list:
    """One Tolerance per compared tensor (see `checked`), from eager and float64 runs of
    `program` on the case's inputs: integers exact; the values indices pick at torch.testing's
    defaults; floats at torch.testing's defaults with `at_defaults` (PyTorch asks fuzzer reports
    to keep them), else at its rtol for the dtype and an atol of twice eager's largest finite
    error against float64 (a correct compiled result may err as much as eager does, on the
    other side), never below one subnormal step (where eager is exact, so must compiled be:
    a flushed subnormal is a bug)."""
    eager_inputs = layout.materialize_all(case.to_dict())
    truth_inputs = layout.materialize_all(case.to_dict(), torch.float64)
    eager = list(program(*eager_inputs))
    truth = list(program(*truth_inputs))
    mutated = [k for k, spec in enumerate(case.inputs) if spec.get("mutated")]
    eager += [eager_inputs[k] for k in mutated]
    truth += [truth_inputs[k] for k in mutated]
    picks = picked_outputs(case)
    return [Tolerance(None, None, "the values indices pick: torch.testing's defaults") if k in picks
            else _tolerance(e, t, at_defaults) for k, (e, t) in enumerate(zip(eager, truth))]


def _tolerance(eager: torch.Tensor, truth: torch.Tensor, at_defaults: bool) -> Tolerance:
    name = str(eager.dtype).split(".")[-1]
    if not eager.dtype.is_floating_point:
        return Tolerance(0, 0, f"{name}: exact")
    if at_defaults:
        return Tolerance(None, None, f"{name}: torch.testing's defaults")
    rtol = DEFAULT_RTOL.get(eager.dtype, 1.3e-6)
    error = (eager.double() - truth.double()).abs()
    finite = error[torch.isfinite(error)]
    atol = max(2 * float(finite.max()) if finite.numel() else 0.0, smallest_subnormal(eager.dtype))
    return Tolerance(rtol, _rounded_up(atol), f"{name}: torch.testing's rtol; atol twice eager's largest error "
                                              "against float64, at least one subnormal step")


def smallest_subnormal(dtype: torch.dtype) -> float:
    """The dtype's smallest positive number: the step between subnormals."""
    info = torch.finfo(dtype)
    return info.tiny * info.eps


# -- order and selection ops --------------------------------------------------------------
# PyTorch asks fuzzer reports not to compare the indices max/min-like ops return: two equal (or
# nearly equal) elements may be picked either way. The script compares what the indices pick.
INDEX_OPS = ("argmax", "argmin", "argsort")


def picked_outputs(case: Case) -> dict:
    """{output position: the node} for the outputs an index op returns."""
    producers = {n["id"]: n for n in case.nodes}
    found = {k: producers.get(ref) for k, ref in enumerate(case.outputs)}
    return {k: node for k, node in found.items() if node is not None and node["op"] in INDEX_OPS}


def picker_source(case: Case, k: int, node: dict) -> str:
    """`def picked_<k>(indices, <inputs>)`: the program up to `node` (an index op), then the
    values of its operand that `indices` pick, shaped as `indices` (so that the check can
    print the indices at the elements that differ)."""
    from torchsim_diff.ops import get_op
    params = ", ".join(["indices"] + [spec["name"] for spec in case.inputs])
    lines = [f"def picked_{k}({params}):  # output {k}'s indices compared by the values they pick"]
    for n in case.nodes[:case.nodes.index(node)]:
        lines.append(f"    {n['id']} = {get_op(n['op']).emit(list(n['args']), n.get('attrs', {}))}")
    source, attrs, op = node["args"][0], node.get("attrs", {}), node["op"]
    if op != "argsort" and "dim" not in attrs:
        picked = f"{source}.flatten()[indices]"
    elif op == "argsort" or attrs.get("keepdim"):
        picked = f"{source}.gather({attrs['dim']}, indices)"
    else:
        picked = f"{source}.gather({attrs['dim']}, indices.unsqueeze({attrs['dim']})).squeeze({attrs['dim']})"
    return "\n".join(lines + [f"    return {picked}"]) + "\n"


def pickers_source(case: Case) -> list:
    """The picker of each output an index op returns (picker_source)."""
    return [picker_source(case, k, node) for k, node in picked_outputs(case).items()]


def _rounded_up(x: float) -> float:
    """`x` to 2 significant digits, never below it (a readable number that still covers it)."""
    if x == 0 or not math.isfinite(x):
        return x
    mantissa, exponent = f"{x:.1e}".split("e")
    shown = float(f"{mantissa}e{exponent}")
    return shown if shown >= x else float(f"{float(mantissa) + 0.1:.1f}e{exponent}")


# -- inputs -------------------------------------------------------------------------------
def inputs_source(case: Case, kind: str | None, device: str | None = None) -> tuple:
    """(text of `def inputs(dtype)`, whether it reads inputs.pt); with a `device`, `inputs`
    also takes the device its storages go to (the CPU by default)."""
    where = ', device="cpu"' if device else ""
    lines = [f"def inputs(dtype=torch.{case.dtype}{where}):  # the failing sizes, strides and storage offsets"]
    reads_file = False
    for k, spec in enumerate(case.inputs):
        storage, from_file = _storage_source(case, k, kind)
        reads_file |= from_file
        storage += ".to(device)" if device else ""
        lay = spec["layout"]
        offset = f", {lay['offset']}" if lay["offset"] else ""
        lines.append(f"    {spec['name']} = {storage}.as_strided({tuple(spec['shape'])}, {tuple(lay['strides'])}{offset})")
    lines.append(f"    return [{', '.join(spec['name'] for spec in case.inputs)}]")
    if reads_file:
        lines[1:1] = _load_saved_storages()
    return "\n".join(lines) + "\n", reads_file


def _load_saved_storages() -> list:
    """The lines of `inputs` that read inputs.pt: tensors only (weights_only), since a bundle is
    shared and a pickle that is not plain tensors would run its code; such a file, or none, is
    'cannot run here' (exit 2), never a traceback that would read as the bug reproducing."""
    return ["    try:",
            f'        saved = torch.load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "{INPUTS_FILE}"), '
            "weights_only=True)",
            "    except Exception as exc:",
            f'        sys.exit(print(f"cannot run here: {INPUTS_FILE} is not a file of saved tensors: '
            '{type(exc).__name__}") or 2)']


def _storage_source(case: Case, k: int, kind: str | None) -> tuple:
    spec = case.inputs[k]
    dtype = "dtype" if spec["dtype"] == case.dtype and layout.dtype_of(spec["dtype"]).is_floating_point \
        else f"torch.{spec['dtype']}"
    stored = storage_values(case, k, kind)
    if len(stored) <= INLINE_ELEMENTS:
        return f"torch.tensor({_values_literal(stored)}, dtype={dtype})", False
    if kind == Kind.COMPILE_ERROR.value and layout.dtype_of(spec["dtype"]).is_floating_point:
        return f"torch.randn({len(stored)}, generator=torch.Generator().manual_seed({k})).to({dtype})", False
    return f"saved[{k}].to({dtype})", True


def stored_inputs(case: Case, kind: str | None) -> list:
    """The storages inputs.pt holds (None where the script writes them itself)."""
    out = []
    for k, spec in enumerate(case.inputs):
        _text, from_file = _storage_source(case, k, kind)
        floating = layout.dtype_of(spec["dtype"]).is_floating_point
        out.append(torch.tensor(storage_values(case, k, kind), dtype=torch.float64 if floating else
                                layout.dtype_of(spec["dtype"])) if from_file else None)
    return out


def storage_values(case: Case, k: int, kind: str | None) -> list:
    """Input k's storage as Python numbers: the view's values, with guard values around them
    only for a guard violation (elsewhere 0, and the storage ends where the view does)."""
    spec = case.inputs[k]
    lay = spec["layout"]
    view = layout.materialize(spec, int(case.values.get("seed", 0)), k, bool(case.values.get("special", False)))
    storage = layout.storage_of(view).clone()
    if kind != Kind.GUARD_VIOLATION.value:
        covered = layout.covered_mask(spec["shape"], lay["strides"], lay["offset"], lay["storage_size"])
        storage[~covered] = 0
        storage = storage[: max(lay["offset"] + layout.span(spec["shape"], lay["strides"]), 1)]
    return storage.tolist()


def _values_literal(values: list) -> str:
    return "[" + ", ".join(number(v) for v in values) + "]"


def number(v) -> str:
    """`v` as Python source that reads back bit for bit (-0.0 keeps its sign, NaN and ±Inf spelled)."""
    if isinstance(v, bool):
        return repr(v)
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    if isinstance(v, float) and v.is_integer() and math.copysign(1.0, v) > 0:
        return str(int(v)) + "."
    return repr(v)


# -- the check ----------------------------------------------------------------------------
def run_source(case: Case, kind: str | None, tols: list, compiler: str, device: str | None = None) -> str:
    """The lines after `compiled = ...`: run eager, float64 and compiled; compare. With a
    `device`, the compiled program runs on inputs there, and what it returns and writes is
    compared on the CPU, storages whole (on_host)."""
    on_device = f'inputs(device="{device}")' if device else "inputs()"
    if kind in Kind.values_where("no_values"):
        return "\n".join([
            "try:",
            f"    compiled(*{on_device})",
            f"except Exception as exc:  # {compiler} failing is the bug",
            '    sys.exit(print(f"REPRODUCES: {type(exc).__name__}: {exc}") or 1)',
            'print("FIXED: it compiles and runs")']) + "\n"
    mutated = [k for k, spec in enumerate(case.inputs) if spec.get("mutated")]
    keeps_inputs = bool(mutated) or kind == Kind.GUARD_VIOLATION.value
    lines = (ON_HOST if device else []) + [f"TOLERANCES = [{', '.join(t.literal() for t in tols)}]  # {_reasons(tols)}"]
    if keeps_inputs:
        lines += [f"rx, ex, gx = inputs(torch.float64), inputs(), {on_device}",
                  "reference, eager = program(*rx), program(*ex)"]
    else:
        lines += ["reference, eager = program(*inputs(torch.float64)), program(*inputs())"]
    lines += ["try:",
              f"    got = compiled(*{'gx' if keeps_inputs else on_device})",
              f"except Exception as exc:  # {compiler} failing is the bug",
              '    sys.exit(print(f"REPRODUCES: {type(exc).__name__}: {exc}") or 1)']
    if device:
        lines.append("got" + (", gx = on_host(got), on_host(gx)" if keeps_inputs else " = on_host(got)"))
    if mutated:
        lines.append(f"reference, eager, got = ([*o, *(x[k] for k in {mutated})] for o, x in "
                     "((reference, rx), (eager, ex), (got, gx)))  # and the inputs it writes")
    picks = picked_outputs(case)
    if picks:
        lines += ["reference, eager, got = list(reference), list(eager), list(got)",
                  f"indices = {{k: (eager[k], got[k]) for k in {list(picks)}}}  # eager's and compiled's"]
    lines += [f"reference[{k}], eager[{k}], got[{k}] = (picked_{k}(o[{k}], *inputs(torch.float64)) "
              "for o in (reference, eager, got))" for k in picks]
    lines += [f"for {'k, ' if picks else ''}(what, r, e, g, tol) in "
              f"{'enumerate(' if picks else ''}zip({checked(case)!r}, reference, eager, got, TOLERANCES){')' if picks else ''}:",
              "    try:",
              "        torch.testing.assert_close(g, e, **tol, equal_nan=True)",
              "    except AssertionError as exc:",
              '        print(f"{what}: compiled differs from eager: {exc}")',
              "        if g.shape == e.shape:  # the first elements that differ",
              f"            at = tuple((~torch.isclose(g.double(), e.double(), **tol, equal_nan=True)).nonzero()[:{SHOWN}].T)",
              '            print(*(f"  {n:8} {x[at].tolist()}" for n, x in (("float64", r), ("eager", e), '
              '("compiled", g))), sep="\\n")']
    if picks:
        lines += ["            if k in indices:",
                  '                print(f"  indices: eager {indices[k][0][at].tolist()}, compiled {indices[k][1][at].tolist()}")']
    lines += ['        sys.exit(print("REPRODUCES") or 1)']
    if kind == Kind.GUARD_VIOLATION.value:
        lines += GUARD_CHECK
    lines.append('print("FIXED: compiled agrees with eager")')
    return "\n".join(lines) + "\n"


# Device results come back to the CPU with their whole storage (a view's .cpu() would drop
# what lies outside it, which the guard check reads).
ON_HOST = [
    "def on_host(xs):  # each tensor on the CPU, the same view of a copy of its whole storage",
    "    return [torch.empty(0, dtype=x.dtype).set_(x.untyped_storage().cpu(), x.storage_offset(), x.shape, x.stride())",
    "            for x in xs]",
    "",
    "",
]


def _reasons(tols: list) -> str:
    return "; ".join(dict.fromkeys(t.reason for t in tols))


GUARD_CHECK = [
    "for k, (g, e, fresh) in enumerate(zip(gx, ex, inputs())):  # storage outside what eager wrote",
    "    flat = [x.as_strided((x.untyped_storage().nbytes() // x.element_size(),), (1,), 0) for x in (g, e, fresh)]",
    "    kept = flat[1] == flat[2]",
    "    if not torch.equal(flat[0][kept], flat[2][kept]):",
    '        sys.exit(print(f"REPRODUCES: input {k}: storage changed outside the elements eager wrote") or 1)',
]


# -- where a maintainer runs it --------------------------------------------------------------
def torch_only_python(folder: str) -> str:
    """A fresh venv in `folder` that sees torch (and what is installed beside it: numpy,
    triton, torch-mlir) but not torchsim-diff; its python.

    `venv --without-pip` takes well under a second (pip-installing torch would need the
    network and minutes). One .pth line names the site-packages folder torch lives in, as a
    plain sys.path entry: Python does not process the .pth files inside it, so an editable
    install of torchsim_diff is not importable, and torch keeps its real paths, so Inductor's
    on-disk caches stay valid. --system-site-packages would process those .pth files and
    expose torchsim_diff.
    """
    import subprocess
    import venv

    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(folder)
    python = os.path.join(folder, "bin", "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "torch-only.pth"), "w", encoding="utf-8") as handle:
        handle.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    return python
