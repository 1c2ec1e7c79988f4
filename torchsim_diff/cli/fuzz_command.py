"""`torchsim-diff fuzz`: a campaign's options checked together before any work starts, the
campaign run (here, or in shards on a Ray cluster), and its summary, buckets and HTML report."""
from __future__ import annotations

import os
import re
import signal
import sys
import time

from torchsim_diff.campaign import options as opt
from torchsim_diff.campaign import run_folder
from torchsim_diff.campaign.budget import budget_seconds
from torchsim_diff.campaign.interrupts import exit_status, signal_of
from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.cli.usage import (DEFAULT_HISTORY, EXIT_CLEAN, EXIT_FINDINGS, EXIT_STATUS_HELP, EXIT_UNTESTED,
                                     EXIT_USAGE, LEDGER_DEFAULT_HELP, UsageError, check_history, route_or_usage)
from torchsim_diff.generate.switches import GRAPH_NODES, SPECIAL_MODES, SPECIAL_PERCENT
from torchsim_diff.report.standing import Standing
from torchsim_diff.report.tables import bucket_rows, new_bucket_rows, render, summary_rows, unconfirmed_lines
from torchsim_diff.results.kinds import Status
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S

# Imports inside functions are the slow ones (torch and Hypothesis take seconds): `--help` starts without them.
UNBOUNDED_EXAMPLES = 10**9       # --budget without --max-examples: cases until the budget is spent


def _default_out() -> str:
    return os.path.join("reports", time.strftime("run-%Y%m%d-%H%M%S"))


# -- fuzz -------------------------------------------------------------------------------
def cmd_fuzz(args) -> int:
    """Run a campaign; print a summary table; exit with a status of EXIT_STATUS_HELP."""
    from torchsim_diff.campaign.fuzz import CampaignResult, settle_told
    from torchsim_diff.generate.policy import InvalidPolicy
    from torchsim_diff.generate.strategies import InvalidArgument
    opts = None
    try:
        _check_fuzz(args)
        opts = _campaign_options(args)
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
    history = _history_buckets(opts.bucket_store) if opts.bucket_store else {}
    return Standing.of_run(result.new_buckets, result.unconfirmed, known_folder=opts.known_bugs, history=history)


def _history_buckets(path: str) -> dict:
    """bucket -> its row in the history at `path` (BucketStore.buckets), read read-only."""
    from torchsim_diff.buckets.bucket_history import BucketStore
    store = BucketStore(path, read_only=True)
    try:
        return store.buckets
    finally:
        store.close()


def _write_html_report(out_dir: str, result, standing=None) -> str:
    """The run's report folder (report.html, a page per bucket), as a pytest campaign writes it."""
    from torchsim_diff.report.html_report import write_report
    new_rows = new_bucket_rows(result.records, result.new_buckets, result.bundles)
    return write_report(out_dir, result.records, new_rows=new_rows, bundles=result.bundles, standing=standing)


def _max_examples(args) -> int:
    """--max-examples; unbounded under --budget alone (the budget ends the run), else 100."""
    if args.max_examples is not None:
        return args.max_examples
    return UNBOUNDED_EXAMPLES if args.budget else 100


def _counts(result) -> str:
    """Cases drawn, how many of their route runs were skipped, and routes abandoned."""
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
        route_or_usage(route)
    _check_filters(args)
    if args.known_bugs not in (None, "none") and not os.path.isdir(args.known_bugs):
        what = "is not a folder" if os.path.exists(args.known_bugs) else "does not exist"
        raise UsageError(f"--known-bugs {args.known_bugs} {what}; pass a folder of known-bug corpus entries "
                         f"(e.g. corpora/known) or 'none'")
    _check_run_folder(args)
    if args.buckets != "none":
        check_history(args.buckets)
        _check_history_writable(args.buckets)


def _check_run_folder(args) -> None:
    """--out, or its default in the current folder, and the paths the run writes inside it
    (campaign.run_folder): all checked before any work, none found wrong after the campaign."""
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


def _check_history_writable(path: str) -> None:
    """A campaign adds to its bucket history: the file (and its folder, where SQLite keeps its
    journal) must be writable, or the run would end at its first finding."""
    from torchsim_diff.buckets.bucket_history import store_path
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
        route_or_usage(route)
        if route not in args.routes:
            raise UsageError(f"--route-option {item!r} is for route {route}, which --routes "
                             f"{','.join(args.routes)} does not run")
        if not _OPTION_KEY.fullmatch(name):
            raise UsageError(f"--route-option {item!r}: {name!r} is not an option name (letters, digits and _); "
                             f"e.g. spike.vlen=512")
        options.setdefault(route, {})[name] = int(value) if value.isascii() and value.isdigit() else value
    for route, chosen in options.items():
        cls = route_or_usage(route)
        try:
            cls.check_options(chosen)
            cls(chosen)                         # routes check their option values when built
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--route-option for {route}: {exc}") from None
    return options


# -- parser ----------------------------------------------------------------------------------
def add_fuzz_parser(sub) -> None:
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
