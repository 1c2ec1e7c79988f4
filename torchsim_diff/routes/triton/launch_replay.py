"""Kernel replay: run one captured launch standalone and diff it against its captured outputs.

The replay seeds every buffer with its captured "before" bytes, runs the kernel from its
captured source with the captured grid, block sizes and argument views, and compares every
buffer's bytes with the captured "after" bytes. On the executor that made the capture the
comparison is exact (bit for bit, NaN payloads included); across executors (a capture from
CUDA or PyTorchSim replayed in the interpreter) it uses torch.testing's default tolerances
per dtype, since libdevice and reduction order legitimately differ.

    report = replay_artifact("artifacts/case-17/kernels", executor="interpreter")
    print(report.summary()); report.ok

Executors: "interpreter" (Triton's interpreter on CPU, with the route's shims) and "cuda".
A process holds one of them (the interpreter shims replace libdevice, and a CUDA process
has TRITON_INTERPRET=0), so a replay that does not fit the current process runs in a
child Python (`python -m torchsim_diff.routes.triton.launch_replay`).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import torch

import torchsim_diff
from torchsim_diff import bytecode
from torchsim_diff.judge.comparison import TOLERANCES
from torchsim_diff.kernels.capture import CapturedLaunch, launch_folders, torch_dtype

EXECUTORS = ("interpreter", "cuda")
# The judge's one tolerance table (torch.testing's defaults), for comparisons across executors.
CROSS_EXECUTOR_TOLERANCE = TOLERANCES


@dataclasses.dataclass
class BufferDiff:
    """How one buffer's replayed bytes compare with the captured ones."""

    buffer: str
    dtype: str
    mismatched: int
    total: int
    max_abs_diff: float | None = None
    first_index: int | None = None

    @property
    def ok(self) -> bool:
        return self.mismatched == 0

    def describe(self) -> str:
        if self.ok:
            return f"{self.buffer} ({self.dtype}, {self.total} elements): identical"
        pct = 100.0 * self.mismatched / max(self.total, 1)
        biggest = ("only at non-finite values" if self.max_abs_diff is None
                   else f"greatest absolute difference {self.max_abs_diff}")
        return (f"{self.buffer} ({self.dtype}): mismatched elements {self.mismatched} / {self.total} "
                f"({pct:.1f}%), {biggest} (first at storage index {self.first_index})")


@dataclasses.dataclass
class LaunchReport:
    """Replay of one launch: `ok` when every buffer matches its captured "after"."""

    folder: str
    kernel_name: str
    executor: str
    exact: bool
    buffers: list = dataclasses.field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(b.ok for b in self.buffers)

    def summary(self) -> str:
        mode = "bit for bit" if self.exact else "within cross-executor tolerance"
        head = f"{os.path.basename(self.folder)} [{self.kernel_name}] on {self.executor}: "
        if self.error:
            return head + f"ERROR {self.error}"
        if self.ok:
            return head + f"reproduces its captured outputs {mode}"
        return head + "DIVERGES\n" + "\n".join("    " + b.describe() for b in self.buffers if not b.ok)

    def to_dict(self) -> dict:
        return {"folder": self.folder, "kernel_name": self.kernel_name, "executor": self.executor,
                "exact": self.exact, "error": self.error, "buffers": [dataclasses.asdict(b) for b in self.buffers]}

    @classmethod
    def from_dict(cls, data: dict) -> "LaunchReport":
        buffers = [BufferDiff(**b) for b in data.pop("buffers")]
        return cls(buffers=buffers, **data)


@dataclasses.dataclass
class ReplayReport:
    """Replays of every launch under a path; `ok` when all of them reproduce."""

    launches: list

    @property
    def ok(self) -> bool:
        return bool(self.launches) and all(r.ok for r in self.launches)

    def summary(self) -> str:
        if not self.launches:
            return "no captured launches to replay"
        good = sum(r.ok for r in self.launches)
        lines = [r.summary() for r in self.launches]
        return "\n".join(lines + [f"{good} / {len(self.launches)} launches reproduce"])


def check_executor(executor: str) -> None:
    if executor not in EXECUTORS:
        raise ValueError(f"executor={executor!r} is not one of {EXECUTORS}")


def replay_artifact(path: str, *, executor: str = "interpreter", in_child: bool = False) -> ReplayReport:
    """Replay every captured launch under `path` (launch folder, capture folder or case folder).

    in_child: replay in a child Python even when this process could do it (keeps the
    interpreter shims out of a process that has other work, e.g. the fuzzer's own).
    """
    check_executor(executor)
    folders = launch_folders(path)
    launches = [CapturedLaunch(f) for f in folders]     # every launch.json checked before any kernel runs
    if in_child or not _fits_this_process(executor):
        return ReplayReport([LaunchReport.from_dict(d) for d in _replay_in_child(folders, executor)])
    return ReplayReport([replay_launch(launch, executor=executor) for launch in launches])


def replay_launch(launch: CapturedLaunch, *, executor: str = "interpreter") -> LaunchReport:
    """Replay one launch in this process and compare with its captured "after" bytes."""
    check_executor(executor)
    exact = launch.meta.get("executor") == executor or executor in launch.meta.get("bit_exact_with", ())
    report = LaunchReport(launch.folder, launch.kernel_name, executor, exact)
    try:
        replayed = run_launch(launch, executor=executor)
    except Exception as exc:  # noqa: BLE001 - a kernel that fails to run is a replay result
        report.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return report
    for buf, meta in launch.meta["buffers"].items():
        captured = launch.buffer_bytes(buf, "after")
        if captured is not None:
            report.buffers.append(compare_bytes(buf, meta["dtype"], replayed[buf], captured, exact=exact))
    return report


def run_launch(launch: CapturedLaunch, *, executor: str = "interpreter", storages: dict | None = None) -> dict:
    """Run the captured kernel on `storages` (default: its "before" bytes); {buffer: bytes after}."""
    device = "cuda" if executor == "cuda" else "cpu"
    _prepare_executor(executor)
    storages = launch.storages("before", device) if storages is None else storages
    jit_fn = load_kernel(launch.source_path, launch.kernel_name)
    options = launch.meta.get("launch_options", {}) if executor == "cuda" else {}
    grid = tuple(launch.meta["grid"])
    jit_fn[grid](*launch.call_args(storages), **launch.meta["constexprs"],
                 **{k: v for k, v in options.items() if v is not None})
    return {buf: raw.cpu().numpy().tobytes() for buf, raw in storages.items()}


def load_kernel(source_path: str, kernel_name: str):
    """The @triton.jit function `kernel_name` defined by the module at `source_path`."""
    module_name = f"torchsim_diff_replay_{abs(hash((source_path, os.path.getmtime(source_path))))}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, source_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[module_name] = module
    kernel = getattr(module, kernel_name, None)
    if kernel is None:
        raise ValueError(f"{source_path} defines no kernel named {kernel_name!r}")
    # Inductor wraps the @triton.jit function in a CachingAutotuner; replay bypasses it.
    return kernel.fn if hasattr(kernel, "triton_meta") else kernel


def compare_bytes(buf: str, dtype_name: str, replayed: bytes, captured: bytes, *, exact: bool) -> BufferDiff:
    dtype = torch_dtype(dtype_name)
    if len(replayed) != len(captured):
        return BufferDiff(buf, dtype_name, max(len(replayed), len(captured)), len(captured))
    item = torch.empty((), dtype=dtype).element_size()
    usable = len(captured) - len(captured) % item
    a = torch.frombuffer(bytearray(replayed[:usable]), dtype=dtype)
    b = torch.frombuffer(bytearray(captured[:usable]), dtype=dtype)
    if exact or not dtype.is_floating_point:
        differs = a.view(torch.uint8).reshape(-1, item).ne(b.view(torch.uint8).reshape(-1, item)).any(1)
    else:
        rtol, atol = CROSS_EXECUTOR_TOLERANCE.get(dtype, (0.0, 0.0))
        differs = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    mismatched = int(differs.sum())
    if mismatched == 0:
        return BufferDiff(buf, dtype_name, 0, a.numel())
    where = differs.nonzero().flatten()
    diff = (a.double() - b.double()).abs()[differs]
    finite = diff[torch.isfinite(diff)]
    max_abs = float(finite.max()) if finite.numel() else None
    return BufferDiff(buf, dtype_name, mismatched, a.numel(), max_abs, int(where[0]))


# ---------------------------------------------------------------------------------------
# Executor state of this process
def _fits_this_process(executor: str) -> bool:
    from torchsim_diff.routes.triton import shims
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if executor == "interpreter":
        # triton reads TRITON_INTERPRET per kernel; only a process set up for CUDA says "0".
        return os.environ.get("TRITON_INTERPRET") != "0"
    return not interpreting and not shims.shims_installed()


def _prepare_executor(executor: str) -> None:
    from torchsim_diff.routes.triton import shims
    if not _fits_this_process(executor):
        raise RuntimeError(f"this process cannot run executor={executor!r} (TRITON_INTERPRET="
                           f"{os.environ.get('TRITON_INTERPRET')!r}); use replay_artifact, which starts a child")
    if executor == "interpreter":
        os.environ["TRITON_INTERPRET"] = "1"
        shims.install_interpreter_shims(inductor=False)
    elif not torch.cuda.is_available():
        raise RuntimeError("executor='cuda' needs a CUDA GPU and a CUDA build of torch; none is available here")


def executor_env(executor: str) -> dict:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "1" if executor == "interpreter" else "0"
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(torchsim_diff.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    bytecode.redirect(env)
    return env


def _replay_in_child(folders: list, executor: str) -> list:
    cmd = [sys.executable, "-m", "torchsim_diff.routes.triton.launch_replay", "--executor", executor, "--json", *folders]
    done = subprocess.run(cmd, capture_output=True, text=True, env=executor_env(executor))
    if done.returncode not in (0, 1):
        raise RuntimeError(f"replay child failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    import argparse
    parser = argparse.ArgumentParser(prog="python -m torchsim_diff.routes.triton.launch_replay",
                                     description="Replay captured Triton kernel launches.")
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--executor", choices=EXECUTORS, default="interpreter")
    parser.add_argument("--json", action="store_true", help="print launch reports as one JSON line")
    parser.add_argument("--outputs-to", metavar="DIR",
                        help="write each buffer's bytes after the replay to DIR/<buffer>.bin (one launch)")
    args = parser.parse_args(argv)
    if args.executor == "interpreter":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    if args.outputs_to:
        return _write_outputs(args.paths, args.executor, args.outputs_to)
    reports = [replay_launch(CapturedLaunch(f), executor=args.executor)
               for p in args.paths for f in launch_folders(p)]
    if args.json:
        print(json.dumps([r.to_dict() for r in reports]))
    else:
        print(ReplayReport(reports).summary())
    return 0 if all(r.ok for r in reports) else 1


def _write_outputs(paths: list, executor: str, to_dir: str) -> int:
    folders = [f for p in paths for f in launch_folders(p)]
    if len(folders) != 1:
        print(f"--outputs-to takes one launch; {len(folders)} found", file=sys.stderr)
        return 2
    os.makedirs(to_dir, exist_ok=True)
    for buf, data in run_launch(CapturedLaunch(folders[0]), executor=executor).items():
        with open(os.path.join(to_dir, f"{buf}.bin"), "wb") as handle:
            handle.write(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
