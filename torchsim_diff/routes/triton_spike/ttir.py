"""Stage `ttir`: a Triton kernel module + signature + constexprs -> TTIR, by triton's own
compiler front end (CUDA target, TTIR stage only: no GPU and no CUDA toolkit needed).

The route's worker runs Triton's interpreter (TRITON_INTERPRET=1), under which `@triton.jit`
makes interpreter objects that triton's code generator cannot compile, Inductor's helper
libraries included. So TTIR comes from one long-lived child Python started without
TRITON_INTERPRET (`python -m torchsim_diff.routes.triton_spike.ttir`), which reads one JSON
request per line on stdin and answers one JSON line on stdout:

    request  {"source": kernel module text, "kernel": name, "signature": {...}, "constexprs": {...}}
    reply    {"ok": true, "ttir": text} | {"ok": false, "error": "first line of the error"}

Worker-side module: the parent side imports only the standard library; the child imports
triton and Inductor's runtime.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading

# The GPU target TTIR is made for: any CUDA target gives the same TTIR stage; sm_80, warp 32.
CUDA_TARGET = ("cuda", 80, 32)


class TtirError(Exception):
    """The front end rejected the kernel (message: its first line)."""


class TtirServer:
    """The parent side: one child per route object, started on first use, restarted if it dies."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def ttir(self, source: str, kernel: str, signature: dict, constexprs: dict) -> str:
        request = json.dumps({"source": source, "kernel": kernel, "signature": signature,
                              "constexprs": constexprs})
        with self._lock:
            reply = self._ask(request)
        if not reply.get("ok"):
            raise TtirError(reply.get("error", "no error message"))
        return reply["ttir"]

    def start(self) -> None:
        """Start the child now (it imports triton and Inductor's runtime: seconds), so that
        its start overlaps the worker's first compile instead of adding to it."""
        self._start()

    def _ask(self, request: str) -> dict:
        child = self._start()
        try:
            child.stdin.write(request + "\n")
            child.stdin.flush()
            line = child.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            self.close()
            raise TtirError("the TTIR child process exited (see its stderr in the worker log)")
        return json.loads(line)

    def _start(self) -> subprocess.Popen:
        if self._child is None or self._child.poll() is not None:
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
            self._child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, text=True, env=env)
        return self._child

    def close(self) -> None:
        if self._child is not None:
            if self._child.poll() is None:
                self._child.stdin.close()
                try:
                    self._child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._child.kill()
            self._child = None

    def __del__(self):
        self.close()


# ---------------------------------------------------------------------------------------
# The child side
class _Frontend:
    """triton's front end, set up once; kernel modules loaded once per source text."""

    def __init__(self, folder: str):
        import torch._inductor.runtime.triton_helpers  # noqa: F401 - what every kernel module imports
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
        self.folder = folder
        self.target = GPUTarget(*CUDA_TARGET)
        self.backend = make_backend(self.target)
        self.modules: dict = {}

    def ttir(self, source: str, kernel: str, signature: dict, constexprs: dict) -> str:
        from triton._C.libtriton import ir
        from triton.compiler.compiler import ASTSource
        fn = self._kernel(source, kernel)
        src = ASTSource(fn, signature, constexprs)
        options = self.backend.parse_options(dict(src.parse_options()))
        stages: dict = {}
        self.backend.add_stages(stages, options, src.language)
        context = ir.context()
        ir.load_dialects(context)
        self.backend.load_dialects(context)
        module = src.make_ir(self.target, options, self.backend.get_codegen_implementation(options),
                             self.backend.get_module_map(), context)
        return str(stages["ttir"](module, {}))

    def _kernel(self, source: str, kernel: str):
        digest = hashlib.sha256(source.encode()).hexdigest()[:20]
        if digest not in self.modules:
            path = os.path.join(self.folder, f"k{digest}.py")  # a real file: triton reads the source back
            with open(path, "w") as handle:
                handle.write(source)
            spec = importlib.util.spec_from_file_location(f"torchsim_spike_k{digest}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.modules[digest] = module
        found = getattr(self.modules[digest], kernel, None)
        if found is None:
            raise TtirError(f"the kernel module defines no {kernel!r}")
        # Inductor wraps the @triton.jit function in a CachingAutotuner (.fn is the JITFunction)
        return found.fn if hasattr(found, "triton_meta") else found


def error_summary(error: Exception) -> str:
    """'<Type>: <what went wrong>' in one line. A triton CompilationError's text starts with
    'at <line>:<col>:' and the source excerpt; what went wrong is its error_message, or the
    exception it wraps."""
    detail = getattr(error, "error_message", None)
    cause = error.__cause__
    if not detail and cause is not None:
        detail = f"{type(cause).__name__}: {cause}"
    lines = str(detail or error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _serve() -> int:
    import warnings
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="torchsim-ttir-") as folder:
        frontend = _Frontend(folder)
        for line in sys.stdin:
            request = json.loads(line)
            try:
                text = frontend.ttir(request["source"], request["kernel"], request["signature"],
                                     request["constexprs"])
                reply = {"ok": True, "ttir": text}
            except Exception as error:  # noqa: BLE001 - every front-end rejection is a reply
                reply = {"ok": False, "error": error_summary(error)}
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_serve())
