"""Kernel capture: every Triton kernel launch of a case, with its buffers before and after.

Format (schema 1). A capture is a folder, by default `<case artifacts>/kernels/`:

    kernels/
      index.json                  {"format": "torchsim-diff.kernel-capture", "schema": 1,
                                   "executor": "interpreter" | "cuda" | ...,
                                   "launches": ["000_triton_poi_fused_add_0", ...]}  (launch order)
      000_triton_poi_fused_add_0/
        kernel.py                 the kernel module exactly as Inductor generated it
        launch.json               see below
        buffers/buf0.before.bin   raw little-endian bytes of the whole storage before the launch
        buffers/buf0.after.bin    ... and after it (absent when unknown)

launch.json:

    {"format": "torchsim-diff.kernel-launch", "schema": 1,
     "kernel_name": "triton_poi_fused_add_0",   # a function defined in kernel.py
     "source": "kernel.py",
     "executor": "interpreter",                 # what produced the "after" buffers
     "grid": [gx, gy, gz],                      # program_id(0) FIRST (x, y, z), as Triton takes it
     "constexprs": {"XBLOCK": 64},              # block sizes passed as keywords
     "numels": {"xnumel": 60},                  # the scalar *numel arguments
     "launch_options": {"num_warps": 4, "num_stages": 1},
     "signature": {"in_ptr0": "*fp32", "xnumel": "i32", "XBLOCK": "constexpr"},
     "args": [                                  # positional kernel arguments, in order
        {"name": "in_ptr0", "kind": "tensor", "role": "in", "buffer": "buf0",
         "dtype": "float32", "size": [3, 5], "stride": [1, 3], "storage_offset": 2, "span": 15},
        {"name": "xnumel", "kind": "scalar", "dtype": "i32", "value": 15}],
     "buffers": {"buf0": {"dtype": "float32", "nbytes": 80, "graph_input": 0,
                          "before": "buffers/buf0.before.bin", "after": "buffers/buf0.after.bin"}},
     "bit_exact_with": ["interpreter"]}         # optional: executors whose replay must match
                                                # bit for bit although they did not make "after"

A buffer is one storage; several arguments may view the same buffer (Inductor passes a
mutated graph input as both in_ptr and out_ptr). Argument views are in elements of the
argument's dtype: the kernel sees pointer = buffer start + storage_offset, and indexes it
with the size/stride Inductor planned. `span` = 1 + sum((size-1)*stride), the elements the
view can reach from its offset. Roles: "in" (read only), "out" (written, previous contents
irrelevant), "inout" (in_out_ptr, or an out_ptr into a graph input or into a buffer the
launch also reads: elements the kernel does not write must keep their old values, so an
executor must seed it with the "before" bytes, never with zeros). Replay always seeds every
buffer with its "before" bytes, so a role never changes what a replay computes.
While recording, a floating buffer that first appears as a pure output (fresh from
Inductor's uninitialised allocation) is filled with NaN before its launch, so an element a
kernel fails to write cannot pass by holding a stale right value; "before" shows the NaNs.

Converting a PyTorchSim Triton-route kernel (kernel.py + meta.json + runtime/*.raw):
kernel.py copies unchanged; `kernel_name` -> kernel_name; `fixed_config` -> constexprs;
`numels` -> numels (and the scalar args of the same names); `signature` -> signature;
each meta arg {name, role, buffer, dtype, numel} -> an arg with the same name/role/buffer/
dtype, `span` = numel, size/stride as recorded by collect_meta (1-D [numel]/[1] when
absent), storage_offset 0; `runtime/<name>.raw` -> the buffer's "before" bytes, the
route's outputs -> "after"; grid: PyTorchSim's `grid_of` is outermost-first, so reverse it
to put program_id(0) first. `executor` names what produced "after" (e.g. "pytorchsim").

Worker-side module: standard library and torch only (the route decides how launches run).
"""
from __future__ import annotations

import json
import os
import re

import torch

from torchsim_diff import files
from torchsim_diff.case.layout import dtype_name

FORMAT = "torchsim-diff.kernel-capture"
LAUNCH_FORMAT = "torchsim-diff.kernel-launch"
SCHEMA = 1
INDEX_FILE = "index.json"
LAUNCH_FILE = "launch.json"


class InductorLauncher:
    """The launcher under test by default: runs each launch exactly as Inductor would."""

    def launch(self, launch) -> None:
        launch.execute()


def storage_key(tensor: torch.Tensor) -> tuple:
    return (tensor.device.type, tensor.untyped_storage().data_ptr())


def storage_bytes(tensor: torch.Tensor) -> bytes:
    """The whole storage behind `tensor` as bytes (copied to the host)."""
    raw = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
    return raw.cpu().numpy().tobytes()


def torch_dtype(name: str) -> torch.dtype:
    """torch dtype for a captured dtype name ("float32", "uint8", ...)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CaptureFormatError(f"unknown dtype {name!r} in capture; expected a torch dtype name such as 'float32'")
    return dtype


def span_of(size, stride) -> int:
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(size, stride))


def arg_role(name: str, buffer: dict, aliased: bool) -> str:
    if name.startswith("in_out_ptr"):
        return "inout"
    if name.startswith("out_ptr"):
        return "inout" if buffer.get("graph_input") is not None or aliased else "out"
    return "in"


class LaunchRecorder:
    """Launch handler that records every launch into a capture folder while running it.

    launcher: object with `launch(launch)`; the component under test (default: Inductor's
    own launch path). graph_inputs: the case's input tensors, so that buffers that are graph
    inputs are marked (their out_ptr arguments are "inout"). sources: {kernel name: module
    source} from the generated wrapper; the kernel's own file is read when a name is missing.
    """

    def __init__(self, folder: str, *, launcher=None, graph_inputs=(), executor: str = "interpreter",
                 sources: dict | None = None):
        self.folder = folder
        self.launcher = launcher or InductorLauncher()
        self.executor = executor
        self.graph_inputs = {storage_key(t): i for i, t in enumerate(graph_inputs)
                             if isinstance(t, torch.Tensor)}
        self.launches: list[str] = []
        self._sources: dict = dict(sources or {})
        self._seen_storages: set = set()
        os.makedirs(folder, exist_ok=True)
        self._write_index()

    def __call__(self, launch) -> None:
        buffers = self._buffers(launch.args)
        self._poison_fresh_outputs(launch, buffers)
        before = {name: storage_bytes(t) for name, t in buffers.items()}
        try:
            self.launcher.launch(launch)
        finally:
            self._record(launch, buffers, before)

    def _poison_fresh_outputs(self, launch, buffers) -> None:
        """Fill floating buffers that first appear as a kernel's pure output with NaN.

        Inductor allocates them uninitialised, and the allocator often hands back memory
        holding the right values from an earlier run: an element the kernel fails to
        write would then pass by accident. NaN makes every unwritten element visible.
        """
        keys = {storage_key(t): b for b, t in buffers.items()}
        readers = {keys[storage_key(a)] for n, a in zip(launch.arg_names, launch.args)
                   if isinstance(a, torch.Tensor) and "out_ptr" not in n}
        for name, arg in zip(launch.arg_names, launch.args):
            key = storage_key(arg) if isinstance(arg, torch.Tensor) else None
            fresh = key is not None and key not in self._seen_storages and key not in self.graph_inputs
            if fresh and name.startswith("out_ptr") and keys[key] not in readers and arg.is_floating_point():
                torch.empty(0, dtype=arg.dtype, device=arg.device).set_(arg.untyped_storage()).fill_(float("nan"))
        self._seen_storages.update(keys)

    def _buffers(self, args) -> dict:
        buffers, seen = {}, {}
        for arg in args:
            if isinstance(arg, torch.Tensor) and storage_key(arg) not in seen:
                seen[storage_key(arg)] = f"buf{len(buffers)}"
                buffers[seen[storage_key(arg)]] = arg
        return buffers

    def _record(self, launch, buffers, before) -> None:
        name = f"{len(self.launches):03d}_{launch.kernel_name}"
        folder = os.path.join(self.folder, name)
        os.makedirs(os.path.join(folder, "buffers"), exist_ok=True)
        buffer_meta = {}
        for buf, tensor in buffers.items():
            buffer_meta[buf] = self._write_buffer(folder, buf, tensor, before[buf])
        record = self._launch_record(launch, buffers, buffer_meta)
        with open(os.path.join(folder, "kernel.py"), "w") as f:
            f.write(self._source(launch))
        with open(os.path.join(folder, LAUNCH_FILE), "w") as f:
            json.dump(record, f, indent=1)
        self.launches.append(name)
        self._write_index()

    def _write_buffer(self, folder, buf, tensor, before: bytes) -> dict:
        paths = {"before": f"buffers/{buf}.before.bin", "after": f"buffers/{buf}.after.bin"}
        with open(os.path.join(folder, paths["before"]), "wb") as f:
            f.write(before)
        with open(os.path.join(folder, paths["after"]), "wb") as f:
            f.write(storage_bytes(tensor))
        return {"dtype": dtype_name(tensor.dtype), "nbytes": len(before),
                "graph_input": self.graph_inputs.get(storage_key(tensor)), **paths}

    def _launch_record(self, launch, buffers, buffer_meta) -> dict:
        keys = {storage_key(t): b for b, t in buffers.items()}
        pointer_uses = [keys[storage_key(a)] for a in launch.args if isinstance(a, torch.Tensor)]
        args = []
        for name, value in zip(launch.arg_names, launch.args):
            if isinstance(value, torch.Tensor):
                buf = keys[storage_key(value)]
                args.append({"name": name, "kind": "tensor",
                             "role": arg_role(name, buffer_meta[buf], pointer_uses.count(buf) > 1),
                             "buffer": buf, "dtype": dtype_name(value.dtype), "size": list(value.shape),
                             "stride": list(value.stride()), "storage_offset": value.storage_offset(),
                             "span": span_of(value.shape, value.stride())})
            else:
                args.append({"name": name, "kind": "scalar", "value": value,
                             "dtype": launch.signature.get(name, type(value).__name__)})
        return {"format": LAUNCH_FORMAT, "schema": SCHEMA, "kernel_name": launch.kernel_name,
                "source": "kernel.py", "executor": self.executor, "grid": list(launch.grid),
                "constexprs": dict(launch.constexprs),
                "numels": {a["name"]: a["value"] for a in args
                           if a["kind"] == "scalar" and re.fullmatch(r"\w*numel", a["name"])},
                "launch_options": dict(launch.launch_options), "signature": dict(launch.signature),
                "args": args, "buffers": buffer_meta, **getattr(launch, "record_extra", {})}

    def _source(self, launch) -> str:
        """The kernel's module source: from the wrapper, its file, or rebuilt from the
        JIT function's own text. Capture is ours: it never fails the route's run."""
        if launch.kernel_name not in self._sources:
            path = launch.source_path
            if path is not None and os.path.exists(path):
                with open(path) as f:
                    self._sources[launch.kernel_name] = f.read()
            else:
                self._sources[launch.kernel_name] = _rebuilt_source(launch)
        return self._sources[launch.kernel_name]

    def _write_index(self) -> None:
        with open(os.path.join(self.folder, INDEX_FILE), "w") as f:
            json.dump({"format": FORMAT, "schema": SCHEMA, "executor": self.executor,
                       "launches": list(self.launches)}, f, indent=1)


INDUCTOR_KERNEL_IMPORTS = """import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers, triton_heuristics
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
"""


def _rebuilt_source(launch) -> str:
    """A kernel module from the JIT function's text when Inductor left no source file
    (seen on CUDA with torch 2.11 when kernels come from its caches)."""
    text = getattr(launch.jit_fn, "src", None)
    if not text:
        return (f"# torchsim-diff: the source of {launch.kernel_name} was not available at capture time;\n"
                f"# this launch cannot be replayed.\n")
    decorated = text if text.lstrip().startswith("@") else "@triton.jit\n" + text
    return ("# torchsim-diff: rebuilt from the JIT function's text (Inductor left no source file);\n"
            "# the imports below are the ones Inductor puts in front of every kernel.\n"
            + INDUCTOR_KERNEL_IMPORTS + "\n\n" + decorated)


# ---------------------------------------------------------------------------------------
# Reading a capture back
class CaptureFormatError(ValueError):
    """A folder or file that is not a kernel capture of a schema we read."""


def _read_json(path: str, expected_format: str, cap: files.Cap) -> dict:
    """The JSON object at `path` in `expected_format`, read under `cap` (files.read_json)."""
    if not os.path.lexists(path):
        raise CaptureFormatError(f"{path} does not exist; pass a capture folder (with {INDEX_FILE}) "
                                 f"or a launch folder (with {LAUNCH_FILE})")
    try:
        data = files.read_json(path, cap)
    except files.UnreadableFile as exc:
        raise CaptureFormatError(str(exc)) from None
    if not isinstance(data, dict):
        raise CaptureFormatError(f"{path} holds {type(data).__name__} JSON; expected an object "
                                 f"with format={expected_format!r}")
    if data.get("format") != expected_format or data.get("schema") != SCHEMA:
        raise CaptureFormatError(f"{path} has format={data.get('format')!r} schema={data.get('schema')!r}; "
                                 f"expected format={expected_format!r} schema={SCHEMA}")
    return data


def _field(path: str, name: str, value, ok: bool, expected: str) -> None:
    if not ok:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise CaptureFormatError(f"{path}: {name}={shown} must be {expected}")


def _is_int(value, low: int | None = None) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)


def _inside_folder(path: str, folder: str, rel) -> bool:
    """Whether the relative file name `rel` stays inside `folder` (no absolute path, `..`
    or symlink out of it)."""
    if not isinstance(rel, str) or not rel or os.path.isabs(rel):
        return False
    root = os.path.realpath(folder)
    return os.path.realpath(os.path.join(folder, rel)).startswith(root + os.sep)


def check_launch(meta: dict, path: str, folder: str) -> None:
    """Every field a replay reads, of the type it needs; CaptureFormatError names the first
    that is not (the format is in the module docstring)."""
    _field(path, "kernel_name", meta.get("kernel_name"),
           isinstance(meta.get("kernel_name"), str) and meta["kernel_name"].isidentifier(), "a Python identifier")
    _field(path, "source", meta.get("source"), _inside_folder(path, folder, meta.get("source")),
           "a file name inside the launch folder (e.g. 'kernel.py')")
    try:
        files.check_regular(os.path.join(folder, meta["source"]), files.KERNEL_SOURCE)
    except files.UnreadableFile as exc:
        raise CaptureFormatError(str(exc)) from None
    grid = meta.get("grid")
    _field(path, "grid", grid, isinstance(grid, list) and 1 <= len(grid) <= 3 and all(_is_int(g, 0) for g in grid),
           "a list of 1 to 3 non-negative integers")
    for name in ("constexprs", "numels", "launch_options", "signature"):
        value = meta.get(name, {})
        _field(path, name, value, isinstance(value, dict) and all(isinstance(k, str) for k in value), "an object")
    buffers = meta.get("buffers")
    _field(path, "buffers", buffers, isinstance(buffers, dict) and all(isinstance(v, dict) for v in buffers.values()),
           "an object of buffer objects")
    for buf, info in buffers.items():
        _field(path, f"buffers.{buf}.dtype", info.get("dtype"), isinstance(info.get("dtype"), str), "a dtype name")
        torch_dtype(info["dtype"])
        for which in ("before", "after"):
            rel = info.get(which)
            _field(path, f"buffers.{buf}.{which}", rel, rel is None or _inside_folder(path, folder, rel),
                   "null or a file name inside the launch folder")
            if rel is not None:
                try:
                    files.check_regular(os.path.join(folder, rel), files.KERNEL_BUFFER)
                except files.UnreadableFile as exc:
                    raise CaptureFormatError(str(exc)) from None
    args = meta.get("args")
    _field(path, "args", args, isinstance(args, list) and all(isinstance(a, dict) for a in args),
           "a list of argument objects")
    for k, arg in enumerate(args):
        _check_arg(f"{path}: args[{k}]", arg, buffers)
    exact = meta.get("bit_exact_with", [])
    _field(path, "bit_exact_with", exact, isinstance(exact, list) and all(isinstance(e, str) for e in exact),
           "a list of executor names")


def _check_arg(where: str, arg: dict, buffers: dict) -> None:
    def field(name, ok, expected):
        if not ok:
            raise CaptureFormatError(f"{where}.{name}={arg.get(name)!r:.60} must be {expected}")
    field("kind", arg.get("kind") in ("tensor", "scalar"), "'tensor' or 'scalar'")
    if arg["kind"] == "scalar":
        value = arg.get("value")
        field("value", not isinstance(value, (list, dict)), "a number, text, a boolean or null")
        return
    field("buffer", isinstance(arg.get("buffer"), str) and arg["buffer"] in buffers, "one of the buffers")
    field("dtype", isinstance(arg.get("dtype"), str), "a dtype name")
    torch_dtype(arg["dtype"])
    size, stride = arg.get("size"), arg.get("stride")
    field("size", isinstance(size, list) and all(_is_int(s, 0) for s in size), "a list of non-negative integers")
    field("stride", isinstance(stride, list) and len(stride) == len(size) and all(_is_int(s) for s in stride),
          "a list of integers, one per size")
    field("storage_offset", _is_int(arg.get("storage_offset"), 0), "a non-negative integer")


def find_capture(path: str) -> str:
    """The capture folder for a case artifact folder, a capture folder or its index.json."""
    if os.path.basename(path) == INDEX_FILE:
        return os.path.dirname(path)
    for candidate in (path, os.path.join(path, "kernels")):
        if os.path.exists(os.path.join(candidate, INDEX_FILE)):
            return candidate
    raise CaptureFormatError(f"no kernel capture under {path!r}: expected {INDEX_FILE} there or in "
                             f"its kernels/ folder")


def launch_folders(path: str) -> list[str]:
    """Launch folders in launch order, for a launch folder, capture folder or case folder."""
    if os.path.basename(path) == LAUNCH_FILE:
        path = os.path.dirname(path)
    if os.path.exists(os.path.join(path, LAUNCH_FILE)):
        return [path]
    capture = find_capture(path)
    index_path = os.path.join(capture, INDEX_FILE)
    index = _read_json(index_path, FORMAT, files.CAPTURE_INDEX)
    launches = index.get("launches")
    _field(index_path, "launches", launches, isinstance(launches, list)
           and all(isinstance(n, str) and n not in ("", ".", "..") and os.sep not in n for n in launches),
           "a list of launch folder names")
    return [os.path.join(capture, name) for name in launches]


class CapturedLaunch:
    """One captured launch read back: metadata, kernel source and buffer bytes."""

    def __init__(self, folder: str):
        self.folder = folder
        path = os.path.join(folder, LAUNCH_FILE)
        self.meta = _read_json(path, LAUNCH_FORMAT, files.LAUNCH_FILE)
        check_launch(self.meta, path, folder)
        self.kernel_name = self.meta["kernel_name"]
        self.source_path = os.path.join(folder, self.meta["source"])

    def buffer_bytes(self, buf: str, which: str) -> bytes | None:
        rel = self.meta["buffers"][buf].get(which)
        if rel is None:
            return None
        try:
            return files.read_bytes(os.path.join(self.folder, rel), files.KERNEL_BUFFER)
        except files.UnreadableFile as exc:
            raise CaptureFormatError(str(exc)) from None

    def storages(self, which: str = "before", device: str = "cpu") -> dict:
        """{buffer: uint8 tensor holding its bytes} on `device`."""
        out = {}
        for buf in self.meta["buffers"]:
            data = self.buffer_bytes(buf, which)
            if data is None:
                raise CaptureFormatError(f"{self.folder}: buffer {buf} has no {which!r} bytes")
            out[buf] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
        return out

    def call_args(self, storages: dict) -> list:
        """Positional kernel arguments viewing `storages` as the capture describes."""
        args = []
        for arg in self.meta["args"]:
            if arg["kind"] != "tensor":
                args.append(arg["value"])
                continue
            raw = storages[arg["buffer"]]
            view = torch.empty(0, dtype=torch_dtype(arg["dtype"]), device=raw.device)
            view.set_(raw.untyped_storage(), arg["storage_offset"], arg["size"], arg["stride"])
            args.append(view)
        return args
