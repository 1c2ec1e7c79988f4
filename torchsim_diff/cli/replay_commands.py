"""`torchsim-diff replay` and `reduce`: case files and corpus entries run again on routes, a
failing case shrunk; each failure's cause named from the known-bug ledger unless --no-cause."""
from __future__ import annotations

import os
import sys
import tempfile

from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.campaign import options as opt
from torchsim_diff.cli.usage import (EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, LEDGER_DEFAULT_HELP, UsageError,
                                     one_line, route_or_usage)
from torchsim_diff.report.tables import FORMATS, render
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S

# Imports inside functions are the slow ones (torch alone takes about 2 s): `--help` starts without them.


# -- replay ---------------------------------------------------------------------------
def cmd_replay(args) -> int:
    """Replay case files and corpus entries; exit 1 when one does not behave as expected."""
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.buckets.corpus import KNOWN, iter_entries, known_buckets
    from torchsim_diff.triage.corpus_replay import replay_entry, routes_for
    routes = args.routes
    for path in args.paths:
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or folder")
    entries, corrupt = [], []
    for entry, error in iter_entries(args.paths):
        if error is not None:
            sys.stderr.write(f"torchsim-diff: error: corrupt entry skipped: {one_line(error)}\n")
            corrupt.append(error)
        else:
            entries.append(entry)
    if not entries and not corrupt:
        raise UsageError(f"nothing to replay: no case files (*.json) in {', '.join(args.paths)}")
    if not entries:
        return EXIT_USAGE
    known = {e.bucket for e in entries if e.kind == KNOWN} | known_buckets(args.known_bugs)
    ledger = None if args.no_cause else _cause_ledger(args.known_bugs)
    rows, ok = [], True
    out_dir = args.out or tempfile.mkdtemp(prefix="torchsim-diff-replay-")
    planned = sum(len(routes_for(entry, routes)) for entry in entries)
    with Checker(out_dir=out_dir, timeout_s=args.timeout) as checker:
        available = {r for r in routes if checker.availability(r)[0]}
        for entry in entries:
            for route in routes_for(entry, routes):
                if route not in available:
                    rows.append({"entry": entry.name, "route": route, "expected": "-",
                                 "got": "skipped (route unavailable)", "ok": "-"})
                    continue
                outcome = replay_entry(checker, entry, route, known)
                rows.append(_with_cause(outcome, ledger, checker))
                _replayed_line(len(rows), planned, rows[-1])
                ok &= outcome.ok
    print(render(rows, args.format))
    if corrupt:
        return EXIT_USAGE
    return EXIT_CLEAN if ok else EXIT_FINDINGS


def _replayed_line(done: int, planned: int, row: dict) -> None:
    """Progress on stderr as each replay ends (a ledger's worth, each failure reduced, takes minutes)."""
    cause = f"; {row['cause']}" if row.get("cause", "-") != "-" else ""
    sys.stderr.write(one_line(f"[{done}/{planned}] {row['entry']} on {row['route']}: {row['got']}{cause}") + "\n")


def _cause_ledger(folder: str):
    """The ledger failures are identified against; its corrupt causes are named, then left out."""
    from torchsim_diff.buckets.which_cause import CauseLedger
    if not os.path.isdir(folder):
        raise UsageError(f"--known-bugs {folder}: no such folder; pass the known-bug ledger (e.g. corpora/known), "
                         f"or --no-cause")
    ledger = CauseLedger.read(folder)
    for problem in ledger.problems:
        sys.stderr.write(f"torchsim-diff: warning: cause left out of the ledger: {problem}\n")
    return ledger


def _with_cause(outcome, ledger, checker) -> dict:
    """The replay's row, with which cause a failure is (buckets.which_cause) unless --no-cause."""
    row = outcome.row()
    if ledger is None:
        return row
    if not outcome.verdict.failed:
        return {**row, "cause": "-", "cause signature": "-", "matched entry": "-"}
    from torchsim_diff.triage.refine import ReduceThenBucket
    return {**row, **ledger.identify(ReduceThenBucket.of_checker(checker), outcome.verdict).fields()}


# -- reduce ---------------------------------------------------------------------------
def cmd_reduce(args) -> int:
    """Shrink a failing case (case file or corpus entry) on one route; write and print the result."""
    from torchsim_diff.buckets.corpus import CorruptEntry, read_entry
    from torchsim_diff.triage.reduce import ReduceError, reduce_case
    route_or_usage(args.route)
    try:
        entry = read_entry(args.case)
    except CorruptEntry as exc:
        raise UsageError(str(exc)) from None
    ledger = None if args.no_cause else _cause_ledger(args.known_bugs)
    out_dir = args.out or tempfile.mkdtemp(prefix="torchsim-diff-reduce-")
    progress = (lambda line: sys.stderr.write(f"  {line}\n")) if args.verbose else None
    try:
        result = reduce_case(entry.case, args.route, out_dir=out_dir, jobs=args.jobs, timeout_s=args.timeout,
                             max_runs=args.max_runs, progress=progress)
    except ReduceError as exc:
        raise UsageError(f"{args.case}: {exc}") from None
    output = args.output or os.path.join(out_dir, "reduced.json")
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(result.reduced.to_json() + "\n")
    print(result.summary())
    if result.other_failures:
        print(f"{len(result.other_failures)} other failure(s) met while reducing, a finding each, not "
              f"switched to: {'; '.join(sorted(result.other_failures))}")
    if ledger is not None:
        print(f"cause: {_identity_of_reduced(result.reduced, args, out_dir, ledger)}")
    print(f"reduced case written to {output}\n")
    print(result.reduced.program_source(), end="")
    return EXIT_CLEAN


def _identity_of_reduced(case, args, out_dir: str, ledger) -> str:
    """Which cause the reduced case's failure is, with its cause signature."""
    from torchsim_diff.run.checker import Checker
    from torchsim_diff.triage.refine import ReduceThenBucket
    with Checker(out_dir=out_dir, timeout_s=args.timeout) as checker:
        verdict = checker.check(case, args.route)
        identity = ledger.identify(ReduceThenBucket.of_checker(checker), verdict)
    return f"{identity.text()} (cause signature: {identity.signature or '-'})"


# -- parsers ---------------------------------------------------------------------------------
def add_replay_parser(sub) -> None:
    p = sub.add_parser("replay", help="replay case files or corpus entries on routes")
    p.add_argument("paths", nargs="+", help="case JSON files, corpus entries or folders of them")
    p.add_argument("--routes", type=opt.route_list, default="eager,inductor",
                   help="comma-separated routes (default: eager,inductor)")
    p.add_argument("--out", type=opt.out_folder,
                   help="folder for artifacts of failing replays (default: a temporary folder)")
    p.add_argument("--timeout", type=opt.positive_seconds, default=DEFAULT_TIMEOUT_S)
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.add_argument("--known-bugs", default=default_ledger(),
                   help="the ledger a failure's cause is looked up in: each failure is reduced and said to be "
                        f"'known: CAUSE (project, status, upstream)' or 'new' (default: {LEDGER_DEFAULT_HELP})")
    p.add_argument("--no-cause", action="store_true",
                   help="do not reduce failures to name their cause (faster: raw buckets only)")
    p.set_defaults(func=cmd_replay)


def add_reduce_parser(sub) -> None:
    p = sub.add_parser("reduce", help="shrink a failing case while it fails in the same bucket on a route")
    p.add_argument("case", help="case JSON file or corpus entry")
    p.add_argument("--route", required=True, help="the route the case fails on")
    p.add_argument("--output", "-o", type=opt.output_file,
                   help="where to write the reduced case (default: <out>/reduced.json)")
    p.add_argument("--out", type=opt.out_folder, help="folder for workers and artifacts (default: a temporary folder)")
    p.add_argument("--jobs", type=opt.job_count, default=None,
                   help="cases checked in parallel, at most one per core (default: one per core)")
    p.add_argument("--max-runs", type=opt.positive_int, default=2000, help="route runs before stopping (default: 2000)")
    p.add_argument("--timeout", type=opt.positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per run before 'timeout' (default: {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--verbose", "-v", action="store_true", help="print each accepted step")
    p.add_argument("--known-bugs", default=default_ledger(),
                   help="the ledger the reduced failure's cause is looked up in: 'known: CAUSE (project, status, "
                        f"upstream)' or 'new' (default: {LEDGER_DEFAULT_HELP})")
    p.add_argument("--no-cause", action="store_true", help="do not name the reduced failure's cause")
    p.set_defaults(func=cmd_reduce)
