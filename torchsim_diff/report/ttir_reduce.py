"""A kernel's TTIR reduced at IR level, with triton-adapter-opt as the oracle.

An adapter bug ships the kernel as it reached the adapter, and a kernel Inductor wrote can be
hundreds of lines for a defect of three. The reducer works on the kernel in MLIR's generic form
(the adapter prints it: one syntax for every op, each with its operand and result types, no
source locations) and delta-debugs it with delta (torchsim_diff.delta), in two kinds of step:

- ops: a top-level op of the kernel's body goes, and each use of each of its results is
  rewired, so that the text stays valid IR: to an operand of the op of the same type (removing
  `%2 = tt.addptr %1, %0` leaves `%1`), else to a zero constant of the type (`arith.constant
  dense<0.0> : tensor<4xf32>`), else to the latest value of the same type defined before it;
  a use none of these can replace (a pointer with no other pointer of its type) makes the op
  that holds it go too;
- operands: an operand of a kept op becomes a zero constant of its type, which frees the ops
  that computed it for the next op step.

Steps repeat while one removes something. `still_fails(text)` is the oracle: for a compile
error, the adapter fails the same way (`adapter_failure`: the same first error or assertion
line, names and numbers aside, or the same Triton ops left unconverted); for a wrong value,
report.ttir_value_reduce runs the kernel. The time is bounded: past `budget_s` every further
candidate counts as not failing, so the reduction ends with what it has.

`failing_pass` and `lowering_passes` then name the pass of the list that fails on, or lowers,
the construct that is left.
"""
from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import tempfile
import time

from torchsim_diff.delta import needed_parts

RUN_TIMEOUT_S = 30
MAX_PASSES = 4
BUDGET_S = 120.0        # per kernel: a compile-error candidate takes the adapter well under a second
# Ops every kernel has around its construct: addresses, masks, loads and stores.
SCAFFOLDING = frozenset({"tt.get_program_id", "tt.get_num_programs", "tt.make_range", "tt.splat", "tt.addptr",
                         "tt.load", "tt.store", "tt.broadcast", "tt.expand_dims", "tt.return", "tt.reduce.return",
                         "tt.scan.return", "tt.func"})
SIDE_EFFECTS = ("tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.print", "tt.assert")


def adapter_failure(ttir: str, tool: str, passes: tuple) -> str | None:
    """How triton-adapter-opt fails on `ttir` (a normalised line), None where it converts it."""
    done = run_adapter(ttir, tool, passes)
    if done is None:
        return "timeout"
    if done.returncode:
        why = [line for line in done.stderr.splitlines() if "error:" in line or "Assertion" in line]
        return _normalised(why[0] if why else f"exit {done.returncode}") + _crash_site(done.stderr)
    left = triton_ops(done.stdout)
    return "left unconverted: " + ", ".join(sorted(left)) if left else None


def run_adapter(ttir: str, tool: str, passes: tuple, *options: str):
    """subprocess.CompletedProcess of the adapter on `ttir` (text), None when it timed out."""
    with tempfile.NamedTemporaryFile("w", suffix=".ttir", delete=False) as handle:
        handle.write(ttir)
    try:
        return subprocess.run([tool, handle.name, *passes, *options], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None
    finally:
        os.unlink(handle.name)


def dialect_ops(ir: str, dialect: str) -> set:
    """The ops of `dialect` (`arith`, `math`, `tt`; pretty or generic form) in `ir`."""
    return set(re.findall(rf'^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?"?({dialect}\.\w+)', ir, re.M))


def triton_ops(ir: str) -> set:
    """The Triton ops (`tt.*`) in `ir`, their region terminators aside."""
    return dialect_ops(ir, "tt") - {"tt.reduce.return", "tt.scan.return"}


CRASH_FRAMES = 3


def _crash_site(stderr: str) -> str:
    """Where a crash happened: the first CRASH_FRAMES frames of the adapter's own code below the
    C library's (abort, raise) in its stack dump, as offsets into its binary (the same code path
    gives the same offsets, wherever the binary is loaded). Without this an assertion met
    through another construct (the same `OperandRange::back` of an empty range, say) would pass
    for the same failure and the reduction would slip to it."""
    frames = re.findall(r"^\s*#\d+ 0x[0-9a-f]+ (.*)$", stderr, re.M)
    below = next((k for k, frame in enumerate(frames) if "triton-adapter-opt+" not in frame), None)
    if below is None:
        return ""
    own = [m.group(1) for frame in frames[below:] if (m := re.search(r"triton-adapter-opt\+(0x[0-9a-f]+)", frame))]
    return " at " + ",".join(own[:CRASH_FRAMES]) if own else ""


def _normalised(line: str) -> str:
    line = line.split("error:", 1)[1] if "error:" in line else line
    return re.sub(r"\d+", "N", re.sub(r"%[\w#]+", "%", line)).strip()


def reduce_ttir(ttir: str, tool: str, passes: tuple, budget_s: float = BUDGET_S) -> str:
    """The smallest text found that fails in the adapter as `ttir` does (`ttir` itself when it
    does not fail)."""
    failures = adapter_failures(ttir, tool, passes)
    if not failures:
        return ttir
    return reduce_text(ttir, tool, lambda text: adapter_failure(text, tool, passes) in failures, budget_s)


RUNS = 3


def adapter_failures(ttir: str, tool: str, passes: tuple) -> set:
    """The failures RUNS runs of the adapter on `ttir` show (empty where it converts it): the
    adapter is not deterministic on every kernel (the unresolved materialization of
    xblock1-splat-scalar-mask names one of two types from run to run), and a candidate that
    fails either way fails the same way."""
    seen = {adapter_failure(ttir, tool, passes) for _ in range(RUNS)}
    return set() if None in seen else seen


def reduce_text(ttir: str, tool: str, still_fails, budget_s: float = BUDGET_S) -> str:
    """The smallest kernel found for which `still_fails(text)` holds, in pretty form where that
    form still fails, else in generic form; `ttir` itself when the adapter cannot print it."""
    deadline = time.monotonic() + budget_s
    def bounded(text: str) -> bool:
        return time.monotonic() < deadline and still_fails(text)
    text = generic_form(ttir, tool)
    if text is None or not still_fails(text):
        return ttir
    generic = lambda t: generic_form(t, tool)      # noqa: E731
    try:
        Kernel.parse(text)
    except ValueError:          # not one kernel in generic form: nothing this reducer can take apart
        return ttir
    for _ in range(MAX_PASSES):
        kernel = Kernel.parse(text)
        ops = needed_parts(list(range(len(kernel.ops))), lambda dropped: bounded(kernel.render(dropped)))
        if len(ops) < len(kernel.ops):
            text = generic(kernel.render(set(range(len(kernel.ops))) - set(ops))) or text
            kernel = Kernel.parse(text)
        operands = kernel.zeroable_operands()
        kept = needed_parts(operands, lambda zeroed: bounded(kernel.render((), zeroed)))
        zeroed = [p for p in operands if p not in kept]
        if zeroed:
            text = generic(kernel.render((), zeroed)) or text
        elif len(ops) == len(Kernel.parse(text).ops):
            break
    kernel = Kernel.parse(text)
    dead = kernel.dead()
    if dead:          # constants and the like nothing reads any more
        text = next((t for t in [generic(kernel.render(dead))] if t and still_fails(t)), text)
    pretty = run_adapter(text, tool, ())
    return pretty.stdout if pretty is not None and not pretty.returncode and still_fails(pretty.stdout) else text


def generic_form(ttir: str, tool: str) -> str | None:
    """`ttir` as the adapter prints it in generic form (no locations), None when it cannot read it."""
    done = run_adapter(ttir, tool, (), "--mlir-print-op-generic")
    return done.stdout if done is not None and not done.returncode else None


# --- the kernel in generic form --------------------------------------------------------------

_LOC_SUFFIX = re.compile(r"\s+loc\((?:[^()]|\([^()]*\))*\)$")     # ` loc(#loc3)`, ` loc("x"(#loc))`
_VALUE = re.compile(r"%[\w$.\-]+(?:#\d+)?")
_SCALAR = re.compile(r"(i\d+|f16|bf16|f32|f64|index)$")
_TENSOR = re.compile(r"tensor<((?:\d+x)*)(i\d+|f16|bf16|f32|f64|index)>$")


@dataclasses.dataclass
class Op:
    """One top-level op of the kernel's body: its text (with its regions), what it defines and uses."""

    text: str
    name: str
    results: list           # [(value, type)]
    operands: list          # [(value, type)], its operand list (region bodies aside)
    uses: set               # every value it reads, in its regions too, that it does not define

    @classmethod
    def parse(cls, text: str) -> "Op":
        first, last = text.split("\n", 1)[0], text.rstrip("\n").rsplit("\n", 1)[-1]
        head = re.match(r'\s*(?:(%[\w$.\-]+)(?::(\d+))? = )?"([\w.]+)"\(([^)]*)\)', first)
        if head is None:
            raise ValueError(f"not an op in generic form: {first.strip()[:80]}")
        value, count, name, listed = head.groups()
        inputs, outputs = _signature(last)
        results = [value] if value and not count else [f"{value}#{k}" for k in range(int(count or 0))]
        names = _VALUE.findall(listed)
        defined = set(results) | set(re.findall(r"(%[\w$.\-]+)(?::\d+)? = ", text)) | \
            set(re.findall(r"(%[\w$.\-]+):", text))
        uses = {v for v in _VALUE.findall(text) if v not in defined and v.split("#")[0] not in defined}
        return cls(text, name, list(zip(results, outputs)), list(zip(names, inputs)) if len(names) == len(inputs)
                   else [(n, "") for n in names], uses)


def _signature(line: str) -> tuple:
    """([operand types], [result types]) of a generic op's last line `... : (A, B) -> R`."""
    line = _LOC_SUFFIX.sub("", line.rstrip())
    at = line.rfind(" : (")
    if at < 0:
        return [], []
    text = line[at + 3:].strip()
    inputs, rest = _group(text)
    rest = rest.strip()
    if not rest.startswith("->"):
        return _split(inputs), []
    rest = rest[2:].strip()
    outputs = _split(_group(rest)[0]) if rest.startswith("(") else [rest]
    return _split(inputs), outputs


def _group(text: str) -> tuple:
    """(what the parenthesis at text[0] holds, what follows it)."""
    depth = 0
    for k, char in enumerate(text):
        if text.startswith("->", k - 1) and char == ">":
            continue
        depth += (char in "(<[{") - (char in ")>]}")
        if depth == 0:
            return text[1:k], text[k + 1:]
    return text[1:], ""


def _split(types: str) -> list:
    """Types separated by commas at depth 0."""
    out, depth, start = [], 0, 0
    for k, char in enumerate(types):
        depth += (char in "(<[{") - (char in ")>]}")
        if char == "," and depth == 0:
            out.append(types[start:k].strip())
            start = k + 1
    tail = types[start:].strip()
    return out + [tail] if tail else out


def zero_constant(value_type: str) -> str | None:
    """The attribute of a zero of `value_type` (`0.000000e+00 : f32`, `dense<0> : tensor<4xi32>`),
    None for a type that has no constant (a pointer)."""
    scalar = _SCALAR.match(value_type)
    tensor = _TENSOR.match(value_type)
    element = scalar.group(1) if scalar else tensor.group(2) if tensor else None
    if element is None:
        return None
    zero = "0" if element.startswith("i") or element == "index" else "0.000000e+00"
    if element == "i1":            # `false : i1` does not parse: a bool attribute carries no type
        return "false" if scalar else f"dense<false> : {value_type}"
    return f"{zero} : {value_type}" if scalar else f"dense<{zero}> : {value_type}"


@dataclasses.dataclass
class Kernel:
    """A module with one kernel in generic form: head (up to its entry block's arguments), the
    body's ops, and the tail (from its return)."""

    head: str
    ops: list
    tail: str
    arguments: list          # [(value, type)]

    @classmethod
    def parse(cls, text: str) -> "Kernel":
        lines = text.splitlines(keepends=True)
        start = next((k for k, line in enumerate(lines) if '"tt.func"' in line), None)
        if start is None:
            raise ValueError("no tt.func in the text")
        arguments = []
        if start + 1 < len(lines) and lines[start + 1].lstrip().startswith("^bb0("):
            start += 1
            arguments = [(v, _LOC_SUFFIX.sub("", t)) for v, t in
                         (a.split(": ", 1) for a in _split(_group(lines[start].strip()[4:].rstrip(":"))[0]))]
        ops, k = [], start + 1
        while k < len(lines) and not lines[k].lstrip().startswith(('"tt.return"', "})")):
            depth, block = 0, ""
            while k < len(lines):
                block += lines[k]
                depth += _balance(lines[k])
                k += 1
                if depth <= 0:
                    break
            ops.append(Op.parse(block))
        return cls("".join(lines[:start + 1]), ops, "".join(lines[k:]), arguments)

    def dead(self, removed=frozenset()) -> set:
        """The ops, beyond `removed`, whose results nothing left reads and which write no memory."""
        dead: set = set()
        while True:
            left = [(k, op) for k, op in enumerate(self.ops) if k not in removed and k not in dead]
            read = {u for _, op in left for u in op.uses}
            more = {k for k, op in left if op.results and not any(v in read for v, _ in op.results)
                    and not any(f'"{name}"' in op.text for name in SIDE_EFFECTS)}
            if not more:
                return dead
            dead |= more

    def zeroable_operands(self) -> list:
        """(op index, operand position) of each operand a zero constant could stand for, but
        those a constant already gives."""
        constants = {v for op in self.ops if op.name == "arith.constant" for v, _ in op.results}
        return [(k, p) for k, op in enumerate(self.ops) if op.name not in ("arith.constant",)
                for p, (value, value_type) in enumerate(op.operands)
                if value not in constants and zero_constant(value_type)]

    def render(self, dropped=(), zeroed=()) -> str:
        """The text without the ops of `dropped` (their results' uses rewired, see the module's
        docstring) and with the operands of `zeroed` ((op, position) pairs) made zero constants."""
        removed = set(dropped)
        while True:
            constants: dict = {}
            def constant(value_type: str) -> str | None:
                if zero_constant(value_type) is None:
                    return None
                return constants.setdefault(value_type, f"%zero{len(constants)}")
            replaced, latest = {}, {t: v for v, t in self.arguments}
            cascade = set()
            for k, op in enumerate(self.ops):
                if k in removed:
                    for value, value_type in op.results:
                        bypass = [replaced.get(v, v) for v, t in op.operands if t == value_type]
                        bypass = [v for v in bypass if v is not None]
                        replaced[value] = (bypass[0] if bypass else constant(value_type)
                                           or latest.get(value_type))
                    continue
                if any(u in replaced and replaced[u] is None for u in op.uses):
                    cascade.add(k)
                    continue
                for value, value_type in op.results:
                    latest[value_type] = value
            if not cascade:
                break
            removed |= cascade
        zero_at = {}
        for k, p in zeroed:
            if k not in removed:
                zero_at.setdefault(k, set()).add(p)
        body = []
        for k, op in enumerate(self.ops):
            if k in removed:
                continue
            text = op.text
            if k in zero_at:
                values = [constant(t) if p in zero_at[k] else v for p, (v, t) in enumerate(op.operands)]
                text = re.sub(r'^(\s*(?:%[\w$.\-]+(?::\d+)? = )?"[\w.]+"\()[^)]*\)',
                              lambda m: m.group(1) + ", ".join(values) + ")", text, count=1)
            body.append(_VALUE.sub(lambda m: replaced.get(m.group(0)) or m.group(0), text)
                        if replaced else text)
        indent = re.match(r"\s*", self.ops[0].text).group(0) if self.ops else "    "
        used = set(_VALUE.findall("".join(body)))
        made = [f'{indent}{name} = "arith.constant"() <{{value = {zero_constant(t)}}}> : () -> {t}\n'
                for t, name in constants.items() if name in used]
        return self.head + "".join(made) + "".join(body) + self.tail


def _balance(line: str) -> int:
    """Braces opened minus closed on a line, outside quoted text."""
    unquoted = re.sub(r'"[^"]*"', "", line)
    return unquoted.count("{") - unquoted.count("}")


# --- which pass -------------------------------------------------------------------------------

def failing_pass(ttir: str, tool: str, passes: tuple, failure: str) -> int | None:
    """The index in `passes` of the first pass after which the adapter fails on `ttir` with
    `failure` (adapter_failure's line); the last pass for Triton ops left unconverted."""
    if failure.startswith("left unconverted"):
        return len(passes) - 1
    for k in range(len(passes)):
        if adapter_failure(ttir, tool, passes[:k + 1]) == failure:
            return k
    return None


def lowering_passes(ttir: str, tool: str, passes: tuple) -> dict:
    """{Triton op of `ttir`: index of the pass after which it is gone}, for the ops the list lowers."""
    left, lowered = triton_ops(ttir), {}
    for k in range(len(passes)):
        done = run_adapter(ttir, tool, passes[:k + 1])
        if done is None or done.returncode:
            break
        now = triton_ops(done.stdout)
        for name in sorted(left - now):
            lowered[name] = k
        left &= now
        if not left:
            break
    return lowered


def construct(ops, arithmetic=()) -> list:
    """The Triton ops of a reduced kernel, those beyond addresses, masks, loads and stores first.
    Where none is beyond them, the bug is in what the addresses compute (a stride-2 load at offset
    -1): the kernel's `arithmetic` ops (its `arith` dialect_ops) lead, not its tt.addptr."""
    ops = sorted(set(ops) - {"tt.func", "tt.return"})
    lead = [o for o in ops if o not in SCAFFOLDING] or sorted(set(arithmetic) - {"arith.constant"})
    return lead + [o for o in ops if o in SCAFFOLDING]
