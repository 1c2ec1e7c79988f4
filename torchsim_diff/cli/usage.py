"""What every subcommand shares: the exit statuses, UsageError and its parser, one-line
messages, and the checks of arguments more than one subcommand takes (a route name, a bucket
history, paths that must exist)."""
from __future__ import annotations

import argparse
import os
import sys

from torchsim_diff import files
from torchsim_diff.campaign import options as opt
from torchsim_diff.report.tables import printable
from torchsim_diff.results.jsonl import StorageError
from torchsim_diff.routes import UnknownRoute, route_class

EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNTESTED, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 3, 130, 143
EXIT_STATUS_HELP = ("exit status: 0 clean, 1 confirmed findings (failures that are no known bug, in buckets whose "
                    "self-check reproduced them), 2 usage or environment error (one line), 3 no confirmed finding "
                    "but a route could not be tested (unavailable here, or abandoned after crashing "
                    "again and again), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP); "
                    "an interrupted fuzz keeps its records and prints its summary")
DEFAULT_HISTORY = os.path.join("reports", "buckets.sqlite")
LEDGER_DEFAULT_HELP = "corpora/known in the current folder, else the copy installed with torchsim-diff"


class UsageError(Exception):
    """A mistake in what the user asked for; the message is the one line printed."""


class CliParser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes are UsageErrors (one line, exit 2)."""

    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def split_list(text: str | None) -> list | None:
    """A comma-separated option as its items (None when not given)."""
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def warn(line: str) -> None:
    """One warning line on stderr (nothing for an empty line)."""
    if line:
        sys.stderr.write(f"torchsim-diff: warning: {one_line(line)}\n")


def one_line(text) -> str:
    """A message as one line: a newline or a terminal escape from a file name or a file's
    text is printed as its escape (report.tables.printable)."""
    return printable(str(text))


def route_or_usage(name: str):
    """The route class of `name`; an unknown name is a UsageError."""
    try:
        return route_class(name)
    except UnknownRoute as exc:
        raise UsageError(str(exc)) from None


def check_history(path: str) -> None:
    """A bucket history path: absent (it is created), or a regular file within its cap that
    is a history torchsim-diff made (buckets.history_file.check_ours)."""
    from torchsim_diff.buckets.bucket_history import legacy_path, store_path
    from torchsim_diff.buckets.history_file import check_ours
    for candidate, cap in ((store_path(path), files.BUCKET_HISTORY), (legacy_path(path), files.LEGACY_HISTORY)):
        try:
            files.check_regular(candidate, cap)
        except files.UnreadableFile as exc:
            raise UsageError(f"bucket history {exc}") from None
    try:
        check_ours(store_path(path))
    except StorageError as exc:
        raise UsageError(str(exc)) from None
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"bucket history {path} cannot be created: {parent} is a file; pass another --buckets path")


def existing(paths, what: str, option: str) -> None:
    """UsageError for the first of `paths` that does not exist."""
    try:
        opt.existing_paths(paths, what)
    except opt.BadOption as exc:
        raise UsageError(f"{option} {exc}") from None
