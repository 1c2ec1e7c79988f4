"""Route `triton-spike`: Inductor's Triton kernels compiled to RISC-V and run on Spike.

Inductor compiles the graph as on the `triton` route (same shims, same Triton kernels, same
wrapper); every kernel launch goes to our SpikeLauncher (launcher.py), which compiles the
kernel through TTIR -> triton-adapter-opt -> mlir-opt-19 -> mlir-translate-19 -> clang-19
(cached per specialisation) and runs it on Spike. The checked run reuses Spike's answer of
the compiling run for a launch on the same bytes (launcher.py), so such a launch runs on Spike once. Launches are
captured (kernels/) with the bytes Spike produced, so a failing case names the first kernel
whose interpreter replay disagrees; kernels without reductions, dots or transcendental math
must agree bit for bit (`bit_exact_with` in launch.json).

Route options (all optional): isa ("rv64gcv_zfh_zfbfmin"), vlen (128..1024), max_instructions (Spike's
budget per launch; exhausting it is a `timeout`), timeout_s (wall clock per Spike run), as on
`spike`; launcher ("module:Class", a SpikeLauncher subclass: test doubles), capture (false
skips kernel capture).

Metrics: cost (instructions retired by all launches of the checked run, grid walk only),
instret_per_launch, vlen, and t_<stage> seconds for ttir, adapter, mlir_opt, translate, clang,
link and spike (the compiling run's in t_compile's share, the checked run's in t_run's).
"""
from __future__ import annotations

import dataclasses
import importlib
import tempfile

from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.base import ReportFacts, RouteFailure, Unsupported
from torchsim_diff.routes.spike.spike import SpikeOptions
from torchsim_diff.routes.triton.triton import TritonCompiled, TritonInterpreterRoute
from torchsim_diff.routes.triton_spike import toolchain
from torchsim_diff.routes.triton_spike.launcher import SpikeLauncher, note_host_part

LAUNCHER_OPTIONS = ("launcher", "capture")
# Half-float conversions in hardware: Inductor's float32 kernels round through fp16/bf16 for
# explicit casts, and the bare-metal libgcc has no soft __extendhfsf2/__truncsfbf2.
DEFAULT_ISA = "rv64gcv_zfh_zfbfmin"


class TritonSpikeRoute(TritonInterpreterRoute):
    name = "triton-spike"
    report = ReportFacts(project="triton-adapter", plainest=5,
                         compiler={"pytorch": "torch.compile (Inductor Triton kernels through triton-adapter-opt)",
                                   "llvm": "mlir-opt (a Triton kernel's linalg lowered to LLVM)",
                                   "triton-adapter": "triton-adapter-opt (Triton to linalg)"})
    description = ("Inductor's Triton kernels -> TTIR (triton, CUDA target) -> triton-adapter-opt -> linalg -> "
                   f"mlir-opt-19 -> clang-19 {DEFAULT_ISA} (default isa) -> Spike, launched by our own grid-walking "
                   "launcher; cost = instructions retired")
    boundary = ("inputs passed as-is; each launch sends every storage it touches whole to Spike "
                "(descriptor = storage + offset, exact strides) and copies it back whole")
    executor = SpikeLauncher.executor
    option_names = (*(f.name for f in dataclasses.fields(SpikeOptions)), *LAUNCHER_OPTIONS)

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        chain = {"isa": DEFAULT_ISA, **{k: v for k, v in self.options.items() if k not in LAUNCHER_OPTIONS}}
        self.spike_options = SpikeOptions.from_mapping(chain)
        self.spike_launcher: SpikeLauncher | None = None

    def available(self) -> tuple[bool, str]:
        ok, versions = super().available()
        if not ok:
            return ok, versions
        try:
            tools = toolchain.Tools.locate()
        except LookupError as missing:
            return False, str(missing)
        return True, (f"{versions}; {toolchain.ADAPTER_NAME} from {toolchain.adapter_version(tools.adapter)}; "
                      f"isa={self.spike_options.spike_isa}")

    def versions(self) -> dict:
        found = super().versions()
        path = toolchain.adapter_path()
        found["triton_adapter_opt"] = toolchain.adapter_version(path) if path else None
        return found

    def setup(self) -> None:
        super().setup()
        try:
            tools = toolchain.Tools.locate()
        except LookupError as missing:
            raise RouteFailure(Kind.TOOL_ERROR, "setup", str(missing)) from None
        self._scratch = tempfile.TemporaryDirectory(prefix="torchsim-triton-spike-")
        self.spike_launcher = self._make_launcher().configure(tools, self.spike_options, self._scratch.name)
        self.spike_launcher.ttir_server.start()

    def close(self) -> None:
        if self.spike_launcher is not None:
            self.spike_launcher.close()
        if getattr(self, "_scratch", None) is not None:
            self._scratch.cleanup()
        super().close()

    def _make_launcher(self) -> SpikeLauncher:
        spec = self.options.get("launcher")
        if not spec:
            return SpikeLauncher()
        if isinstance(spec, SpikeLauncher):
            return spec
        module_name, _, class_name = str(spec).partition(":")
        launcher = getattr(importlib.import_module(module_name), class_name or "?", None)
        if launcher is None or not issubclass(launcher, SpikeLauncher):
            raise ValueError(f"launcher={spec!r} is not 'module:Class' of a SpikeLauncher subclass; "
                             f"e.g. 'doubles.spike_launchers:ReversedGrid'")
        return launcher()

    def _ran_outside_triton(self, fallbacks: list, ctx) -> None:
        """The ops Inductor leaves to ATen run on the host, as the other kernels still run on
        Spike; the case can then fail but never pass (check.py)."""
        note_host_part(ctx, f"op ran outside Triton as {', '.join(fallbacks)}")

    def _launcher(self):
        return self.spike_launcher

    def _compile_launcher(self):
        return self.spike_launcher

    def compile(self, program, example_inputs, ctx):
        if self.spike_launcher is None:
            self.setup()
        self.spike_launcher.begin(ctx)
        self.spike_launcher.new_case()
        compiled = super().compile(program, example_inputs, ctx)
        host_parts = ctx.metrics.host_parts
        if host_parts and not self.spike_launcher.spike_launches:
            raise Unsupported(f"nothing ran on Spike: {'; '.join(host_parts)}")
        ctx.metrics.cost, ctx.metrics.cost_per_launch = None, []  # the compiling run's launches are not the case's cost
        return SpikeCompiled(compiled.compiled_fn, self, compiled.sources)


class SpikeCompiled(TritonCompiled):
    """Each checked run's artifacts and metrics go to that run's context."""

    def __call__(self, inputs, ctx):
        self.launcher.begin(ctx)
        return super().__call__(inputs, ctx)
