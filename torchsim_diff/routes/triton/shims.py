"""Every patch of torch/triton internals that the `triton` routes need, in one place.

The `triton` route runs Inductor's own Triton kernels for CPU tensors under Triton's
interpreter. Stock torch/triton do not allow that; the shims below close the gaps. Each
one names the internal it touches and why, so that a version bump shows which ones to
re-check. `check_versions()` refuses versions the shims were not verified against: the
route then reports itself unavailable with that reason instead of running half-patched.

Shims (installed by `install_interpreter_shims()`, idempotent; 1-2 touch Inductor's config):
  1. backend hash: Inductor puts `triton_hash_with_backend()` into every kernel's
     inductor_meta; it asks the active driver for its target and fails with "0 active
     drivers" on a machine without a GPU. Replaced by a constant hash.
  2. Inductor config `cpu_backend = "triton"`: CPU tensors get Triton kernels, which
     Inductor already launches through the interpreter when TRITON_INTERPRET=1.
  3. libdevice: the interpreter has no libdevice (stubs return None); bound to numpy.
  4. masks: `block_mask & (int32_scalar < C)` yields int32 mask data in the interpreter
     ("mask has unsupported dtype" in the mm/bmm templates); coerced to bool.
  5. device_assert honoured (Inductor's indirect-index bound checks), no overflow checks.
  6. speed: nested @jit helpers re-run `_patch_lang` (an inspect walk over
     triton.language) on every call; skipped when the running kernel already patched.
  7. speed: `tl.reduce` with a custom combine_fn runs element by element in the
     interpreter; reduced as a tree of vectorised combine_fn calls instead.
  9. bf16 dot: the interpreter keeps bfloat16 data as uint16 bit patterns and its
     `create_dot` multiplies those integers (only 8-bit floats are converted), so every
     bf16 `tl.dot` (Inductor's mm template) returned garbage; operands are widened to
     float32 first (exact for bf16, the precision a GPU multiplies them in).
  8. GEMM templates: `max_autotune_gemm` with the TRITON backend and a preprocessing
     filter that keeps the first Triton choice (no benchmarking in the interpreter).
Launch hook (`set_launch_handler`): wraps `CachingAutotuner.run`, Inductor's kernel launch
boundary, so that torchsim_diff.kernels.capture sees every launch and decides how it runs.
Wrapper code (`collect_wrapper_code`): Inductor's `GraphLowering.save_output_code` hook, as
run_and_get_code uses it, but without resetting Dynamo and keeping the code when the first
run fails.

Worker-side module: triton and Inductor internals are imported inside functions only.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os

# What each shim changes, in a bug report's words (a bundle names those its bug needs).
EFFECTS = {
    "_patch_backend_hash": "Inductor's `triton_hash_with_backend()` returns a constant (it asks for a GPU "
                           "driver otherwise) and `torch._inductor.config.cpu_backend = \"triton\"`, so CPU "
                           "tensors get Inductor's Triton kernels",
    "_silence_no_backend_warning": "silences Inductor's warning that CPU Triton kernels will not be executable",
    "_patch_libdevice": "libdevice functions, which the interpreter leaves as stubs, computed by numpy",
    "_patch_mask_dtype": "an int32 load/store mask (`block_mask & (i32 < C)`) coerced to bool in the interpreter",
    "_patch_interpreter_options": "the interpreter honours `tl.device_assert` (Inductor's index bound checks)",
    "_patch_lang_once_per_kernel": "nested @triton.jit helpers do not re-patch triton.language on every call "
                                   "(speed only)",
    "_patch_tree_reduce": "`tl.reduce` with a custom combine_fn runs as a tree of vectorised calls in the "
                          "interpreter (a GPU's order), not element by element",
    "_patch_bf16_dot": "bfloat16 `tl.dot` operands widened to float32 in the interpreter (it multiplied their "
                       "uint16 bit patterns)",
    "enable_triton_gemm": "`max_autotune_gemm` with the TRITON backend, the first template choice taken without "
                          "benchmarking",
}

# Versions these shims were written and checked against ("major.minor" prefixes).
SUPPORTED_VERSIONS = {"torch": ("2.13",), "triton": ("3.9",)}


class _State:
    """Which shims are in place in this process."""

    def __init__(self):
        self.interpreter_shims = False
        self.inductor_shims = False
        self.gemm_templates = False
        self.launch_handler = None
        self.original_run = None


_STATE = _State()


def installed_versions() -> dict:
    """{"torch": version, "triton": version or None} without importing triton's runtime."""
    from importlib import metadata

    import torch
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = None
    return {"torch": torch.__version__.split("+")[0], "triton": triton_version}


# Set to 1 to run on versions the shims were not checked against (at your own risk).
UNCHECKED_ENV = "TORCHSIM_DIFF_TRITON_UNCHECKED"


def check_versions() -> tuple[bool, str]:
    """(True, versions) when torch/triton are ones the shims were checked against."""
    versions = installed_versions()
    if os.environ.get(UNCHECKED_ENV) == "1" and versions.get("triton"):
        return True, f"torch {versions['torch']}, triton {versions['triton']} (unchecked: {UNCHECKED_ENV}=1)"
    for package, prefixes in SUPPORTED_VERSIONS.items():
        found = versions.get(package)
        if found is None:
            return False, f"{package} is not installed (pip install -r requirements.txt)"
        if not any(found == p or found.startswith(p + ".") for p in prefixes):
            return False, (f"{package}=={found} is not supported by torchsim_diff.routes.triton.shims "
                           f"(checked against {package} {', '.join(prefixes)}.x); re-verify the shims "
                           f"and add the version to SUPPORTED_VERSIONS (or set {UNCHECKED_ENV}=1 to try anyway)")
    return True, f"torch {versions['torch']}, triton {versions['triton']}"


def install_interpreter_shims(*, inductor: bool = True) -> None:
    """Install shims 3-7 and 9 (the interpreter's), and with `inductor` also 1-2.

    inductor=False leaves Inductor's configuration alone: enough to replay captured kernels
    in a process that must keep compiling for CPU with Inductor's C++ backend.
    """
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("TRITON_INTERPRET=1 must be set before the interpreter shims are installed "
                           "(TritonInterpreterRoute.worker_env / setup set it)")
    if inductor and not _STATE.inductor_shims:
        _patch_backend_hash()
        _STATE.inductor_shims = True
    if _STATE.interpreter_shims:
        return
    _silence_no_backend_warning()
    _patch_libdevice()
    _patch_mask_dtype()
    _patch_interpreter_options()
    _patch_lang_once_per_kernel()
    _patch_tree_reduce()
    _patch_bf16_dot()
    _STATE.interpreter_shims = True


def shims_installed() -> bool:
    return _STATE.interpreter_shims


def _patch_backend_hash():
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton
    digest = hashlib.sha256(b"torchsim-diff-triton-interpreter").hexdigest().upper()
    torch_triton.triton_hash_with_backend = lambda: digest
    inductor_config.cpu_backend = "triton"


def _silence_no_backend_warning():
    import warnings
    # triton_helpers warns that CPU kernels "will not be executable"; the interpreter runs them.
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")
    # numpy's overflow/invalid warnings from interpreted kernels: non-finite values are data here.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")


def _numpy_elementwise(npfn, out_dtype=None):
    """A libdevice function computed by numpy on the interpreter's tensor data."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    def unwrap(a):
        return a.value if isinstance(a, tl.constexpr) else a

    def elementwise(*args, _semantic=None, **_):
        args = [unwrap(a) for a in args]
        tensors = [a for a in args if isinstance(a, tl.tensor)]
        ref = next((t for t in tensors if t.dtype.scalar.is_floating()), tensors[0])
        dtype = out_dtype or ref.dtype.scalar
        with np.errstate(all="ignore"):
            res = npfn(*[a.handle.data if isinstance(a, tl.tensor) else np.asarray(a) for a in args])
        res = np.asarray(res).astype(_get_np_dtype(dtype), copy=False)
        is_block = any(t.type.is_block() for t in tensors)
        ty = tl.block_type(dtype, list(res.shape)) if is_block else dtype
        return tl.tensor(TensorHandle(res, dtype), ty)
    return elementwise


def _libdevice_table():
    import numpy as np
    import torch

    def vectorised(fn):
        return np.vectorize(fn, otypes=[np.float64])

    def erfinv(x):
        return torch.special.erfinv(torch.from_numpy(np.ascontiguousarray(x))).numpy()

    return dict(
        exp=np.exp, exp2=np.exp2, expm1=np.expm1, log=np.log, log2=np.log2, log10=np.log10,
        log1p=np.log1p, sqrt=np.sqrt, rsqrt=lambda x: 1 / np.sqrt(x), abs=np.abs, sin=np.sin,
        cos=np.cos, tan=np.tan, asin=np.arcsin, acos=np.arccos, atan=np.arctan, sinh=np.sinh,
        cosh=np.cosh, tanh=np.tanh, asinh=np.arcsinh, acosh=np.arccosh, atanh=np.arctanh,
        atan2=np.arctan2, pow=np.power, hypot=np.hypot, fmod=np.fmod, copysign=np.copysign,
        nextafter=np.nextafter, ldexp=lambda x, e: np.ldexp(x, np.asarray(e, np.int32)),
        floor=np.floor, ceil=np.ceil, trunc=np.trunc, nearbyint=np.rint, rint=np.rint,
        fma=lambda a, b, c: a * b + c, cbrt=np.cbrt, fast_tanhf=np.tanh, fast_expf=np.exp,
        fast_logf=np.log, fast_powf=np.power, erf=vectorised(math.erf), erfc=vectorised(math.erfc),
        lgamma=vectorised(math.lgamma), tgamma=vectorised(math.gamma), erfinv=erfinv,
    )


def _patch_libdevice():
    import numpy as np
    import triton.language as tl
    import triton.language.extra.libdevice as libdevice
    for name, fn in _libdevice_table().items():
        setattr(libdevice, name, _numpy_elementwise(fn))
    predicates = dict(isnan=np.isnan, isinf=np.isinf, signbit=np.signbit,
                      finitef=np.isfinite, isfinited=np.isfinite)
    for name, fn in predicates.items():
        setattr(libdevice, name, _numpy_elementwise(fn, tl.int1))
    libdevice.llrint = _numpy_elementwise(np.rint, tl.int64)


def _patch_mask_dtype():
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle

    def as_bool(mask):
        if mask.data.dtype == np.bool_:
            return mask
        return TensorHandle(mask.data.astype(np.bool_), tl.int1)

    builder = interpreter.InterpreterBuilder
    masked_load, masked_store = builder.create_masked_load, builder.create_masked_store
    builder.create_masked_load = lambda self, ptr, mask, *a: masked_load(self, ptr, as_bool(mask), *a)
    builder.create_masked_store = lambda self, ptr, val, mask, *a: masked_store(self, ptr, val, as_bool(mask), *a)


def _patch_interpreter_options():
    from triton.runtime import interpreter
    interpreter.interpreter_builder.options = dataclasses.replace(
        interpreter.interpreter_builder.options, debug=True, sanitize_overflow=False)


class _LangPatchScope:
    """The kernel-level language patch, which nested helper calls join instead of redoing."""

    def __init__(self, scope, stack):
        self.scopes, self.stack = [scope], stack

    def restore(self):
        self.stack.pop()
        for scope in reversed(self.scopes):
            scope.restore()


class _NoRestore:
    def restore(self):
        pass


def _patch_lang_once_per_kernel():
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter
    original_patch, grid_call = interpreter._patch_lang, interpreter.GridExecutor.__call__
    active, entering = [], [False]

    def patch_lang(fn):
        langs = {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}
        if entering[0]:
            entering[0] = False
            scope = _LangPatchScope(original_patch(fn), active)
            active.append([langs, scope])
            return scope
        if not active:
            return original_patch(fn)
        done, scope = active[-1]
        if not langs <= done:
            scope.scopes.append(original_patch(fn))
            done |= langs
        return _NoRestore()

    def grid_call_marked(self, *args, **kwargs):
        entering[0] = True
        try:
            return grid_call(self, *args, **kwargs)
        finally:
            entering[0] = False

    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = grid_call_marked


def _tree_reduce(self, input):
    """ReduceOps.generic_reduce as log2(n) vectorised combine_fn calls (a GPU's tree shape)."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    orig_axis = self.axis
    input, axis = self.unravel(input, self.axis)
    shape = input[0].handle.data.shape
    datas, dtypes = [t.handle.data for t in input], [t.dtype for t in input]

    def wrap(d, dt):
        return tl.tensor(TensorHandle(np.ascontiguousarray(d), dt.scalar), tl.block_type(dt.scalar, list(d.shape)))

    def take(d, a, b):
        return np.take(d, np.arange(a, b), axis=axis)

    n = shape[axis]
    while n > 1:
        h = n // 2
        lhs = [wrap(take(d, 0, h), dt) for d, dt in zip(datas, dtypes)]
        rhs = [wrap(take(d, h, 2 * h), dt) for d, dt in zip(datas, dtypes)]
        ret = self.combine_fn.fn(*lhs, *rhs)
        ret = ret if isinstance(ret, tuple) else (ret,)
        merged = []
        for j, r in enumerate(ret):
            r = r.handle.data if isinstance(r, tl.tensor) else np.asarray(r)
            r = np.broadcast_to(r, lhs[j].handle.data.shape).astype(datas[j].dtype, copy=False)
            merged.append(np.concatenate([r, take(datas[j], 2 * h, n)], axis=axis) if n % 2 else r)
        datas, n = merged, h + n % 2
    out = []
    for d, dt in zip(datas, dtypes):
        if self.keep_dims:
            d = d.reshape((1,) * len(shape)) if orig_axis is None else d
        else:
            d = np.squeeze(d, axis=axis)
            d = d.item() if orig_axis is None else d
        out.append(self.to_tensor(d, dt))
    return out


def _patch_tree_reduce():
    from triton.runtime import interpreter
    interpreter.ReduceOps.generic_reduce = _tree_reduce


def _patch_bf16_dot():
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle
    builder = interpreter.InterpreterBuilder
    create_dot = builder.create_dot

    def widen(handle):
        if handle.dtype != tl.bfloat16:
            return handle
        bits = handle.data.astype(np.uint32) << np.uint32(16)
        return TensorHandle(bits.view(np.float32), tl.float32)

    def create_dot_bf16(self, a, b, d, input_precision, max_num_imprecise_acc):
        return create_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)
    builder.create_dot = create_dot_bf16


@contextlib.contextmanager
def collect_wrapper_code(codes: list):
    """Append the wrapper module Inductor generates for each graph compiled in the block."""
    from torch._inductor.graph import GraphLowering
    original = GraphLowering.save_output_code
    GraphLowering.save_output_code = codes.append
    try:
        yield codes
    finally:
        GraphLowering.save_output_code = original


# Inductor settings that send mm/bmm/addmm/conv to its Triton templates (repro.py writes them
# too); max_autotune stays off, as it would also autotune pointwise kernels and epilogues.
TRITON_GEMM_SETTINGS = {"max_autotune_gemm": True, "max_autotune_gemm_backends": "TRITON", "max_autotune": False}


def enable_triton_gemm() -> None:
    """Shim 8: mm/bmm/addmm/conv through Inductor's Triton templates, first choice only."""
    if _STATE.gemm_templates:
        return
    import torch._inductor.config as inductor_config
    import torch._inductor.select_algorithm as select_algorithm
    for name, value in TRITON_GEMM_SETTINGS.items():
        setattr(inductor_config, name, value)
    select_algorithm.add_preprocessing_fn(
        lambda choices: [c for c in choices if "triton" in c.name][:1] or choices)
    _STATE.gemm_templates = True


# ---------------------------------------------------------------------------------------
# Launch hook
@dataclasses.dataclass
class KernelLaunch:
    """One kernel launch as Inductor asks for it.

    args: positional kernel arguments without constexprs (tensors and scalars);
    grid: (gx, gy, gz), program_id(0) first; constexprs: block sizes from the config.
    `execute()` runs it the way Inductor would; on CUDA the grid and config are only known
    after the first run (autotuning), so `describe()` fills them in then.
    """

    kernel_name: str
    jit_fn: object
    source_path: str | None
    arg_names: list
    args: list
    signature: dict
    interpreted: bool
    grid: tuple = ()
    constexprs: dict = dataclasses.field(default_factory=dict)
    launch_options: dict = dataclasses.field(default_factory=dict)
    extra_kwargs: dict = dataclasses.field(default_factory=dict)
    _autotuner: object = None
    _run_inductor: object = None

    def execute(self) -> None:
        """Run the launch the way Inductor itself would."""
        if self.interpreted:
            run_interpreted(self)
        else:
            self._run_inductor()
            self.describe()

    def describe(self) -> None:
        """Fill grid, constexprs and launch options from the autotuner's chosen config."""
        autotuner = self._autotuner
        config = autotuner.configs[0] if self.interpreted else autotuner.launchers[0].config
        call_args, grid = autotuner._interpret_args_grid(tuple(self.args), config)
        names = [n for n in self.signature if n not in config.kwargs]
        self.args, self.arg_names = list(call_args), names[:len(call_args)]
        self.grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        self.constexprs = dict(config.kwargs)
        self.launch_options = {"num_warps": config.num_warps, "num_stages": config.num_stages}


def kernel_source_path(jit_fn) -> str | None:
    """File of the Inductor-generated module that defines the kernel."""
    import inspect
    try:
        return inspect.getsourcefile(getattr(jit_fn, "fn", jit_fn))
    except (TypeError, OSError):
        return None


def run_interpreted(launch: KernelLaunch, *, grid=None, args=None) -> None:
    """Run the kernel in the interpreter, the way CachingAutotuner.run does in interpret mode."""
    grid = tuple(launch.grid if grid is None else grid)
    args = launch.args if args is None else args
    launch.jit_fn[grid](*args, **launch.extra_kwargs, **launch.constexprs)


def _new_launch(autotuner, args, kwargs, run_inductor) -> KernelLaunch:
    interpreted = bool(getattr(autotuner, "triton_interpret", False))
    launch = KernelLaunch(
        kernel_name=autotuner.fn.__name__, jit_fn=autotuner.fn,
        source_path=kernel_source_path(autotuner.fn), arg_names=[], args=list(args),
        signature=dict(autotuner.triton_meta.get("signature", {})), interpreted=interpreted,
        extra_kwargs=dict(kwargs), _autotuner=autotuner, _run_inductor=run_inductor)
    if interpreted:
        launch.describe()
    return launch


def set_launch_handler(handler) -> None:
    """Route every Inductor kernel launch through `handler(launch: KernelLaunch)`.

    The handler must run the launch (`launch.execute()` or its own variant). None
    restores Inductor's own launch path. Benchmark runs (autotuning) are not handed over.
    """
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    if _STATE.original_run is None:
        _STATE.original_run = CachingAutotuner.run
        original = _STATE.original_run

        def run(self, *args, stream=None, benchmark_run=False, **kwargs):
            handler_now = _STATE.launch_handler
            if handler_now is None or benchmark_run:
                return original(self, *args, stream=stream, benchmark_run=benchmark_run, **kwargs)

            def run_inductor():
                return original(self, *args, stream=stream, **kwargs)
            return handler_now(_new_launch(self, args, kwargs, run_inductor))

        CachingAutotuner.run = run
    _STATE.launch_handler = handler
