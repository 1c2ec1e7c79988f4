"""The bundle of a known TOGSim defect, in the terms PyTorchSim's bug template asks for.

PyTorchSim's `bug_report.md` asks for the input, the configuration and the exact simulator
command. A defect folder of the ledger (buckets.known_defects) holds the minimal tile-operation
graph, its config and a note written for this project; the bundle ships the graph and config,
an ISSUE.md with the note's defect and fix paragraphs and the log its reproducer paragraph
quotes (not the ones about this project's checks), and the literal command, run from a
PyTorchSim checkout.
"""
from __future__ import annotations

import os
import re
import shutil

from torchsim_diff.buckets.known_defects import KnownDefect, read_defect

FILE_AT = "https://github.com/PSAL-POSTECH/PyTorchSim/issues/new"
SHIPPED = ("tile_graph.onnx", "tile_graph.attr.json", "config.json")
FOLDER = "togsim-repro"      # where the maintainer puts the bundle, inside a PyTorchSim checkout
COMMAND = (f"./TOGSim/build/bin/Simulator --config {FOLDER}/config.json --models_list {FOLDER}/tile_graph.onnx "
           f"--attributes_list {FOLDER}/tile_graph.attr.json")
# The note's paragraphs a maintainer needs, by their bold lead-in; the others speak of this project.
KEPT_PARAGRAPHS = ("Defect", "Fix")


class NotADefect(ValueError):
    """A folder that holds no TOGSim defect, or one whose files are missing."""


def write_defect_bundle(folder: str, to_dir: str, claim) -> str:
    """Write the bundle of the defect in `folder` into `to_dir` (claim: makes the folder ready,
    as report.bundles.claim_folder does); returns it."""
    defect = read_defect(folder)
    missing = [name for name in SHIPPED + ("note.md",) if not os.path.isfile(os.path.join(folder, name))]
    if missing:
        raise NotADefect(f"{folder}: a TOGSim defect needs {', '.join(missing)}")
    claim(to_dir)
    for name in SHIPPED:
        shutil.copyfile(os.path.join(folder, name), os.path.join(to_dir, name))
    with open(os.path.join(folder, "note.md"), encoding="utf-8") as handle:
        note = handle.read()
    with open(os.path.join(to_dir, "ISSUE.md"), "w", encoding="utf-8") as handle:
        handle.write(render_issue(defect, note))
    return to_dir


def render_issue(defect: KnownDefect, note: str) -> str:
    """ISSUE.md: the title, the note's kept paragraphs, the command and the configuration."""
    parts = [f"<!-- File at {FILE_AT} -->", f"# {defect.title}", "", "**Describe the bug**", ""]
    for paragraph in _paragraphs(note):
        if paragraph.startswith("**Minimal reproducer"):    # its prose tells where it came from; its log stays
            logs = [block for block in paragraph.split("\n\n") if block.startswith("    ")]
            parts += ["On the graph and config of this folder, TOGSim's log ends with\n\n" + "\n\n".join(logs)] if logs else []
        elif paragraph.startswith(tuple(f"**{k}" for k in KEPT_PARAGRAPHS)):
            parts.append(paragraph)
    parts += ["", "**To reproduce**", "",
              f"Copy this folder into the root of a PyTorchSim checkout as `{FOLDER}/`, build TOGSim, and run "
              "from that root:", "", "```", COMMAND, "```", "",
              "`config.json` is the hardware configuration, `tile_graph.onnx` and `tile_graph.attr.json` the tile "
              "graph (both in this folder).", ""]
    seen = re.search(r"upstream commit (\w+)", note)
    parts += ["**Version**", "", f"TOGSim at PyTorchSim commit {seen.group(1)}." if seen else
              "TOGSim (commit not recorded).", ""]
    return "\n".join(parts)


def _paragraphs(note: str) -> list:
    """The note's paragraphs (blank-line separated), each as one text; an indented block
    (a quoted log) stays with the paragraph before it."""
    out = []
    for block in re.split(r"\n\s*\n", note.strip()):
        if block.startswith("    ") and out:
            out[-1] += "\n\n" + block
        elif not block.startswith("#"):
            out.append(block)
    return [p + "\n" for p in out]
