"""A failed timing check as a bucket with its reproducer folder.

One defect, one bucket, as for value failures (`buckets.signatures`): the key is the check, the
run's outcome and the check's message normalised (numbers, addresses and paths stripped), and
the bucket's name is a short hash of it. Its folder holds what a TOGSim maintainer needs to
see it again with no torchsim-diff:

    <bucket>/tile_graph.onnx, tile_graph.attr.json   the TOG (ONNX and buffer addresses)
    <bucket>/config.json                              the hardware config it ran on
    <bucket>/command.txt                              the command line, run in the folder
    <bucket>/verdict.json                             check, key, message, figures, known defect
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil

from torchsim_diff.timing.checks import Verdict
from torchsim_diff.timing.togsim_runner import BINARY_VARIABLE
from torchsim_diff.buckets.signatures import normalise

RUN_FILES = ("tile_graph.onnx", "tile_graph.attr.json", "config.json")
NOT_RUN = "ok"     # a check on figures of a run that finished


def bucket_key(verdict: Verdict, outcome: str = NOT_RUN) -> str:
    """check | run outcome | normalised message."""
    return f"togsim | {verdict.check} | {outcome} | {normalise(verdict.message)}"


def bucket_name(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:10]


@dataclasses.dataclass(frozen=True)
class Bucket:
    name: str
    key: str
    folder: str
    known: str       # the known defect's name, "" when new


def write_bucket(root: str, verdict: Verdict, run_folder: str, command: str,
                 outcome: str = NOT_RUN, known: dict | None = None) -> Bucket:
    """The bucket of `verdict`, whose TOG and config are in `run_folder`, under `root`. The
    first failure of a bucket keeps its reproducer; later ones leave it as it is."""
    key = bucket_key(verdict, outcome)
    defect = (known or {}).get(key)
    bucket = Bucket(bucket_name(key), key, os.path.join(root, bucket_name(key)), defect.name if defect else "")
    if os.path.isdir(bucket.folder):
        return bucket
    os.makedirs(bucket.folder)
    for name in RUN_FILES:
        if os.path.isfile(os.path.join(run_folder, name)):
            shutil.copy(os.path.join(run_folder, name), bucket.folder)
    with open(os.path.join(bucket.folder, "command.txt"), "w") as out:
        out.write(_portable(command, run_folder) + "\n")
    with open(os.path.join(bucket.folder, "verdict.json"), "w") as out:
        json.dump({"check": verdict.check, "outcome": outcome, "key": key, "message": verdict.message,
                   "figures": verdict.figures, "known_defect": bucket.known}, out, indent=1, default=str)
    return bucket


def _portable(command: str, run_folder: str) -> str:
    """The command as it runs in the bucket folder on any machine: the binary named by the
    variable users set, the run folder's paths made relative."""
    binary, *arguments = shlex.split(command.replace(os.path.join(os.path.abspath(run_folder), ""), ""))
    return f'"${BINARY_VARIABLE}" ' + shlex.join(arguments)
