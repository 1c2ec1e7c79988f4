"""A campaign's run folder (`fuzz --out OUT`): what the run writes there, checked before any work.

Each path below is written by the run (the folder's own name is checked as every --out is,
campaign.options.out_folder). It must be absent, or what the run would make there
(a regular file, or a real folder), and never a symbolic link, which would send the run's
writes somewhere the user never named. `refusal(out)` says why OUT cannot be a run's folder,
in one line, or None; the command line refuses the run on it before a worker starts, so
that no path inside the folder fails only after the campaign, when its report is written.

    >>> refusal("reports/run1")          # absent, or holding an earlier run's files: None
"""
from __future__ import annotations

import os
import stat

# What a campaign writes at the top of its run folder (results.jsonl's own check is
# results.jsonl.ResultsWriter's: it is also opened by other commands).
FILES = ("results.jsonl", "report.html", "reductions.json", "localised.sqlite")
FOLDERS = ("artifacts", "buckets", "bundles", "workers", "self-check", "unreduced", ".discarded")


def refusal(out: str) -> str | None:
    """Why `out` cannot be a run's folder (one line naming the path and the fix), or None."""
    checks = [(name, "file") for name in FILES] + [(name, "folder") for name in FOLDERS]
    return next(filter(None, (_not_ours(os.path.join(out, name), kind) for name, kind in checks)), None)


def _not_ours(path: str, kind: str) -> str | None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} cannot be checked ({exc.strerror}); pass another --out"
    if stat.S_ISLNK(mode):
        return f"{path} is a symbolic link: a run writes only into its own folder; remove it or pass another --out"
    if kind == "file" and not stat.S_ISREG(mode):
        return f"{path} is {'a folder' if stat.S_ISDIR(mode) else 'not a regular file'} where the run writes a file; " \
               f"remove it or pass another --out"
    if kind == "folder" and not stat.S_ISDIR(mode):
        return f"{path} is a file where the run makes a folder; remove it or pass another --out"
    return None
