"""Wire format between the fuzzer and a route worker.

Messages are length-prefixed pickles of plain Python values (dict, list, str, bytes,
numbers), never of torch objects, so the two sides may run different torch versions.
Tensors travel as `TensorPayload` dicts. Worker-side module: stdlib and torch only.
"""
from __future__ import annotations

import dataclasses
import enum
import pickle
import struct

import torch

from torchsim_diff.case.layout import dtype_name, dtype_of, storage_of
from torchsim_diff.results.run_metrics import RunMetrics

HEADER = struct.Struct("<Q")
PICKLE_PROTOCOL = 4


class Request(str, enum.Enum):
    """What the fuzzer asks a worker to do (one place for every message name)."""

    HELLO = "hello"          # availability, versions, pid
    RUN = "run"              # compile (cached) and run one case
    SHUTDOWN = "shutdown"


@dataclasses.dataclass
class Outcome:
    """What one run of one case on a route came to: the worker's reply, and what the client
    makes of a worker that died, hung or would not start. Built only by `passed` and
    `failed`; crosses the pipe as a plain dict (`to_wire` / `from_wire`).

    abandoned: the route was given up (too many crashes in a row); the case did not run.
    """

    ok: bool
    kind: str | None = None
    stage: str | None = None
    message: str = ""
    metrics: RunMetrics = dataclasses.field(default_factory=RunMetrics)
    artifacts: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    storages: list = dataclasses.field(default_factory=list)
    abandoned: bool = False

    @classmethod
    def passed(cls, outputs: list, storages: list, metrics: RunMetrics, artifacts: list) -> "Outcome":
        return cls(True, metrics=metrics.copy(), artifacts=list(artifacts), outputs=outputs, storages=storages)

    @classmethod
    def failed(cls, kind, stage: str, message: str, *, metrics: RunMetrics | None = None,
               artifacts: list | None = None, abandoned: bool = False) -> "Outcome":
        kind = getattr(kind, "value", kind)
        return cls(False, str(kind), stage, message, metrics.copy() if metrics else RunMetrics(), list(artifacts or []),
                   abandoned=abandoned)

    def to_wire(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_wire(cls, message: dict) -> "Outcome":
        known = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in message.items() if k in known}
        return cls(**dict(fields, metrics=RunMetrics.from_wire(fields.get("metrics"))))


def send(stream, message: dict) -> None:
    blob = pickle.dumps(message, protocol=PICKLE_PROTOCOL)
    stream.write(HEADER.pack(len(blob)))
    stream.write(blob)
    stream.flush()


def body_length(header: bytes) -> int:
    """Length of the message that follows a HEADER.size-byte header."""
    return HEADER.unpack(header)[0]


def decode(blob: bytes) -> dict:
    return pickle.loads(blob)


def recv(stream) -> dict | None:
    """Next message, or None at end of stream (the peer is gone)."""
    header = _read_exact(stream, HEADER.size)
    if header is None:
        return None
    blob = _read_exact(stream, body_length(header))
    if blob is None:
        return None
    return decode(blob)


def _read_exact(stream, n: int):
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def tensor_to_payload(t: torch.Tensor) -> dict:
    """Logical values of `t` (dense, row-major) plus its dtype, shape and strides."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    flat = torch.empty(t.numel(), dtype=t.dtype)
    flat.copy_(t.reshape(-1))
    raw = flat.to(torch.uint8) if flat.dtype == torch.bool else flat.view(torch.uint8)
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
            "data": raw.numpy().tobytes()}


def payload_to_tensor(p: dict) -> torch.Tensor:
    dtype = dtype_of(p["dtype"])
    flat = torch.frombuffer(bytearray(p["data"]), dtype=torch.uint8) if p["data"] else torch.empty(0, dtype=torch.uint8)
    if dtype == torch.bool:
        values = flat.to(torch.bool)
    else:
        values = flat.view(dtype)
    return values.reshape(p["shape"]).clone()


def storage_payload(view: torch.Tensor) -> dict:
    """The whole storage behind an input view (guards included)."""
    return tensor_to_payload(storage_of(view))
