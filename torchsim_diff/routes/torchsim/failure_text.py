"""PyTorchSim's failure texts -> our failure kind, a stage, and the line that decided it.

Rules are tried in order and the first that matches wins (like PyTorchSim's own
sweep classifier, scripts/ci/triton_route_sweep.py, whose bucket names are kept as
labels so a finding can be cross-referenced). Two orderings matter:

* Values first. A kernel that simulated cleanly and then compared wrong is a
  numerics failure, and by then the log is full of `[TOGSim]` INFO lines; matching the
  bare word TOGSim misfiled every such run (their PR #308).
* Simulator faults before compiler words. A Spike fault is reported as
  "[Spike] k failed: tnpu.pipeline.StageError: ...", which also holds a compiler word.

Simulator rules match failures only (exit codes, signals, timeouts), never the INFO
lines a normal run writes.
"""
from __future__ import annotations

import dataclasses
import re

from torchsim_diff.results.kinds import Kind

SPIKE_EXIT_CODES = {200: "INVALID_SPAD_ACCESS", 201: "STACK_OVERFLOW"}
SPIKE_EXIT = re.compile(r"spike exit code (-?\d+)")
VERIFY_BUFFER = re.compile(r"\[FuncVerify\] first divergence at buffer '([^']+)' \(op ([^)]*)\)")
STAGE_NAMED = re.compile(r"\[stage(?P<stage>\d)\]|\[(?P<named>transform|lower|binary)\]")


@dataclasses.dataclass(frozen=True)
class Rule:
    label: str              # PyTorchSim's sweep bucket (or ours where they have none)
    kind: Kind
    stage: str              # "compile" is refined by the stage the kernel reached
    pattern: re.Pattern


def _rule(label, kind, stage, pattern):
    return Rule(label, kind, stage, re.compile(pattern, re.I | re.M))


RULES = (
    # PyTorchSim's own per-buffer check (pytorchsim_functional_verify_per_kernel;
    # Simulator/functional_verify.py): the first buffer Spike got wrong, by name.
    _rule("functional_verify", Kind.WRONG_VALUES, "compare:kernel",
          r"FunctionalVerifyMismatch|\[FuncVerify\] first divergence at buffer"),
    _rule("wrong_values", Kind.WRONG_VALUES, "compare",
          r"VALUES WRONG|allclose|Test Failed|Max abs diff"),
    _rule("timeout", Kind.TIMEOUT, "{tool}",
          r"__timeout__ (?P<tool>\w+)|^__timeout__$|(?P<tool2>TOGSim) subprocess timeout|"
          r"\[(?P<tool3>TOGSim)\] Simulator subprocess exceeded timeout"),
    # The RISC-V link step and binutils (generation A links and objdumps validation_binary
    # before Spike runs): compile failures, never Spike crashes.
    _rule("toolchain", Kind.COMPILE_ERROR, "compile:{tool}",
          r"__exit__ (?P<tool>toolchain) code (?P<code>-?\d+)"),
    _rule("dtype_mismatch", Kind.DTYPE_MISMATCH, "launch",
          r"ShapeMismatch: .* is torch\.\w+, but the binary was compiled for \w+"),
    _rule("dynamic_shape", Kind.SHAPE_MISMATCH, "launch",
          r"ShapeMismatch|dynamic shape|size_hint returned None"),
    _rule("spike_fault", Kind.CRASH, "spike",
          r"\[Spike\] Command failed with exit code (?P<code>-?\d+)|"
          r"INVALID_SPAD_ACCESS|STACK_OVERFLOW|User (load|store) segfault @ 0x[0-9a-f]+|"
          r"\[Spike\] \S+ failed|__exit__ spike code (?P<code2>-?\d+)"),
    _rule("togsim_config", Kind.TOOL_ERROR, "config",
          r"KeyError: 'vpu_num_lanes'|has no vpu_num_lanes"),
    _rule("togsim", Kind.CRASH, "togsim",
          r"\[TOGSim\] Command failed with exit code (?P<code>-?\d+)|__exit__ togsim code (?P<code2>-?\d+)|"
          r"^.*(Error|error|failed|cannot).*trace\.so.*$|SIGSEGV|Signals\.SIG"),
    _rule("gem5", Kind.RUNTIME_ERROR, "gem5",
          r"\[Gem5\] sampling failed|__exit__ gem5 code (?P<code>-?\d+)"),
    # C1: the compiler's marker. C2 retries smaller tiles on that marker and, when none is
    # left, logs "<k>: N bytes/lane over a budget of M, and no smaller tile is left to try"
    # (PyTorchSimCodegen/codecache.py torchsim_compile). A: "Scratchpad size exceeded:
    # required N bytes, but only M bytes available" (PyTorchSimFrontend/extension_codecache.py).
    _rule("spad_overflow", Kind.COMPILE_ERROR, "compile:spad",
          r"torchsim-spad-overflow: usage=(?P<usage>\d+) budget=(?P<budget>\d+)|"
          r"(?P<usage2>\d+) bytes/lane over a budget of (?P<budget2>\d+), and no smaller tile is left|"
          r"Scratchpad size exceeded: required (?P<usage3>\d+) bytes, but only (?P<budget3>\d+) bytes"),
    _rule("register_spill", Kind.COMPILE_ERROR, "compile:registers",
          r"the vector register file spills, and no smaller tile is left"),
    _rule("device_op", Kind.UNSUPPORTED, "device",
          r"(?P<op>\w+_overrideable) not implemented|not implemented\. .*privateuse|"
          r"Could not run '(?P<op2>[\w:.]+)' with arguments from the '(PrivateUse1|npu)' backend"),
    _rule("missing_dep", Kind.TOOL_ERROR, "environment",
          r"ModuleNotFoundError|No module named"),
    _rule("triton_helpers", Kind.UNSUPPORTED, "spec",
          r"name 'triton_helpers' is not defined|^.*(Error|Incomplete|reject|cannot).*triton_helpers.*$"),
    _rule("wrapper_gap", Kind.COMPILE_ERROR, "wrapper",
          r"'\w*WrapperCodegen' object has no attribute '?\w*'?"),
    _rule("spec_incomplete", Kind.COMPILE_ERROR, "spec",
          r"SpecIncomplete|block size \S+ is unset|cannot compute the grid"),
    _rule("compiler_stage", Kind.COMPILE_ERROR, "compile",
          r"TnpuError|CompilerError|StageError|tnpu pipeline failed|the compiler pipeline failed|"
          r"triton-shared-opt|\[stage(?P<stage>\d)\]|\[(?P<named>transform|lower|binary)\]|"
          r"failed to legalize|Dialect `\w+' not found|'linalg\.\w+' op |NotVectorisable|"
          r"cannot convert None of type NoneType|NoValidChoicesError|llvm\.intr\.assume"),
    _rule("reduction", Kind.COMPILE_ERROR, "compile:reduction",
          r"lane-aware|linalg\.reduce|no reduction path"),
    _rule("matmul_timing", Kind.RUNTIME_ERROR, "togsim:trace",
          r"vcix\.iv|sf\.vc\.|no compute node"),
    _rule("mlir_compile", Kind.COMPILE_ERROR, "compile:mlir",
          r"\.(mlir|ll):\d+:\d+: error:|mlir-opt.*(failed|error)|llc: error"),
    _rule("missing_artifact", Kind.RUNTIME_ERROR, "artifacts",
          r"FileNotFoundError"),
    # A compiler process that exited non-zero and said nothing the rules above know: still a
    # compile failure (their own texts, tried first, name the stage better).
    _rule("compiler_exit", Kind.COMPILE_ERROR, "compile:{tool}",
          r"__exit__ (?P<tool>compiler) code (?P<code>-?\d+)"),
    _rule("crash", Kind.CRASH, "{tool}",
          r"__exit__ (?P<tool>\w+) code (?P<code>-?\d+)|Segmentation fault|core dumped|Fatal Python error"),
)


@dataclasses.dataclass(frozen=True)
class Classification:
    kind: Kind
    stage: str
    label: str
    detail: str
    excerpt: str

    def message(self) -> str:
        detail = f" {self.detail}" if self.detail else ""
        return f"[{self.label}]{detail}: {self.excerpt}"


def classify(text: str, *, reached: str | None = None, default_kind: Kind = Kind.RUNTIME_ERROR,
             default_stage: str = "run") -> Classification:
    """Classify a failure from its log text (and the stage its kernel reached, if known).

    `reached` refines compiler failures ("compile:after-ttir"). Text that matches no
    rule gets `default_kind`/`default_stage` and the label "other", with its last line.
    """
    for rule in RULES:
        match = rule.pattern.search(text)
        if match:
            return Classification(rule.kind, _stage(rule, match, reached), rule.label,
                                  _detail(rule, match), _line_of(text, match))
    tail = text.strip().splitlines()[-1] if text.strip() else ""
    return Classification(default_kind, default_stage, "other", "", tail[:500])


def _group(match: re.Match, *names):
    groups = match.groupdict()
    return next((groups[n] for n in names if groups.get(n)), None)


def _stage(rule: Rule, match: re.Match, reached: str | None) -> str:
    if "{tool}" in rule.stage:
        tool = _group(match, "tool", "tool2", "tool3")
        return rule.stage.format(tool=tool.lower()) if tool else "run"
    if rule.stage != "compile":
        return rule.stage
    named = _group(match, "stage", "named")
    if not named:
        where = STAGE_NAMED.search(match.string)
        named = where and (where.group("stage") or where.group("named"))
    if named:
        return f"compile:{'stage' + named if named.isdigit() else named}"
    return f"compile:after-{reached}" if reached else "compile"


def _detail(rule: Rule, match: re.Match) -> str:
    code = _group(match, "code", "code2")
    if code is None and rule.label == "spike_fault":
        # C2's "[Spike] k failed:" comes first; its next line says "spike exit code N"
        # (Simulator/spike_run.py _run).
        found = SPIKE_EXIT.search(match.string, match.start())
        code = found.group(1) if found else None
    if code is not None:
        name = SPIKE_EXIT_CODES.get(int(code), "") if rule.label == "spike_fault" else ""
        return f"exit code {code}" + (f" ({name})" if name else "")
    if rule.label == "spad_overflow":
        return f"usage {_group(match, 'usage', 'usage2', 'usage3')} > budget {_group(match, 'budget', 'budget2', 'budget3')}"
    if rule.label == "functional_verify":
        found = VERIFY_BUFFER.search(match.string)
        return f"buffer {found.group(1)} (op {found.group(2)})" if found else ""
    op = _group(match, "op", "op2")
    return f"op {op}" if op else ""


def _line_of(text: str, match: re.Match) -> str:
    start = text.rfind("\n", 0, match.start()) + 1
    end = text.find("\n", match.end())
    return text[start:end if end >= 0 else len(text)].strip()[:500]
