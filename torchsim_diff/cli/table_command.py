"""`torchsim-diff table`: error-tolerance, bucket, coverage, summary and other tables of run
folders (or results files), the whole HTML page, PyTorch's toleranceOverride entries, the bucket
history and TOGSim's per-kernel timings."""
from __future__ import annotations

import os

from torchsim_diff.cli.usage import DEFAULT_HISTORY, EXIT_CLEAN, UsageError, check_history, split_list, warn
from torchsim_diff.report import tables, tolerance
from torchsim_diff.report.tables import FORMATS, table_view
from torchsim_diff.results.jsonl import ReadLog, find_results, stream_records

OPINFO = "opinfo"      # `table --format`: the tolerance table as PyTorch's toleranceOverride entries


# -- tables -----------------------------------------------------------------------------
def cmd_table(args) -> int:
    """Print tables over one or more run folders (or results.jsonl files)."""
    kinds = {"summary": tables.summary_rows, "tolerance": tables.tolerance_rows,
             "route-tolerance": tolerance.route_tolerance_rows, "buckets": tables.bucket_rows, "coverage": tables.coverage_rows, "mix": tables.mix_rows,
             "args": tables.args_rows, "history": lambda _records: _history_rows(args.buckets),
             "timing": lambda _records: tables.timing_rows(_timing_kernels(args.dirs))}
    chosen = split_list(args.tables) or (["tolerance"] if args.format == OPINFO else
                                     ["summary", "tolerance", "buckets", "coverage"])
    for name in chosen:
        if name not in kinds:
            raise UsageError(f"--tables: {name!r} is not one of {', '.join(kinds)}")
    if args.format == OPINFO and chosen != ["tolerance"]:
        raise UsageError(f"--format {OPINFO} writes the tolerance table only: add --tables tolerance")
    if "history" in chosen:
        check_history(args.buckets)
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
    log, shared = ReadLog(), {}
    stream = stream_records(files, log)
    records = list(stream) if whole else [table_view(record, shared) for record in stream]
    if not records:
        raise UsageError(f"no records in {', '.join(files)}" + (f" ({log.summary()})" if log.skipped else ""))
    warn(log.summary())
    return records


def _timing_kernels(dirs: list) -> list:
    from torchsim_diff.timing.kernel_timing import read_timings
    kernels, bad = read_timings(dirs)
    if bad:
        raise UsageError(bad)
    return kernels


def _history_rows(path: str) -> list:
    """The bucket history (the store `fuzz` and `export` use), oldest bucket first."""
    from torchsim_diff.buckets.bucket_history import BucketStore, legacy_path, store_path
    if not any(os.path.exists(p) for p in (store_path(path), legacy_path(path))):
        raise UsageError(f"no bucket history at {path}; pass --buckets PATH")
    store = BucketStore(path, read_only=True)
    try:
        return [{"bucket": bucket, "route": row["route"], "kind": row["kind"], "op": row["op"], "count": row["count"],
                 "first seen": row["first_seen"], "nodes": row["size"][0], "message": str(row["message"] or "")[:80]}
                for bucket, row in store.buckets.items()]
    finally:
        store.close()


# -- parser ----------------------------------------------------------------------------------
def add_table_parser(sub) -> None:
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
