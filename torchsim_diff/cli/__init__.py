"""`torchsim-diff` command line. Exit status: 0 clean, 1 findings, 2 usage or environment error,
130 interrupted (SIGINT, Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP).

User mistakes (unknown route or op, malformed case JSON, missing files) print one line
starting with "torchsim-diff: error:" and exit 2; they never print a traceback. SIGTERM (and
SIGHUP) ends a command as Ctrl-C does: `fuzz` keeps every record written, prints its summary
and the results path, and exits 143 (129 for SIGHUP, 130 for Ctrl-C); a second one ends the
process at once. Output whose reader left (`| head -1`) changes neither the work nor the exit
status (campaign.closed_output).

One module per subcommand family, each with its commands and their parsers; this module
assembles the parser and runs a command:

    usage            exit statuses, UsageError, one-line messages, checks several commands share
    route_commands   routes, ops, kernel replay
    fuzz_command     fuzz: options checked together, the campaign, its summary and report
    replay_commands  replay, reduce (each failure's cause named from the ledger)
    export_commands  export (bundles of buckets, entries, causes, defects), causes
    table_command    table: the tables of run folders
"""
from __future__ import annotations

import argparse
import sys

from torchsim_diff import bytecode
from torchsim_diff.campaign.closed_output import output_may_close
from torchsim_diff.campaign.interrupts import Terminated, exit_status, sigterm_as_interrupt, signal_of
from torchsim_diff.cli import export_commands, fuzz_command, replay_commands, route_commands, table_command
from torchsim_diff.cli.usage import (EXIT_CLEAN, EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_STATUS_HELP,
                                     EXIT_TERMINATED, EXIT_UNTESTED, EXIT_USAGE, CliParser, UsageError, one_line)
from torchsim_diff.results.jsonl import StorageError

__all__ = ["EXIT_CLEAN", "EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_STATUS_HELP", "EXIT_TERMINATED", "EXIT_UNTESTED",
           "EXIT_USAGE", "UsageError", "build_parser", "main"]

# The subcommands in the order `--help` lists them.
SUBCOMMANDS = (route_commands.add_routes_parser, route_commands.add_ops_parser, fuzz_command.add_fuzz_parser,
               replay_commands.add_replay_parser, replay_commands.add_reduce_parser,
               export_commands.add_export_parser, export_commands.add_causes_parser,
               route_commands.add_kernel_parser, table_command.add_table_parser)


def build_parser() -> argparse.ArgumentParser:
    parser = CliParser(prog="torchsim-diff", description="Differential fuzzing of PyTorch compiler routes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=CliParser)
    for add_parser in SUBCOMMANDS:
        add_parser(sub)
    return parser


def main(argv=None) -> int:
    bytecode.redirect_this_process()
    try:
        with sigterm_as_interrupt(), output_may_close():
            parser = build_parser()
            parser.epilog = "\n".join(filter(None, [parser.epilog, EXIT_STATUS_HELP]))
            args = parser.parse_args(argv)
            return args.func(args)
    except (UsageError, StorageError) as exc:
        sys.stderr.write(f"torchsim-diff: error: {one_line(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        sys.stderr.write(f"torchsim-diff: {'terminated' if terminated else 'interrupted'}\n")
        return exit_status(signal_of(exc))
