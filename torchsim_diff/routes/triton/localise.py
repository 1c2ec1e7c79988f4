"""Localisation: the first kernel launch of a failing case whose outputs diverge from what a
reference executor computes on the same inputs.

Each captured launch is replayed on its own captured inputs, so a wrong kernel (or a wrong
launch of a right kernel: grid, seeding, strides) shows up at its own launch and does not
make every later launch diverge too; the first divergent launch is where the case went wrong.

    found = first_divergent_kernel("artifacts/case-17")
    found["kernel_name"], found["summary"], found["capture"]   # None when every launch reproduces
"""
from __future__ import annotations

import json
import os

from torchsim_diff.kernels.capture import LAUNCH_FILE, launch_folders
from torchsim_diff.routes.triton.launch_replay import replay_artifact


def first_divergent_kernel(artifact_dir: str, *, executor: str = "interpreter",
                           in_child: bool = False) -> dict | None:
    """Describe the first launch under `artifact_dir` that `executor` does not reproduce.

    Returns {"index", "launch", "kernel_name", "folder", "summary", "buffers", "capture"}
    ("capture" is the launch's launch.json; its folder holds kernel.py and the buffers), or
    None when every launch reproduces (the divergence is outside the kernels, e.g. in the
    wrapper, or there is no kernel to blame). in_child: replay in a child Python (see
    replay_artifact); use it from a process that is not a `triton` route worker.
    """
    folders = launch_folders(artifact_dir)
    report = replay_artifact(artifact_dir, executor=executor, in_child=in_child)
    for index, (folder, launch) in enumerate(zip(folders, report.launches)):
        if not launch.ok:
            with open(os.path.join(folder, LAUNCH_FILE)) as f:
                capture = json.load(f)
            return {"index": index, "launch": os.path.basename(folder), "kernel_name": launch.kernel_name,
                    "folder": folder, "executor": executor, "summary": launch.summary(),
                    "buffers": [b.describe() for b in launch.buffers if not b.ok], "error": launch.error,
                    "capture": capture}
    return None
