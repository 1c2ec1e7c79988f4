"""Routes `torchsim-mlir` and `torchsim-triton`: PyTorchSim's two compiler routes.

torch.compile(dynamic=False) on PyTorchSim's npu device, functional simulation on
(outputs come back from Spike), timing optional (TOGSim cycles become
ctx.metrics.cost). The worker runs under PyTorchSim's own interpreter
(TORCHSIM_PYTHON), with TORCHSIM_DIR the checkout and a machine config (route option
`config`, else TOGSIM_CONFIG, else the generation's default). Setup and the meaning of
every option: docs/pytorchsim.md.

Route options: config (machine config: JSON for generation A, YAML after), timing
(default off; env TORCHSIM_DIFF_TIMING), spike_timeout_s, gem5_timeout_s,
togsim_timeout_s, compiler_timeout_s, toolchain_timeout_s (seconds per process, capped
below PyTorchSim's own; defaults in torchsim_diff.routes.torchsim.subprocess_limits), verify
(trace/stop/off: PyTorchSim's per-buffer check where the checkout has it; default trace),
verify_rtol, verify_atol, spike_jobs (Spike processes per launch; default CPUs / workers).

Per compiled program: a fresh dump path and Inductor cache (kernel workdirs are keyed
on source text alone), a time limit per simulator, the whole log captured into the
case's artifacts, failures classified from PyTorchSim's own texts
(torchsim_diff.routes.torchsim.failure_text) with the kernel workdirs copied beside them, and ops
the wrapper kept on extern_kernels / torch.ops reported as Unsupported: they ran
eagerly, nothing simulated them.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import traceback
import weakref

import torchsim_diff
from torchsim_diff.results.kinds import Kind
from torchsim_diff.routes.base import (
    Compiled,
    Route,
    RouteFailure,
    Unsupported,
)
from torchsim_diff.routes.torchsim import (
    artifacts,
    failure_text,
    config,
    generation,
    log_capture,
    probe,
    subprocess_limits,
    workdir,
)

PACKAGE_PARENT = os.path.dirname(os.path.dirname(torchsim_diff.__file__))
LIMIT_OPTIONS = {"spike": "spike_timeout_s", "gem5": "gem5_timeout_s", "togsim": "togsim_timeout_s",
                 "compiler": "compiler_timeout_s", "toolchain": "toolchain_timeout_s"}
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
# Modules whose `launch(obj_dir, manifest, runtime, ...)` runs Spike in-process (C2,
# later C1): wrapped so each launch's inputs and outputs are kept.
SPIKE_LAUNCH_MODULES = ("Simulator.spike_run", "PyTorchSimFrontend.triton_backend.spike_run")


class TorchSimRoute(Route):
    """Common driver; subclasses name the route and the generations they accept."""

    python_env = "TORCHSIM_PYTHON"
    boundary = ("whole guarded storages copied to npu:0 and viewed there with the case's exact "
                "strides and offsets; storages copied back after the run")
    generations: tuple = ()
    facts: dict | None = None       # versions(), once per worker, for every record
    option_names = ("config", "timing", *LIMIT_OPTIONS.values(), "verify", "verify_rtol", "verify_atol",
                    "spike_jobs")

    @classmethod
    def check_options(cls, options: dict) -> None:
        """Unknown keys, and values the worker would only trip over once started."""
        super().check_options(options)
        for key, value in options.items():
            if key in LIMIT_OPTIONS.values():
                _checked_number(key, value, positive=True)
            elif key in ("verify_rtol", "verify_atol") and value not in (None, ""):
                _checked_number(key, value, positive=False)
            elif key == "spike_jobs" and not (str(value).isascii() and str(value).isdigit() and int(value) >= 1):
                raise ValueError(f"spike_jobs={value!r} is not a positive count of processes (e.g. spike_jobs=4)")
            elif key == "timing" and str(value).lower() not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(f"timing={value!r} is not a boolean; use timing=1 or timing=0")
            elif key == "verify":
                config.verify_variables(str(value))      # ConfigError (a ValueError) names the modes

    # -- fuzzer side --------------------------------------------------------------------
    @classmethod
    def worker_env(cls, options):
        torchsim_dir = os.environ.get("TORCHSIM_DIR", "")
        path = [PACKAGE_PARENT, torchsim_dir, os.environ.get("PYTHONPATH", "")]
        env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
        try:
            found = generation.detect(cls.name, torchsim_dir).name
        except generation.UnknownGeneration:
            return env
        # Read by torch_openreg at import: C1 keeps the Triton route behind this switch.
        env["TORCHSIM_TRITON_CODEGEN"] = "1" if found == "C1" and cls.name == generation.TRITON_ROUTE else "0"
        env["TORCHSIM_SPIKE_JOBS"] = str(options.get("spike_jobs") or os.environ.get("TORCHSIM_SPIKE_JOBS")
                                         or config.spike_jobs(_worker_count()))
        if generation.has_per_kernel_verify(torchsim_dir):
            env.update(config.verify_variables(
                str(options.get("verify", "trace")), _number(options.get("verify_rtol")),
                _number(options.get("verify_atol"))))
        return env

    def available(self):
        python = os.environ.get(self.python_env, "")
        torchsim_dir = os.environ.get("TORCHSIM_DIR", "")
        if not python:
            return False, (f"{self.python_env} is not set: point it at the python of a PyTorchSim "
                           f"environment (docs/pytorchsim.md)")
        if not torchsim_dir:
            return False, "TORCHSIM_DIR is not set: point it at the PyTorchSim checkout"
        try:
            found = generation.detect(self.name, torchsim_dir)
            config.base_config_path(torchsim_dir, found.name, self.options.get("config"))
            config.verify_variables(str(self.options.get("verify", "trace")))
            seen = probe.probe(python, torchsim_dir, probe.REQUIRED_MODULES[found.name])
        except (generation.UnknownGeneration, config.ConfigError, probe.ProbeFailed) as exc:
            return False, str(exc)
        if found.name not in self.generations:
            return False, f"generation {found.name} has no {self.name} route"
        missing = probe.missing_modules(seen, found.name)
        if missing:
            return False, (f"{python} cannot import {', '.join(missing)} (generation {found.name}, "
                           f"{found.evidence}); install PyTorchSim into that environment")
        return True, f"PyTorchSim {found.name} ({found.evidence}), torch {seen.get('torch', '?')}"

    # -- worker side --------------------------------------------------------------------
    def setup(self):
        from torchsim_diff.routes.torchsim import device
        self.torchsim_dir = os.environ["TORCHSIM_DIR"]
        self.generation = generation.detect(self.name, self.torchsim_dir)
        timing = self.options.get("timing", os.environ.get("TORCHSIM_DIFF_TIMING", "0"))
        self.timing = str(timing).lower() in TRUE_WORDS
        self.limits = {tool: float(self.options[key]) for tool, key in LIMIT_OPTIONS.items()
                       if key in self.options}
        self.work_root = tempfile.mkdtemp(prefix=f"{self.name}-")
        base = config.base_config_path(self.torchsim_dir, self.generation.name, self.options.get("config"))
        self.verify = (str(self.options.get("verify", "trace")) != "off"
                       and generation.has_per_kernel_verify(self.torchsim_dir))
        self.machine_config = config.write_machine_config(
            base, os.path.join(self.work_root, "machine"), timing=self.timing,
            generation=self.generation.name, verify=self.verify)
        os.environ["TOGSIM_CONFIG"] = self.machine_config   # before PyTorchSim reads it
        self.device = device.open_device(self.generation.name, self.torchsim_dir)
        self.refused = device.wrong_backend(self.name)
        if self.name == generation.TRITON_ROUTE:
            device.wrap_module_functions(SPIKE_LAUNCH_MODULES, "launch", workdir.wrap_launch)

    def compile(self, program, example_inputs, ctx):
        if self.refused:
            raise RouteFailure(Kind.TOOL_ERROR, "setup", self.refused)
        environment = config.CaseEnvironment(
            root=tempfile.mkdtemp(dir=self.work_root), torchsim_dir=self.torchsim_dir,
            machine_config=self.machine_config, timing=self.timing)
        return TorchSimProgram(self, program, environment)

    def versions(self):
        """What this route drives, readable without setup() (bundles ask a fresh route):
        generation, checkout and compiler commits, machine config and its format, the
        thirdparty/*.json toolchain pins, PyTorchSim's torch."""
        torchsim_dir = os.environ.get("TORCHSIM_DIR", "")
        found = generation.detect(self.name, torchsim_dir)
        facts = {"pytorchsim": found.name,
                 "pytorchsim_revision": generation.checkout_revision(torchsim_dir),
                 "config_format": config.config_format(found.name),
                 "per_kernel_verify": generation.has_per_kernel_verify(torchsim_dir)}
        compiler = generation.compiler_dir(found.name, torchsim_dir)
        if compiler:
            facts["compiler_revision"] = generation.checkout_revision(compiler) or f"unknown ({compiler})"
        try:
            facts["machine_config"] = os.path.basename(config.base_config_path(
                torchsim_dir, found.name, self.options.get("config")))
        except config.ConfigError as exc:
            facts["machine_config"] = f"unusable: {exc}"
        facts.update({f"pin_{k}": v for k, v in generation.thirdparty_pins(torchsim_dir).items()})
        facts["torch"] = self._torch_version(torchsim_dir, found.name)
        facts["timing"] = getattr(self, "timing", None)
        return facts

    def _torch_version(self, torchsim_dir: str, name: str) -> str:
        python = os.environ.get(self.python_env, "")
        try:
            return probe.probe(python, torchsim_dir, probe.REQUIRED_MODULES[name]).get("torch", "?")
        except probe.ProbeFailed:
            return "?"


class TorchSimMlirRoute(TorchSimRoute):
    name = generation.MLIR_ROUTE
    description = "PyTorchSim MLIR route on npu (Spike values, optional TOGSim cycles)"
    generations = ("A", "B")


class TorchSimTritonRoute(TorchSimRoute):
    name = generation.TRITON_ROUTE
    description = "PyTorchSim Triton route on npu (Spike values, optional TOGSim cycles)"
    generations = ("C1", "C2")


class TorchSimProgram(Compiled):
    """One program on the npu device. torch.compile is lazy, so the first call compiles
    (inside the captured log, where PyTorchSim's compile errors are written)."""

    def __init__(self, route: TorchSimRoute, program, environment: config.CaseEnvironment):
        self.route, self.program, self.environment = route, program, environment
        self.compiled = None
        self.not_simulated: list | None = None
        weakref.finalize(self, shutil.rmtree, environment.root, True)

    def __call__(self, inputs, ctx):
        self.environment.apply()
        workdir.clear_snapshots(self.environment.dump_path)   # earlier runs' Spike files
        logs_before = set(artifacts.togsim_logs("", self.environment.log_path))
        log_path = ctx.artifact("torchsim.log")
        error, outputs = None, None
        with log_capture.captured_output(log_path), \
                subprocess_limits.limited_subprocesses(self.route.limits, around=_snapshot_spike_runs):
            try:
                outputs = self._run(inputs)
            except Exception as exc:  # noqa: BLE001 - PyTorchSim's failure, classified below
                error = exc
        text = log_capture.read_text(log_path)
        copied = self._keep_artifacts(text, ctx)
        self._record_versions(ctx)
        self._record_verify_trace(text, ctx)
        if error is not None:
            raise self._failure(error, text, copied) from None
        self._check_coverage(text, ctx)
        self._record_cycles(text, ctx, logs_before)
        return outputs

    def _run(self, inputs):
        import torch

        from torchsim_diff.routes.torchsim import device
        if self.compiled is None:
            _fresh_compiler_state()
            self.compiled = torch.compile(self.program, dynamic=False, fullgraph=True)
        on_device = [device.to_device(x, self.route.device) for x in inputs]
        results = self.compiled(*[d.view for d in on_device])
        results = (results,) if isinstance(results, torch.Tensor) else tuple(results or ())
        outputs = tuple(r.cpu() for r in results)
        for item in on_device:
            device.write_back(item)
        if self.route.timing:
            device.wait_for_timing()
        return outputs

    def _failure(self, error: Exception, text: str, copied: list) -> RouteFailure:
        if _is_graph_break(error):
            return Unsupported(f"dynamo cannot trace the program: {str(error).splitlines()[0]}")
        reached = artifacts.last_stage(self.environment.dump_path)
        full_text = text + "\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__))
        early = reached in (None, "codegen", "spec", "ttir", "ttshared", "adapted", "custom",
                            "mlir", "llvm-dialect", "llvm-ir", "object")
        verdict = failure_text.classify(
            full_text, reached=reached,
            default_kind=Kind.COMPILE_ERROR if early else Kind.RUNTIME_ERROR,
            default_stage="compile" if early else "run")
        message = (f"{verdict.message()}\nkernel reached: {reached or 'no kernel written'}\n"
                   f"{type(error).__name__}: {str(error)[:2000]}")
        if verdict.kind == Kind.UNSUPPORTED:
            return Unsupported(message, stage=verdict.stage)
        return RouteFailure(verdict.kind, verdict.stage, message,
                            artifacts={rel: rel for rel in ["torchsim.log", *copied]})

    def _keep_artifacts(self, text: str, ctx) -> list:
        """Copy the kernel workdirs, wrapper and TOGSim logs into the case's artifacts, for
        a route failure and for the oracle's verdict (which comes after the route returns;
        the harness drops the folder of a passing case). The Triton route also writes a
        kernel capture in `kernels/`, so a wrong value is localised to its kernel by
        replaying each launch in Triton's interpreter. Returns the copied paths."""
        env = self.environment
        copied = artifacts.collect(dump_path=env.dump_path, inductor_cache=env.inductor_cache,
                                   log_dir=env.log_path, log_text=text, dest=ctx.artifact_dir)
        if self.route.name == generation.TRITON_ROUTE:
            try:
                workdir.convert_dump(env.dump_path, os.path.join(ctx.artifact_dir, "kernels"),
                                     generation=self.route.generation.name)
            except (workdir.WorkdirError, OSError, KeyError, ValueError) as exc:
                with open(ctx.artifact("kernels-not-captured.txt"), "w") as f:
                    f.write(f"PyTorchSim workdirs could not be converted to a kernel capture: {exc}\n")
        return copied

    def _record_versions(self, ctx) -> None:
        """Route versions plus what built this case's kernels (C2 provenance.json's compiler
        commit, kernel.json's format), into the record's metrics."""
        if self.route.facts is None:
            try:
                self.route.facts = self.route.versions()
            except Exception as exc:  # noqa: BLE001 - versions are reported, never fatal
                self.route.facts = {"error": f"{type(exc).__name__}: {exc}"}
        ctx.metrics.versions = dict(self.route.facts, **artifacts.build_identity(self.environment.dump_path))

    def _record_verify_trace(self, text: str, ctx) -> None:
        """PyTorchSim's per-buffer trace: the first buffer over tolerance names the kernel
        where a wrong value starts (the MLIR route has no other per-kernel localisation)."""
        found = artifacts.traced_divergence(text, rtol=_number(self.route.options.get("verify_rtol")) or 1e-4,
                                            atol=_number(self.route.options.get("verify_atol")) or 1e-4)
        if found:
            ctx.metrics.divergent_kernel = found

    def _check_coverage(self, text: str, ctx) -> None:
        env = self.environment
        if self.not_simulated is None:
            self.not_simulated = []
            for path in artifacts.wrapper_paths(text, env.inductor_cache):
                with open(path, errors="replace") as f:
                    self.not_simulated += artifacts.extern_ops(f.read())
        if self.not_simulated:
            ops = ", ".join(sorted(set(self.not_simulated)))
            raise Unsupported(f"not simulated: the wrapper ran {ops} itself (extern_kernels/torch.ops), "
                              f"so no kernel of PyTorchSim computed it", stage="wrapper")

    def _record_cycles(self, text: str, ctx, logs_before: set) -> None:
        """Cycles of this run only: TOGSim logs it pointed at or wrote (earlier runs of the
        same program left theirs in the same folder)."""
        if not self.route.timing:
            return
        logs = [p for p in artifacts.togsim_logs(text, self.environment.log_path)
                if p not in logs_before or p in artifacts.TOGSIM_LOG_LINE.findall(text)]
        cycles = artifacts.total_cycles(logs)
        ctx.metrics.cost = cycles
        ctx.metrics.cost_unit = "TOGSim cycles"


def _fresh_compiler_state() -> None:
    """Forget compiled graphs and loaded wrapper modules of earlier cases: a wrapper
    reused from memory would call kernels bound to another case's dump path."""
    import torch
    torch._dynamo.reset()
    try:
        from torch._inductor.codecache import PyCodeCache
        PyCodeCache.cache_clear()
    except (ImportError, AttributeError):
        pass


def _is_graph_break(error: Exception) -> bool:
    """Dynamo refusing the program (before PyTorchSim sees it) is coverage, not a finding."""
    import torch
    unsupported = getattr(getattr(torch, "_dynamo", None), "exc", None)
    return unsupported is not None and isinstance(error, unsupported.Unsupported)


def _snapshot_spike_runs(tool: str, args, phase: str) -> None:
    """Keep each Spike run's inputs and outputs: Spike writes over its input files, and
    the kernel-level reference (torchsim.workdir) needs both."""
    if tool == "spike":
        workdir.snapshot_spike_run(args, phase)


def _worker_count() -> int:
    """Workers sharing this machine: pytest-xdist's count, else one."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


def _number(value):
    return None if value in (None, "") else float(value)


def _checked_number(key: str, value, *, positive: bool) -> float:
    """A route option's number: finite, and above 0 (positive) or at least 0."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={value!r} is not a number") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(f"{key}={value!r} must be a finite number {'above' if positive else 'of at least'} 0")
    return number
