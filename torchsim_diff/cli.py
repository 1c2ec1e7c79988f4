"""`torchsim-diff` command line. Exit status: 0 clean, 1 findings, 2 usage or environment error,
130 interrupted (SIGINT, Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP).

User mistakes (unknown route or op, malformed case JSON, missing files) print one line
starting with "torchsim-diff: error:" and exit 2; they never print a traceback. SIGTERM (and
SIGHUP) ends a command as Ctrl-C does: `fuzz` keeps every record written, prints its summary
and the results path, and exits 143 (129 for SIGHUP, 130 for Ctrl-C); a second one ends the
process at once. Output whose reader left (`| head -1`) changes neither the work nor the exit
status (campaign.closed_output).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import signal
import sys
import time

from torchsim_diff.campaign import bytecode
from torchsim_diff.campaign.interrupts import Terminated, exit_status, sigterm_as_interrupt, signal_of
from torchsim_diff.campaign import options as opt
from torchsim_diff.campaign.budget import budget_seconds
from torchsim_diff.campaign.closed_output import output_may_close
from torchsim_diff.generate.switches import GRAPH_NODES
from torchsim_diff.results.jsonl import StorageError
from torchsim_diff.worker import DEFAULT_TIMEOUT_S

OPINFO = "opinfo"      # `table --format`: the tolerance table as PyTorch's toleranceOverride entries
EXIT_CLEAN, EXIT_FINDINGS, EXIT_USAGE, EXIT_UNTESTED, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 3, 130, 143
EXIT_STATUS_HELP = ("exit status: 0 clean, 1 confirmed findings (failures that are no known bug, in buckets whose "
                    "self-check reproduced them), 2 usage or environment error (one line), 3 no confirmed finding "
                    "but a route could not be tested (unavailable here, or abandoned after crashing "
                    "again and again), 130 interrupted (Ctrl-C), 143 terminated (SIGTERM), 129 hung up (SIGHUP); "
                    "an interrupted fuzz keeps its records and prints its summary")
UNBOUNDED_EXAMPLES = 10**9       # --budget without --max-examples: cases until the budget is spent
DEFAULT_HISTORY = os.path.join("reports", "buckets.sqlite")
LEDGER_DEFAULT_HELP = "corpora/known in the current folder, else the copy installed with torchsim-diff"


class UsageError(Exception):
    """A mistake in what the user asked for; the message is the one line printed."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see {self.prog} --help)")


def _split(text: str | None) -> list | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def _warn(line: str) -> None:
    if line:
        sys.stderr.write(f"torchsim-diff: warning: {_one_line(line)}\n")


def _one_line(text) -> str:
    """A message as one line: a newline or a terminal escape from a file name or a file's
    text is printed as its escape (report.tables.printable)."""
    from torchsim_diff.report.tables import printable
    return printable(str(text))


def _default_out() -> str:
    return os.path.join("reports", time.strftime("run-%Y%m%d-%H%M%S"))


# -- routes / ops -----------------------------------------------------------------------
def cmd_routes(args) -> int:
    """List every route with its availability and reason, probed in its own worker."""
    import tempfile

    from torchsim_diff.run.checker import Checker
    from torchsim_diff.report.tables import render
    from torchsim_diff.routes import route_class, route_names
    names = args.routes or route_names()
    with tempfile.TemporaryDirectory(prefix="torchsim-diff-routes-") as tmp, Checker(out_dir=tmp) as checker:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            probes = dict(zip(names, pool.map(checker.availability, names)))
        start_failed = {n for n in names if checker.worker(n).start_failed}
    rows = []
    for name in names:
        ok, reason, versions = probes[name]
        cls = route_class(name)
        if name in start_failed:
            ok, reason = False, f"worker dies during start-up: {reason}"
        rows.append({"route": name, "available": "yes" if ok else "no",
                     "reason / versions": reason if not ok else ", ".join(f"{k} {v}" for k, v in versions.items()),
                     "what runs": cls.description, "boundary": cls.boundary})
    if not args.routes:
        rows.append(_togsim_row())
    print(render(rows, args.format))
    return EXIT_CLEAN


def _togsim_row() -> dict:
    """TOGSim is no route of values: it times the triton-spike route's kernels (docs/togsim.md)."""
    from torchsim_diff.timing.togsim_runner import availability
    ok, reason = availability()
    return {"route": "togsim", "available": "yes" if ok else "no", "reason / versions": reason,
            "what runs": "triton-spike's kernels as TOGs -> TOGSim (cycle-level NPU model); timing checks",
            "boundary": "one TOG per launch: grid programs as outer tiles, DMA of each argument's view, "
                        "compute cost = Spike instret per program"}


def cmd_ops(args) -> int:
    """List the registered ops by family."""
    from torchsim_diff.ops import all_ops
    from torchsim_diff.report.tables import render
    rows = [{"op": s.name, "family": s.family, "dtypes": s.dtypes, "mutates": s.mutates}
            for s in all_ops().values()]
    print(render(rows, args.format))
    return EXIT_CLEAN


def _route_or_usage(name: str):
    from torchsim_diff.routes import UnknownRoute, route_class
    try:
        return route_class(name)
    except UnknownRoute as exc:
        raise UsageError(str(exc)) from None


# -- fuzz -------------------------------------------------------------------------------
def cmd_fuzz(args) -> int:
    """Run a campaign; print a summary table; exit with a status of EXIT_STATUS_HELP."""
    from torchsim_diff.campaign.fuzz import CampaignResult, settle_told
    from torchsim_diff.report.tables import bucket_rows, render, summary_rows, unconfirmed_lines
    from torchsim_diff.generate.strategies import InvalidArgument
    from torchsim_diff.generate.policy import InvalidPolicy, active_policy
    opts = None
    try:
        _check_fuzz(args)
        opts = _campaign_options(args)
        sys.stderr.write(f"torchsim-diff: {active_policy().describe()}\n")   # once the options are good
        result = _run_fuzz(opts, args)
    except (InvalidArgument, InvalidPolicy) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt as exc:     # before the campaign handles its own: nothing ran yet
        if opts is None:
            print(f"interrupted by {signal.Signals(signal_of(exc)).name} while checking the options: nothing ran")
            return exit_status(signal_of(exc))
        result = CampaignResult()
        result.interrupt(exc)
    print(render(summary_rows(result.records), "plain", "Summary"))
    standing = _standing_of(result, opts)
    if result.findings or result.unconfirmed:
        rows = bucket_rows(result.records, result.bundles, standing)
        print()
        print(render(rows, "plain", "Buckets"))
        if opts.bucket_store:
            print(f"{len(result.new_buckets)} new bucket(s); history in {opts.bucket_store}")
    for line in unconfirmed_lines(result.unconfirmed):
        print(line)
    _print_known(result.known_findings, opts.known_bugs)
    _print_killed(result.records)
    print(f"\n{_counts(result)}, results in {os.path.join(opts.out_dir, 'results.jsonl')}"
          + (f" (interrupted by {signal.Signals(result.signal).name})" if result.interrupted else ""))
    reported = _print_html_report(opts.out_dir, result, standing)
    settle_told(result, opts)
    for route, reason in result.abandoned.items():
        print(f"route {route} could not be tested to the end: {reason}")
    for note in getattr(result, "notes", ()):    # a Ray campaign's shards rerun after a lost node
        print(note)
    status = _fuzz_status(result)
    return EXIT_USAGE if status == EXIT_CLEAN and not reported else status


def _print_html_report(out_dir: str, result, standing) -> bool:
    """Write the report and print its path; one line on stderr when it cannot be written (the
    folder changed under the run: its paths were checked before it began). Whether it was."""
    try:
        print(f"HTML report: {_write_html_report(out_dir, result, standing)}")
        return True
    except OSError as exc:
        sys.stderr.write(f"torchsim-diff: error: the HTML report could not be written in {out_dir}: "
                         f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}\n")
        return False


def _campaign_options(args):
    """CampaignOptions from `fuzz`'s arguments, once _check_fuzz has checked them."""
    from torchsim_diff.campaign.fuzz import CampaignOptions
    return CampaignOptions(routes=args.routes, out_dir=args.out, max_examples=_max_examples(args),
                           seed=args.seed, dtype=args.dtype, max_nodes=args.max_nodes,
                           families=args.families, ops=args.ops,
                           special_values=args.special_values, timeout_s=args.timeout,
                           route_options=_route_options(args),
                           bucket_store=None if args.buckets == "none" else args.buckets, repeat=args.repeat,
                           reduce=not args.no_reduce, reduce_budget_s=args.reduce_budget, budget_s=args.budget,
                           batch=args.batch, known_bugs=_known_bugs(args), self_check=not args.no_self_check,
                           settle_when_told=True)


def _standing_of(result, opts):
    """Each bucket's status (report.standing): the run's NEW and unconfirmed buckets, the
    ledger's causes, the bucket history's first sightings."""
    from torchsim_diff.report.standing import Standing
    history = _history_buckets(opts.bucket_store) if opts.bucket_store else {}
    return Standing.of_run(result.new_buckets, result.unconfirmed, known_folder=opts.known_bugs, history=history)


def _history_buckets(path: str) -> dict:
    """bucket -> its row in the history at `path` (BucketStore.buckets), read read-only."""
    from torchsim_diff.triage.bucket_history import BucketStore
    store = BucketStore(path, read_only=True)
    try:
        return store.buckets
    finally:
        store.close()


def _write_html_report(out_dir: str, result, standing=None) -> str:
    """The run's report folder (report.html, a page per bucket), as a pytest campaign writes it."""
    from torchsim_diff.report.html_report import write_report
    from torchsim_diff.report.tables import new_bucket_rows
    new_rows = new_bucket_rows(result.records, result.new_buckets, result.bundles)
    return write_report(out_dir, result.records, new_rows=new_rows, bundles=result.bundles, standing=standing)


def _max_examples(args) -> int:
    """--max-examples; unbounded under --budget alone (the budget ends the run), else 100."""
    if args.max_examples is not None:
        return args.max_examples
    return UNBOUNDED_EXAMPLES if args.budget else 100


def _counts(result) -> str:
    """Cases drawn, how many of their route runs were skipped, and routes abandoned."""
    from torchsim_diff.results.kinds import Status
    skipped = sum(1 for r in result.records if r.status == Status.SKIPPED.value)
    text = f"{result.cases} cases ({len(result.records) - skipped} route runs, {skipped} skipped"
    return text + (f"; {len(result.abandoned)} route(s) abandoned)" if result.abandoned else ")")


def _fuzz_status(result) -> int:
    if result.interrupted:
        return exit_status(result.signal)
    if result.findings:
        return EXIT_FINDINGS
    return EXIT_UNTESTED if result.abandoned or result.unavailable else EXIT_CLEAN


def _print_killed(records) -> None:
    """One line for cases whose route worker was killed from outside: not tested, no finding."""
    killed = [r for r in records if r.killed_worker]
    if killed:
        print(f"{len(killed)} case(s) not tested: their route worker was killed from outside "
              f"(records with kind tool_error)")


def _print_known(records, folder) -> None:
    """One line for failures that are known bugs: they neither fail the run nor count as new."""
    if records:
        buckets = sorted({r.bucket for r in records})
        print(f"{len(records)} failing case(s) in known bug bucket(s) {', '.join(buckets)} (entries in {folder})")


def _run_fuzz(opts, args):
    """In this process, or in shards on a Ray cluster with --ray."""
    if not args.ray:
        from torchsim_diff.campaign.fuzz import run_campaign
        result = run_campaign(opts)
    else:
        from torchsim_diff.campaign.ray_cluster import RayUnavailable, run_ray_campaign
        try:
            result = run_ray_campaign(opts, args.ray, args.shards)
        except RayUnavailable as exc:
            raise UsageError(str(exc)) from None
    if result.cases == 0 and not result.interrupted and not opts.budget_s:
        # _check_filters catches the filters known to leave nothing; this is the backstop
        raise UsageError(f"no case could be drawn with --dtype {opts.dtype} {_filters(opts.ops, opts.families)}"
                         f"; nothing ran (see `torchsim-diff ops` for each op's family and dtypes)")
    return result


def _check_fuzz(args) -> None:
    """What `fuzz` was given, checked together before any work starts (argparse has checked
    each value alone): filters that leave nothing to draw, the known-bug folder, the bucket
    history and the results file, --shards without --ray."""
    if args.shards is not None and not args.ray:
        raise UsageError(f"--shards {args.shards} applies only with --ray (a campaign on a Ray cluster)")
    for route in args.routes:
        _route_or_usage(route)
    _check_filters(args)
    if args.known_bugs not in (None, "none") and not os.path.isdir(args.known_bugs):
        what = "is not a folder" if os.path.exists(args.known_bugs) else "does not exist"
        raise UsageError(f"--known-bugs {args.known_bugs} {what}; pass a folder of known-bug corpus entries "
                         f"(e.g. corpora/known) or 'none'")
    _check_run_folder(args)
    if args.buckets != "none":
        _check_history(args.buckets)
        _check_history_writable(args.buckets)


def _check_run_folder(args) -> None:
    """--out, or its default in the current folder, and the paths the run writes inside it
    (campaign.run_folder): all checked before any work, none found wrong after the campaign."""
    from torchsim_diff.campaign import run_folder
    if args.out is None:
        args.out = _default_out()
        try:
            opt.out_folder(args.out)
        except opt.BadOption as exc:
            raise UsageError(f"no --out given, and the default run folder {exc} with --out") from None
    _check_results_file(os.path.join(args.out, "results.jsonl"))
    why = run_folder.refusal(args.out)
    if why:
        raise UsageError(why)


def _known_bugs(args) -> str | None:
    from torchsim_diff.triage.known_ledger import default_ledger
    if args.known_bugs is None:
        return default_ledger()
    return None if args.known_bugs == "none" else args.known_bugs


def _check_filters(args) -> None:
    """--ops, --families and --dtype: known names that leave at least one op to draw."""
    from torchsim_diff.ops import FAMILIES, all_ops
    from torchsim_diff.generate.strategies import InvalidArgument, cases
    try:
        cases(dtype=args.dtype, max_nodes=args.max_nodes, families=args.families, ops=args.ops)
    except InvalidArgument as exc:
        ops, families = args.ops or [], args.families or []
        if not set(ops) <= set(all_ops()) or not set(families) <= set(FAMILIES):
            raise UsageError(str(exc)) from None
        picked = [s for s in all_ops().values()
                  if (not ops or s.name in ops) and (not families or s.family in families)]
        why = f"no op there takes dtype {args.dtype}" if picked else "none of those ops is in those families"
        raise UsageError(f"{_filters(ops, families)} with --dtype {args.dtype} leaves nothing to draw: {why} "
                         f"(see `torchsim-diff ops` for each op's family and dtypes)") from None


def _filters(ops, families) -> str:
    """--ops and --families as given, e.g. '--ops exp,log'."""
    return " ".join(f"--{name} {','.join(v)}" for name, v in (("ops", ops), ("families", families)) if v)


def _check_history(path: str) -> None:
    """A bucket history path: absent (it is created), or a regular file within its cap that
    is a history torchsim-diff made (triage.history_file.check_ours)."""
    from torchsim_diff import files
    from torchsim_diff.triage.bucket_history import legacy_path, store_path
    from torchsim_diff.triage.history_file import check_ours
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


def _check_history_writable(path: str) -> None:
    """A campaign adds to its bucket history: the file (and its folder, where SQLite keeps its
    journal) must be writable, or the run would end at its first finding."""
    from torchsim_diff.triage.bucket_history import store_path
    path = store_path(path)
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"bucket history {path} cannot be written (no write permission on "
                         f"{path if os.path.exists(path) else folder}); pass another --buckets path, or --buckets none")


def _check_results_file(path: str) -> None:
    """RUN/results.jsonl, appended to: absent, or a regular file."""
    if os.path.lexists(path) and not os.path.isfile(path):
        kind = "a folder" if os.path.isdir(path) else "not a regular file"
        raise UsageError(f"{path} is {kind}; the results file must be a regular file (pass another --out)")


_OPTION_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _route_options(args) -> dict:
    """ROUTE.KEY=VALUE items as {route: {key: value}}, each key one its route declares
    (Route.option_names) and each value one the route accepts: checked here, before any
    worker starts. A value of ASCII digits is an integer, anything else text."""
    options = {}
    for item in args.route_option or []:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise UsageError(f"--route-option {item!r} must look like ROUTE.KEY=VALUE (e.g. spike.vlen=512)")
        key, value = item.split("=", 1)
        route, name = key.split(".", 1)
        _route_or_usage(route)
        if route not in args.routes:
            raise UsageError(f"--route-option {item!r} is for route {route}, which --routes "
                             f"{','.join(args.routes)} does not run")
        if not _OPTION_KEY.fullmatch(name):
            raise UsageError(f"--route-option {item!r}: {name!r} is not an option name (letters, digits and _); "
                             f"e.g. spike.vlen=512")
        options.setdefault(route, {})[name] = int(value) if value.isascii() and value.isdigit() else value
    for route, chosen in options.items():
        cls = _route_or_usage(route)
        try:
            cls.check_options(chosen)
            cls(chosen)                         # routes check their option values when built
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--route-option for {route}: {exc}") from None
    return options


# -- replay ---------------------------------------------------------------------------
def cmd_replay(args) -> int:
    """Replay case files and corpus entries; exit 1 when one does not behave as expected."""
    import tempfile

    from torchsim_diff.run.checker import Checker
    from torchsim_diff.triage.corpus import KNOWN, iter_entries, known_buckets
    from torchsim_diff.triage.corpus_replay import replay_entry, routes_for
    from torchsim_diff.report.tables import render
    routes = args.routes
    for path in args.paths:
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or folder")
    entries, corrupt = [], []
    for entry, error in iter_entries(args.paths):
        if error is not None:
            sys.stderr.write(f"torchsim-diff: error: corrupt entry skipped: {_one_line(error)}\n")
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
    sys.stderr.write(_one_line(f"[{done}/{planned}] {row['entry']} on {row['route']}: {row['got']}{cause}") + "\n")


def _cause_ledger(folder: str):
    """The ledger failures are identified against; its corrupt causes are named, then left out."""
    from torchsim_diff.triage.which_cause import CauseLedger
    if not os.path.isdir(folder):
        raise UsageError(f"--known-bugs {folder}: no such folder; pass the known-bug ledger (e.g. corpora/known), "
                         f"or --no-cause")
    ledger = CauseLedger.read(folder)
    for problem in ledger.problems:
        sys.stderr.write(f"torchsim-diff: warning: cause left out of the ledger: {problem}\n")
    return ledger


def _with_cause(outcome, ledger, checker) -> dict:
    """The replay's row, with which cause a failure is (triage.which_cause) unless --no-cause."""
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
    import tempfile

    from torchsim_diff.triage.corpus import CorruptEntry, read_entry
    from torchsim_diff.triage.reduce import ReduceError, reduce_case
    _route_or_usage(args.route)
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


# -- export ---------------------------------------------------------------------------
def cmd_export(args) -> int:
    """Write the reproducer bundle of one bucket (its smallest case), a known entry or a root
    cause to a folder."""
    from torchsim_diff.timing.known_defects import is_defect_folder
    from torchsim_diff.triage.causes import is_cause_folder
    cause = args.bucket if os.path.isdir(args.bucket) else os.path.join(args.known_bugs, args.bucket)
    if is_cause_folder(cause):
        return _export_cause(cause, args)
    if is_defect_folder(cause):
        return _export_defect(cause, args)
    if args.bucket.endswith(".json"):
        return _export_entry(args)
    from torchsim_diff.report.bundles import BundleError, write_bundle
    from torchsim_diff.case.validate import InvalidCase, validate_case
    record, where = _run_record(args) if args.runs else _history_record(args)
    try:
        validate_case(record.case)
    except InvalidCase as exc:
        raise UsageError(f"bucket {args.bucket} in {where}: its case is invalid: {exc}") from None
    try:
        folder = write_bundle(record, args.to, bisect=not args.no_bisect)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    print(f"bundle for bucket {args.bucket} ({record.route}, {record.kind}) written to {folder}")
    return EXIT_CLEAN


def _run_record(args) -> tuple:
    """(the bucket's smallest failing record in the --from runs, where). Records come with
    their artifact folders resolved inside their own run folder; one whose folder lies outside
    it was refused by the reader, and so is the export if the bucket has no other record."""
    from torchsim_diff.triage.bucket_history import smallest_per_bucket
    from torchsim_diff.results.jsonl import ReadLog, find_results, stream_records
    _existing(args.runs, "run folder or results file", "--from")
    log = ReadLog()
    where = ", ".join(args.runs)
    records = (r for r in stream_records(find_results(args.runs), log) if r.bucket == args.bucket)
    record = smallest_per_bucket(records).get(args.bucket)
    if record is None and args.bucket in log.refused:
        raise UsageError(f"bucket {args.bucket} refused: {log.refused[args.bucket]}")
    if record is None:
        raise UsageError(f"bucket {args.bucket!r} not found in {where}"
                         + (f" ({log.summary()})" if log.skipped else ""))
    _warn(log.summary())
    return record, where


def _history_record(args) -> tuple:
    """(the bucket's smallest record in the bucket history, where), checked like a results line."""
    from torchsim_diff.triage.bucket_history import BucketStore, legacy_path, store_path
    from torchsim_diff.results.jsonl import run_folder_of
    from torchsim_diff.results.record import BadRecord
    _check_history(args.buckets)
    if not any(os.path.exists(p) for p in (store_path(args.buckets), legacy_path(args.buckets))):
        raise UsageError(f"no bucket history at {args.buckets}; pass run folders with --from")
    store = BucketStore(args.buckets, read_only=True)
    where = store.path
    try:
        record = store.smallest_record(args.bucket)
    except BadRecord as exc:
        raise UsageError(f"bucket {args.bucket} in {where}: its record is unusable: {exc.reason}") from None
    finally:
        store.close()
    if record is None:
        raise UsageError(f"bucket {args.bucket!r} not found in {where}")
    return _resolved_artifacts(args.bucket, record, where, run_folder_of), where


def _resolved_artifacts(bucket: str, record, where: str, run_of):
    """`record` (results.record.Record) with its artifact folders resolved inside their run
    folder (`run_of(value)`); an existing folder outside one refuses the export: a bundle holds
    only what a run wrote."""
    from torchsim_diff.results.jsonl import UnsafeArtifacts, artifact_folder
    resolved = {}
    try:
        for key, value in record.artifact_folders().items():
            if value:
                run = run_of(value)
                if run is None and os.path.exists(value):
                    raise UnsafeArtifacts(f"artifact folder {value!r} is not in a run folder's artifacts/; "
                                          f"only files a run wrote go into a bundle")
                resolved[key] = artifact_folder(value, run) if run else None
    except UnsafeArtifacts as exc:
        raise UsageError(f"bucket {bucket} in {where}: {exc}") from None
    return record.with_fields(**resolved)


def _existing(paths, what: str, option: str) -> None:
    """UsageError for the first of `paths` that does not exist."""
    try:
        opt.existing_paths(paths, what)
    except opt.BadOption as exc:
        raise UsageError(f"{option} {exc}") from None


def _export_entry(args) -> int:
    """The bundle of a known corpus entry (export corpora/known/X.json --to DIR)."""
    from torchsim_diff.triage.corpus import CorruptEntry, read_entry
    from torchsim_diff.report.bundles import BundleError, entry_record, write_bundle
    if not os.path.exists(args.bucket):
        raise UsageError(f"{args.bucket}: no such corpus entry")
    try:
        record = entry_record(read_entry(args.bucket))
        folder = write_bundle(record, args.to, minimise=not args.all_shims, run=True, bisect=not args.no_bisect)
    except (CorruptEntry, BundleError) as exc:
        raise UsageError(str(exc)) from None
    print(f"bundle for {args.bucket} ({record.route}, {record.kind}) written to {folder}")
    return EXIT_CLEAN


def _export_cause(folder: str, args) -> int:
    """The bundle of a root cause: its plainest case, the cause's title and what is known of
    it; repro.py is run once, and its output quoted in ISSUE.md."""
    from torchsim_diff.report.bundles import BundleError, entry_record, write_bundle
    from torchsim_diff.triage.causes import analysis, read_cause
    from torchsim_diff.triage.corpus import CorruptEntry
    try:
        cause = read_cause(folder)
        if cause.mlir_opt is not None:
            return _export_mlir_cause(cause, args)
        shown = cause.representative()
        record = entry_record(shown).with_fields(project=cause.project, upstream=cause.upstream)
        written = write_bundle(record, args.to, minimise=not args.all_shims, run=True,
                               analysis=analysis(cause, shown), heading=cause.title, bisect=not args.no_bisect,
                               status=cause.status, eager_bug=cause.eager_bug)
    except (CorruptEntry, BundleError) as exc:
        raise UsageError(str(exc)) from None
    print(f"bundle for cause {cause.name} ({cause.project}, {cause.status}; case {shown.name}) written to {written}")
    return EXIT_CLEAN


def _export_mlir_cause(cause, args) -> int:
    """The bundle of an MLIR bug with its own .mlir reproducer: the file, the mlir-opt command and
    a repro.py that runs it; ISSUE.md in LLVM's terms (report.mlir_opt_bundle)."""
    from torchsim_diff.report import bundles, mlir_opt_bundle
    from torchsim_diff.triage.causes import analysis
    try:
        bundles.claim_folder(args.to)
        mlir_opt_bundle.write_mlir_bundle(cause.folder, cause.mlir_opt, args.to, cause.title)
    except (bundles.BundleError, mlir_opt_bundle.BadMlirRepro, OSError) as exc:
        raise UsageError(str(exc)) from None
    status, out, err = bundles.run_repro(args.to)
    quoted = bundles.quoted_run(args.to, status, out, 300, err)
    upstream = cause.upstream if cause.status in bundles.THREAD_DRAFTS else ""
    head = bundles.THREAD_DRAFTS[cause.status].format(url=upstream) if upstream else \
        f"<!-- File at {bundles.PROJECTS[cause.project].file_at} -->"
    text = mlir_opt_bundle.render_issue(cause.title, head, analysis(cause, None), cause.mlir_opt, args.to, quoted)
    bundles.write_text(os.path.join(args.to, "ISSUE.md"), text)
    bundles.write_manifest(args.to)
    print(f"bundle for cause {cause.name} ({cause.project}, {cause.status}; {cause.mlir_opt.file}) written to {args.to}")
    return EXIT_CLEAN


def _export_defect(folder: str, args) -> int:
    """The bundle of a known TOGSim defect: its tile graph, config, the literal command and
    ISSUE.md in PyTorchSim's terms (report.togsim_bundle)."""
    from torchsim_diff.report.bundles import BundleError, claim_folder, write_manifest
    from torchsim_diff.report.togsim_bundle import NotADefect, write_defect_bundle
    from torchsim_diff.timing.known_defects import BadDefect
    try:
        written = write_defect_bundle(folder, args.to, claim_folder)
        write_manifest(written)
    except (BadDefect, NotADefect, BundleError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(f"bundle for TOGSim defect {os.path.basename(os.path.normpath(folder))} written to {written}")
    return EXIT_CLEAN


def cmd_causes(args) -> int:
    """List the known bugs by root cause: project, status, cases, upstream; the ledger's TOGSim
    defects (timing.known_defects) too, each one cause with its minimal TOG as its case."""
    from torchsim_diff.report import tables
    from torchsim_diff.report.standing import cause_status
    from torchsim_diff.timing.known_defects import BadDefect, known_defects
    from torchsim_diff.triage.causes import read_causes
    causes, problems = read_causes(args.known_bugs)
    try:
        defects = sorted({d.name: d for d in known_defects(args.known_bugs).values()}.values(), key=lambda d: d.name)
    except BadDefect as exc:
        defects, problems = [], problems + [str(exc)]
    for line in problems:
        _warn(line)
    if not causes and not defects:
        raise UsageError(f"no root causes under {args.known_bugs}")
    rows = [{"cause": c.name, "project": c.project, "status": cause_status(c),
             "cases": len(c.entries), "routes": ",".join(c.routes), "upstream": c.upstream or "-",
             "title": c.title} for c in causes]
    rows += [{"cause": d.name, "project": d.project, "status": d.status, "cases": 1, "routes": "togsim",
              "upstream": d.upstream or "-", "title": d.title} for d in defects]
    rows.sort(key=lambda row: (row["project"], row["status"], row["cause"]))
    totals = {}
    for row in rows:
        counts = totals.setdefault(row["project"], {"project": row["project"], "causes": 0, "cases": 0,
                                                     "new": 0, "reported": 0, "fixed": 0})
        counts["causes"] += 1
        counts["cases"] += row["cases"]
        status = row["status"].split(" in ")[0]
        counts[status if status in counts else "new"] += 1    # a defect with no upstream issue is new
    print(tables.render(_titles_to_fit(rows) if args.format == "plain" else rows, args.format, "Causes"))
    print()
    print(tables.render(sorted(totals.values(), key=lambda row: row["project"]), args.format, "By project"))
    return EXIT_FINDINGS if problems else EXIT_CLEAN


def _titles_to_fit(rows: list) -> list:
    """The rows with titles cut to what the terminal's width leaves them (40 characters at least)."""
    import shutil
    from torchsim_diff.report import tables
    others = tables.render([{k: v for k, v in row.items() if k != "title"} for row in rows], "plain")
    room = max(40, shutil.get_terminal_size().columns - max(map(len, others.splitlines())) - 2)
    return [{**row, "title": row["title"] if len(row["title"]) <= room else row["title"][:room - 1] + "…"}
            for row in rows]


# -- kernel replay ----------------------------------------------------------------------
def cmd_kernel_replay(args) -> int:
    """Replay one captured kernel launch on its captured inputs; diff against its outputs."""
    from torchsim_diff.triage.kernels.capture import CaptureFormatError
    from torchsim_diff.triage.kernels.launch_replay import replay_artifact
    if not os.path.exists(args.artifact):
        raise UsageError(f"{args.artifact}: no such capture")
    if args.executor == "cuda":
        _check_cuda()
    try:
        report = replay_artifact(args.artifact, executor=args.executor)
    except CaptureFormatError as exc:
        raise UsageError(str(exc) if str(exc).startswith(args.artifact) else f"{args.artifact}: {exc}") from None
    print(report.summary())
    return EXIT_CLEAN if report.ok else EXIT_FINDINGS


def _check_cuda() -> None:
    """--executor cuda where there is no GPU is an environment error (2), not a finding (1)."""
    import torch
    if not torch.cuda.is_available():
        raise UsageError("--executor cuda needs a CUDA GPU and a CUDA build of torch; none is available here "
                         "(use --executor interpreter)")


# -- tables -----------------------------------------------------------------------------
def cmd_table(args) -> int:
    """Print tables over one or more run folders (or results.jsonl files)."""
    from torchsim_diff.report import tables
    from torchsim_diff.results.jsonl import find_results
    from torchsim_diff.report import tolerance
    kinds = {"summary": tables.summary_rows, "tolerance": tables.tolerance_rows,
             "route-tolerance": tolerance.route_tolerance_rows, "buckets": tables.bucket_rows, "coverage": tables.coverage_rows, "mix": tables.mix_rows,
             "args": tables.args_rows, "history": lambda _records: _history_rows(args.buckets),
             "timing": lambda _records: tables.timing_rows(_timing_kernels(args.dirs))}
    chosen = _split(args.tables) or (["tolerance"] if args.format == OPINFO else
                                     ["summary", "tolerance", "buckets", "coverage"])
    for name in chosen:
        if name not in kinds:
            raise UsageError(f"--tables: {name!r} is not one of {', '.join(kinds)}")
    if args.format == OPINFO and chosen != ["tolerance"]:
        raise UsageError(f"--format {OPINFO} writes the tolerance table only: add --tables tolerance")
    if "history" in chosen:
        _check_history(args.buckets)
    if chosen == ["timing"]:     # TOGSim timings live in timing.jsonl, with or without results
        print(tables.render(kinds["timing"](None), args.format, "Timing"))
        return EXIT_CLEAN
    files = find_results(args.dirs)
    if not files:
        raise UsageError(f"no results*.jsonl found under {', '.join(args.dirs)}")
    whole_page = args.format == "html" and not args.tables
    records = _table_records(files, whole=whole_page)
    if whole_page:
        from torchsim_diff.report.html_report import html_page
        print(html_page(records))
        return EXIT_CLEAN
    if args.format == OPINFO:
        print(tolerance.opinfo_text(tables.tolerance_rows(records)), end="")
        return EXIT_CLEAN
    print("\n\n".join(tables.render(kinds[name](records), args.format, name.title()) for name in chosen))
    return EXIT_CLEAN


def _table_records(files: list, *, whole: bool) -> list:
    """The records of `files`, read one at a time and each kept as the tables read it
    (tables.table_view), or whole for the HTML page; unreadable lines are counted in one warning."""
    from torchsim_diff.report.tables import table_view
    from torchsim_diff.results.jsonl import ReadLog, stream_records
    log, shared = ReadLog(), {}
    stream = stream_records(files, log)
    records = list(stream) if whole else [table_view(record, shared) for record in stream]
    if not records:
        raise UsageError(f"no records in {', '.join(files)}" + (f" ({log.summary()})" if log.skipped else ""))
    _warn(log.summary())
    return records


def _timing_kernels(dirs: list) -> list:
    from torchsim_diff.timing.kernel_timing import read_timings
    kernels, bad = read_timings(dirs)
    if bad:
        raise UsageError(bad)
    return kernels


def _history_rows(path: str) -> list:
    """The bucket history (the store `fuzz` and `export` use), oldest bucket first."""
    from torchsim_diff.triage.bucket_history import BucketStore, legacy_path, store_path
    if not any(os.path.exists(p) for p in (store_path(path), legacy_path(path))):
        raise UsageError(f"no bucket history at {path}; pass --buckets PATH")
    store = BucketStore(path, read_only=True)
    try:
        return [{"bucket": bucket, "route": row["route"], "kind": row["kind"], "op": row["op"], "count": row["count"],
                 "first seen": row["first_seen"], "nodes": row["size"][0], "message": str(row["message"] or "")[:80]}
                for bucket, row in store.buckets.items()]
    finally:
        store.close()


# -- parser -----------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from torchsim_diff.report.tables import FORMATS
    from torchsim_diff.triage.known_ledger import default_ledger
    parser = _Parser(prog="torchsim-diff", description="Differential fuzzing of PyTorch compiler routes.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("routes", help="list routes, whether they can run here, and why not")
    p.add_argument("--routes", type=opt.route_list, help="only these routes (comma-separated)")
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.set_defaults(func=cmd_routes)

    p = sub.add_parser("ops", help="list the ops the generator can use")
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.set_defaults(func=cmd_ops)

    p = sub.add_parser("fuzz", help="run a fuzz campaign", epilog=EXIT_STATUS_HELP)
    p.add_argument("--routes", type=opt.route_list, default="inductor",
                   help="comma-separated routes (default: inductor)")
    p.add_argument("--max-examples", type=opt.positive_int, default=None,
                   help="cases to generate (default: 100; with --budget alone, until the budget is spent)")
    p.add_argument("--budget", type=budget_seconds, default=None, metavar="DURATION",
                   help="stop drawing cases after this long, e.g. 600, 90s, 10m (default: none)")
    p.add_argument("--seed", type=int, default=0, help="Hypothesis seed: same seed, same cases (default: 0)")
    p.add_argument("--out", type=opt.out_folder, help="run folder (default: reports/run-<time>)")
    p.add_argument("--dtype", type=opt.fuzz_dtype, default="float32",
                   help="float32 (default), float16, bfloat16, int32, int64")
    p.add_argument("--max-nodes", type=opt.node_count, default=GRAPH_NODES,
                   help=f"most nodes per graph, at most {opt.MAX_NODES} (default: {GRAPH_NODES})")
    p.add_argument("--families", type=opt.name_list, help="only ops of these families (comma-separated)")
    p.add_argument("--ops", type=opt.name_list, help="only these ops (comma-separated)")
    from torchsim_diff.generate.switches import SPECIAL_MODES, SPECIAL_PERCENT
    p.add_argument("--special-values", nargs="?", const="always", default="mix", choices=SPECIAL_MODES,
                   help="NaN, Inf, -0.0, subnormals and huge values in float inputs: mix (the default: about "
                        f"{SPECIAL_PERCENT}%% of cases), always (also the flag alone), off")
    p.add_argument("--timeout", type=opt.positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help=f"seconds per case before 'timeout' (default: {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--route-option", action="append", metavar="ROUTE.KEY=VALUE",
                   help="route option, e.g. spike.vlen=512 (repeatable)")
    p.add_argument("--repeat", type=opt.repeat_count, default=1,
                   help=f"run each case N times (at most {opt.MAX_REPEAT}) on the same inputs; differences are "
                        f"'nondeterministic' (default: 1)")
    p.add_argument("--buckets", default=DEFAULT_HISTORY,
                   help="bucket history shared by runs, to tell new findings (default: reports/buckets.sqlite; "
                        "'none' to keep none)")
    p.add_argument("--known-bugs", default=None, metavar="DIR",
                   help="known-bug corpus entries: a failure whose reduced case has an entry's cause signature "
                        f"is recorded as known, not new (default: {LEDGER_DEFAULT_HELP}; 'none' for none)")
    p.add_argument("--no-self-check", action="store_true",
                   help="report new buckets without replaying them and running their repro.py first (faster; "
                        "a NEW bucket may then be a flake)")
    p.add_argument("--no-reduce", action="store_true",
                   help="bucket failures as found instead of reducing each new one first")
    p.add_argument("--reduce-budget", type=opt.non_negative_seconds, default=60.0, metavar="SECONDS",
                   help="base time to reduce one new failure before bucketing it: it grows with the case's "
                        "size and while the reducer makes progress, up to 5x (default: 60)")
    p.add_argument("--batch", type=opt.positive_int, default=1, metavar="N",
                   help="compile N cases together as one program (pays on inductor, whose cost is the C++ build); "
                        "failing cases are rerun alone, so verdicts stay per case (default: 1)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="run on a Ray cluster (its address, or 'local' to start one here); needs the [ray] extra")
    p.add_argument("--shards", type=opt.positive_int, default=None,
                   help="with --ray: shards of the campaign, each with its own seed and budget; the same --seed "
                        "and --shards give the same cases on any cluster (default: one per CPU of the cluster)")
    p.set_defaults(func=cmd_fuzz)

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

    p = sub.add_parser("export", help="write the reproducer bundle of a bucket")
    p.add_argument("bucket", help="bucket id (from a bucket table), a known entry corpora/known/CAUSE/X.json, "
                                  "or a root cause (its folder, or its name under --known-bugs)")
    p.add_argument("--to", required=True, type=opt.out_folder, help="folder to write the bundle into")
    p.add_argument("--all-shims", action="store_true",
                   help="triton: ship every interpreter shim instead of trying without each (faster)")
    p.add_argument("--no-bisect", action="store_true",
                   help="torch.compile bugs: leave out CompilerBisector's ablation (faster: it compiles tens of times)")
    p.add_argument("--from", dest="runs", nargs="+", help="run folders to search (default: the bucket history)")
    p.add_argument("--buckets", default=DEFAULT_HISTORY, help="bucket history (default: reports/buckets.sqlite)")
    p.add_argument("--known-bugs", default=default_ledger(),
                   help=f"the known-bug ledger a cause name is looked up in (default: {LEDGER_DEFAULT_HELP})")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("causes", help="list the known bugs by root cause: project, status, cases, upstream")
    p.add_argument("--known-bugs", default=default_ledger(),
                   help=f"the known-bug ledger (default: {LEDGER_DEFAULT_HELP})")
    p.add_argument("--format", choices=FORMATS, default="plain", help="table format (default: plain)")
    p.set_defaults(func=cmd_causes)

    p = sub.add_parser("kernel", help="kernel-level tools (Triton kernel captures)")
    kernel_sub = p.add_subparsers(dest="kernel_command", required=True, parser_class=_Parser)
    k = kernel_sub.add_parser("replay", help="replay a captured kernel launch and diff with its captured outputs")
    k.add_argument("artifact", help="a launch folder (launch.json + kernel.py) or a case's artifact folder")
    k.add_argument("--executor", choices=("interpreter", "cuda"), default="interpreter")
    k.set_defaults(func=cmd_kernel_replay)

    p = sub.add_parser("table", help="error-tolerance, bucket, coverage and summary tables of runs")
    p.add_argument("dirs", nargs="+", help="run folders or results.jsonl files")
    p.add_argument("--format", choices=(*FORMATS, OPINFO), default="plain",
                   help=f"{OPINFO}: PyTorch's toleranceOverride per op needing more than its dtype's default "
                        "(the tolerance table only)")
    p.add_argument("--tables", help="which tables: summary,tolerance,route-tolerance,buckets,coverage,mix,args,"
                                    "history,timing (default: summary,tolerance,buckets,coverage; route-tolerance: "
                                    "the tolerance each route needs and the ops that set it; timing: TOGSim's "
                                    "per-kernel figures from timing.jsonl files)")
    p.add_argument("--buckets", default=DEFAULT_HISTORY,
                   help="bucket history for the history table (default: reports/buckets.sqlite)")
    p.set_defaults(func=cmd_table)
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
        sys.stderr.write(f"torchsim-diff: error: {_one_line(exc)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        sys.stderr.write(f"torchsim-diff: {'terminated' if terminated else 'interrupted'}\n")
        return exit_status(signal_of(exc))


if __name__ == "__main__":
    sys.exit(main())
