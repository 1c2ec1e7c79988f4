"""Routes `triton` and `triton-cuda`: Inductor's Triton kernels, run by Triton's interpreter
on CPU, or compiled by Triton for a CUDA GPU.

Both compile the program with `torch.compile(fullgraph=True, dynamic=False)`, with Inductor
generating Triton for every op, matmul-like ones included (Inductor's Triton templates, not
ATen). A case where one of the program's ops still ran outside Triton (extern_kernels or an
ATen fallback in the generated wrapper) tested nothing of Triton for that op, so it is
reported Unsupported with the op named, never passed.

Every launch is captured (torchsim_diff.kernels.capture) into the case's `kernels/`
artifact folder, and the generated wrapper goes to `inductor/wrapper.py`: first during the
compiling run (so a kernel that fails there keeps its capture), then again, replacing it,
during each checked run. Metrics: kernel_launches, t_kernels (seconds inside the launcher,
i.e. the interpreter or the GPU), t_kernels_compile (the same for the compiling run),
triton_kernels (distinct kernels in the wrapper).

Route options (all optional):
    launcher: "module:Class" of the launcher under test (default: Inductor's own launch
        path). Test doubles in tests/doubles/ replace it with deliberately wrong ones.
    capture: false to skip kernel capture (benchmarks of the bare route).
    dynamic, mode, emulate_precision_casts, freezing: compile settings (routes/compile_options.py).

Worker-side module: triton, Inductor and the shims are imported inside methods.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import time

from torchsim_diff.routes import compile_options
from torchsim_diff.routes.base import (
    Compiled,
    ReportFacts,
    Route,
    RouteFailure,
    Unsupported,
)

# Calls in Inductor's generated wrapper that run an op outside Triton.
_FALLBACK_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\s*\(")
# Wrapper helpers that move or allocate memory and compute nothing of the program.
_NOT_A_FALLBACK = re.compile(r"(empty_strided|reinterpret_tensor|as_strided|\.copy_|"
                             r"aten\.set_|aten\.resize|_reinterpret_view|aten\.view)")


def fallback_calls(wrapper_code: str) -> list[str]:
    """Ops the generated wrapper runs outside Triton kernels (extern_kernels, ATen)."""
    body = wrapper_code.split("def call(", 1)[-1].split("def benchmark_compiled_module", 1)[0]
    found = []
    for match in _FALLBACK_CALL.finditer(body):
        name = match.group(1)
        if not _NOT_A_FALLBACK.search(name) and name not in found:
            found.append(name)
    return found


_KERNEL_SOURCE = re.compile(r"async_compile\.triton\(\s*'(\w+)'\s*,\s*'''(.*?)'''", re.S)


def kernel_sources(wrapper_code: str) -> dict:
    """{kernel name: module source} as embedded in Inductor's generated wrapper."""
    return {name: source.lstrip("\n") for name, source in _KERNEL_SOURCE.findall(wrapper_code)}


def copy_with_layout(tensor, device=None):
    """A copy of `tensor`'s whole storage (on `device`) viewed with the same size/stride/offset."""
    import torch
    raw = torch.empty(0, dtype=tensor.dtype, device=tensor.device).set_(tensor.untyped_storage())
    raw = raw.to(device) if device is not None else raw.clone()
    return raw.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def load_launcher(spec):
    """The launcher named "module:Class" (None: Inductor's own; an object with .launch: itself)."""
    from torchsim_diff.kernels.capture import InductorLauncher
    if not spec:
        return InductorLauncher()
    if hasattr(spec, "launch"):
        return spec
    module_name, _, class_name = spec.partition(":")
    if not class_name:
        raise ValueError(f"launcher={spec!r} is not 'module:Class'; e.g. 'tests.doubles.launchers:SwappedGrid'")
    return getattr(importlib.import_module(module_name), class_name)()


class _TritonRouteBase(Route):
    """What both Triton routes share: compile, fallback detection, capture."""

    device: str = "cpu"
    executor: str = ""
    compile_settings = True         # takes routes/compile_options.py's settings
    option_names = ("launcher", "capture", *compile_options.PARSERS)

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        if "capture" in self.options:                      # "false" from the command line is text
            self.options["capture"] = compile_options.boolean("capture")(self.options["capture"])
        launcher = self.options.get("launcher")
        if isinstance(launcher, str) and not re.fullmatch(r"[\w.]+:\w+", launcher):
            raise ValueError(f"launcher={launcher!r} is not 'module:Class'; e.g. 'tests.doubles.launchers:SwappedGrid'")
        chosen = compile_options.settings(self.options)   # a bad value fails here, before any worker starts
        self.cacheable = not chosen["freezing"]             # a frozen program holds its case's values
        self.compiler = compile_options.Compiler(self.options)

    def available(self) -> tuple[bool, str]:
        from torchsim_diff.routes.triton import shims
        if importlib.util.find_spec("triton") is None:
            return False, "triton is not installed (pip install -r requirements.txt)"
        return shims.check_versions()

    def versions(self) -> dict:
        from torchsim_diff.routes.triton import shims
        return dict(shims.installed_versions())

    def _require_available(self):
        ok, reason = self.available()
        if not ok:
            raise RouteFailure("tool_error", "setup", f"route {self.name} unavailable: {reason}")

    def _launcher(self):
        return load_launcher(self.options.get("launcher"))

    def _compile_launcher(self):
        """The launcher of the compiling (first) run: Inductor's own, so that a launcher under
        test cannot break compilation; a route whose launcher is its compiler overrides this."""
        from torchsim_diff.kernels.capture import InductorLauncher
        return InductorLauncher()

    def compile(self, program, example_inputs, ctx) -> Compiled:
        compiled, notes, reused = self.compiler.compile(program, ctx.case, example_inputs)
        ctx.metrics.same_function = reused
        # A reused function (a second size) generates code only when it recompiles.
        wrapper = self._first_run(compiled, example_inputs, ctx) or notes.get("wrapper", "")
        notes["wrapper"] = wrapper
        fallbacks = fallback_calls(wrapper)
        if fallbacks:
            self._ran_outside_triton(fallbacks, ctx)
        ctx.metrics.kernels = len(set(re.findall(r"def (triton_\w+)\(", wrapper)))
        return TritonCompiled(compiled, self, kernel_sources(wrapper))

    def _ran_outside_triton(self, fallbacks: list, ctx) -> None:
        raise Unsupported(f"op ran outside Triton as {', '.join(fallbacks)} "
                          f"(see inductor/wrapper.py); no Triton kernel tested it")

    def _first_run(self, compiled, example_inputs, ctx) -> str:
        """Compile by running once on copies of the inputs; returns the generated wrapper.

        The wrapper is saved (inductor/wrapper.py) and the launches captured (kernels/)
        even when this run fails, so a compile-stage failure keeps its kernels.
        """
        import torch

        from torchsim_diff.kernels.capture import LaunchRecorder
        from torchsim_diff.routes.triton import shims
        inputs = [self._to_device(x) for x in example_inputs]
        codes, timed = [], _TimedLauncher(self._compile_launcher())
        handler = timed.launch
        if self.options.get("capture", True):
            handler = LaunchRecorder(os.path.join(ctx.artifact_dir, "kernels"), launcher=timed, graph_inputs=inputs,
                                     executor=self.executor, sources=_LazySources(codes))
        shims.set_launch_handler(handler)
        try:
            with shims.collect_wrapper_code(codes):
                compiled(*inputs)
        except torch._dynamo.exc.Unsupported as exc:
            raise Unsupported(f"dynamo cannot trace the program: {str(exc).splitlines()[0]}") from None
        except Exception as exc:
            if _no_gemm_choice(exc):
                raise Unsupported("no Triton GEMM template fits this matmul (Inductor's NoValidChoicesError; "
                                  "ATen's GEMM, the only other choice, is not Triton)") from None
            raise
        finally:
            shims.set_launch_handler(lambda launch: launch.execute())
            ctx.metrics.stage_s["kernels_compile"] = timed.seconds
            if codes:
                with open(ctx.artifact("inductor/wrapper.py"), "w") as f:
                    f.write("\n".join(codes))
        return "\n".join(codes)

    def _to_device(self, tensor):
        import torch
        if not isinstance(tensor, torch.Tensor):
            return tensor
        return copy_with_layout(tensor, self.device if self.device != "cpu" else None)


def _no_gemm_choice(exc: BaseException) -> bool:
    """Inductor offered no GEMM template for a matmul's sizes: the route allows Triton templates
    alone (routes/triton/shims.py), so such a case tests nothing of Triton. Templates that were
    offered and all failed to compile raise the same error with another reason: a failure."""
    from torch._inductor.select_algorithm import NoValidChoicesError
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, NoValidChoicesError):
            return "No choices exist for backend" in str(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


class _LazySources(dict):
    """Kernel sources read from wrapper code that is still being collected."""

    def __init__(self, codes: list):
        super().__init__()
        self.codes = codes

    def __contains__(self, name):
        self.update(kernel_sources("\n".join(self.codes)))
        return super().__contains__(name)


class TritonCompiled(Compiled):
    """A compiled program whose runs record every kernel launch."""

    def __init__(self, compiled_fn, route: _TritonRouteBase, sources: dict):
        self.compiled_fn = compiled_fn
        self.route = route
        self.sources = sources
        self.launcher = route._launcher()

    def __call__(self, inputs, ctx):
        from torchsim_diff.routes.triton import shims
        on_host = self.route.device == "cpu"
        device_inputs = list(inputs) if on_host else [self.route._to_device(x) for x in inputs]
        timed = _TimedLauncher(self.launcher)
        shims.set_launch_handler(self._handler(ctx, device_inputs, timed))
        try:
            outputs = self.compiled_fn(*device_inputs)
        finally:
            shims.set_launch_handler(lambda launch: launch.execute())
            ctx.metrics.kernel_launches = timed.count
            ctx.metrics.stage_s["kernels"] = timed.seconds
        return outputs if on_host else self.route._copy_back(inputs, device_inputs, outputs)

    def _handler(self, ctx, graph_inputs, timed):
        from torchsim_diff.kernels.capture import LaunchRecorder
        if not self.route.options.get("capture", True):
            return timed.launch
        return LaunchRecorder(os.path.join(ctx.artifact_dir, "kernels"), launcher=timed,
                              graph_inputs=graph_inputs, executor=self.route.executor,
                              sources=self.sources)


class _TimedLauncher:
    """Wraps the launcher under test and measures the time spent running kernels."""

    def __init__(self, inner):
        self.inner, self.count, self.seconds = inner, 0, 0.0

    def launch(self, launch):
        start = time.perf_counter()
        try:
            self.inner.launch(launch)
        finally:
            self.seconds += time.perf_counter() - start
            self.count += 1


class TritonInterpreterRoute(_TritonRouteBase):
    name = "triton"
    report = ReportFacts(project="pytorch",
                         compiler={"pytorch": "torch.compile (Inductor Triton kernels, TRITON_INTERPRET=1)",
                                   "triton": "Interpreter (TRITON_INTERPRET=1)"},
                         toolchain="triton", torch_compile=True, plainest=1, dists=("triton",),
                         settings=("TRITON_INTERPRET=1",),
                         script=("import triton_shims  # first: TRITON_INTERPRET=1, and Inductor's Triton kernels for "
                                 "CPU tensors", compile_options.TORCH_COMPILE))
    description = "torch.compile, Inductor Triton kernels (templates for matmul) run by Triton's interpreter on CPU"
    boundary = "inputs passed as-is (exact strides, offsets and storages); kernels see them through the interpreter"
    executor = "interpreter"

    @classmethod
    def worker_env(cls, options) -> dict:
        return {"TRITON_INTERPRET": "1"}

    def setup(self) -> None:
        from torchsim_diff.routes.triton import shims
        self._require_available()
        # triton 3.9 and Inductor read TRITON_INTERPRET when a kernel is created, not at import.
        os.environ["TRITON_INTERPRET"] = "1"
        shims.install_interpreter_shims()
        shims.enable_triton_gemm()


class TritonCudaRoute(_TritonRouteBase):
    name = "triton-cuda"
    report = ReportFacts(project="pytorch", compiler={"pytorch": "torch.compile (Inductor Triton, CUDA)"},
                         toolchain="CUDA GPU", script=("", compile_options.TORCH_COMPILE), torch_compile=True,
                         plainest=2)
    description = "torch.compile, the same Inductor Triton kernels compiled by Triton for a CUDA GPU"
    boundary = ("each input's whole storage copied to the GPU and viewed with the same size/stride/offset; "
                "outputs and every input storage copied back")
    device = "cuda"
    executor = "cuda"

    @classmethod
    def worker_env(cls, options) -> dict:
        return {"TRITON_INTERPRET": "0"}

    def available(self) -> tuple[bool, str]:
        ok, reason = super().available()
        if not ok:
            return ok, reason
        import torch
        if torch.version.cuda is None:
            return False, f"torch {torch.__version__} is built without CUDA (install a CUDA build of torch)"
        if not torch.cuda.is_available():
            return False, "no CUDA GPU is visible (torch.cuda.is_available() is False)"
        return True, f"{reason}, GPU {torch.cuda.get_device_name(0)}"

    def setup(self) -> None:
        from torchsim_diff.routes.triton import shims
        self._require_available()
        if os.environ.get("TRITON_INTERPRET") == "1":
            raise RouteFailure("tool_error", "setup", "TRITON_INTERPRET=1 is set; route triton-cuda needs it "
                               "unset (start the worker with TritonCudaRoute.worker_env())")
        shims.enable_triton_gemm()

    def _copy_back(self, inputs, device_inputs, outputs):
        """Outputs to the host; every input storage (mutated or not) back into the caller's."""
        import torch
        for host, dev in zip(inputs, device_inputs):
            if isinstance(host, torch.Tensor):
                host_raw = torch.empty(0, dtype=host.dtype).set_(host.untyped_storage())
                dev_raw = torch.empty(0, dtype=dev.dtype, device=dev.device).set_(dev.untyped_storage())
                host_raw.copy_(dev_raw.cpu())
        return tuple(o.cpu() if isinstance(o, torch.Tensor) else o for o in outputs)
