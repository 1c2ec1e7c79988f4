"""`torchsim-diff export` and `causes`: a reproducer bundle of a bucket (its smallest case), a
known corpus entry, a root cause or a TOGSim defect; the known bugs listed by root cause."""
from __future__ import annotations

import os
import shutil

from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.campaign import options as opt
from torchsim_diff.cli.usage import (DEFAULT_HISTORY, EXIT_CLEAN, EXIT_FINDINGS, LEDGER_DEFAULT_HELP, UsageError,
                                     check_history, existing, warn)
from torchsim_diff.report import tables
from torchsim_diff.report.standing import cause_status
from torchsim_diff.report.tables import FORMATS
from torchsim_diff.results.jsonl import (ReadLog, UnsafeArtifacts, artifact_folder, find_results, run_folder_of,
                                         stream_records)
from torchsim_diff.results.record import BadRecord

# Imports inside functions are the slow ones (torch alone takes about 2 s): `--help` starts without them.


# -- export ---------------------------------------------------------------------------
def cmd_export(args) -> int:
    """Write the reproducer bundle of one bucket (its smallest case), a known entry or a root
    cause to a folder."""
    from torchsim_diff.buckets.known_defects import is_defect_folder
    from torchsim_diff.buckets.causes import is_cause_folder
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
    from torchsim_diff.buckets.bucket_history import smallest_per_bucket
    existing(args.runs, "run folder or results file", "--from")
    log = ReadLog()
    where = ", ".join(args.runs)
    records = (r for r in stream_records(find_results(args.runs), log) if r.bucket == args.bucket)
    record = smallest_per_bucket(records).get(args.bucket)
    if record is None and args.bucket in log.refused:
        raise UsageError(f"bucket {args.bucket} refused: {log.refused[args.bucket]}")
    if record is None:
        raise UsageError(f"bucket {args.bucket!r} not found in {where}"
                         + (f" ({log.summary()})" if log.skipped else ""))
    warn(log.summary())
    return record, where


def _history_record(args) -> tuple:
    """(the bucket's smallest record in the bucket history, where), checked like a results line."""
    from torchsim_diff.buckets.bucket_history import BucketStore, legacy_path, store_path
    check_history(args.buckets)
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


def _export_entry(args) -> int:
    """The bundle of a known corpus entry (export corpora/known/X.json --to DIR)."""
    from torchsim_diff.buckets.corpus import CorruptEntry, read_entry
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
    from torchsim_diff.buckets.causes import read_cause
    from torchsim_diff.report.cause_analysis import analysis
    from torchsim_diff.buckets.corpus import CorruptEntry
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
    from torchsim_diff.buckets.projects import PROJECTS
    from torchsim_diff.report import mlir_opt_bundle
    from torchsim_diff.report.bundles import claim_folder, write_manifest
    from torchsim_diff.report.cause_analysis import analysis
    from torchsim_diff.report.issue_text import THREAD_DRAFTS, quoted_run
    from torchsim_diff.report.issue_title import BundleError
    from torchsim_diff.report.repro_runs import run_repro, write_text
    try:
        claim_folder(args.to)
        mlir_opt_bundle.write_mlir_bundle(cause.folder, cause.mlir_opt, args.to, cause.title)
    except (BundleError, mlir_opt_bundle.BadMlirRepro, OSError) as exc:
        raise UsageError(str(exc)) from None
    status, out, err = run_repro(args.to)
    quoted = quoted_run(args.to, status, out, 300, err)
    upstream = cause.upstream if cause.status in THREAD_DRAFTS else ""
    head = THREAD_DRAFTS[cause.status].format(url=upstream) if upstream else \
        f"<!-- File at {PROJECTS[cause.project].file_at} -->"
    text = mlir_opt_bundle.render_issue(cause.title, head, analysis(cause, None), cause.mlir_opt, args.to, quoted)
    write_text(os.path.join(args.to, "ISSUE.md"), text)
    write_manifest(args.to)
    print(f"bundle for cause {cause.name} ({cause.project}, {cause.status}; {cause.mlir_opt.file}) written to {args.to}")
    return EXIT_CLEAN


def _export_defect(folder: str, args) -> int:
    """The bundle of a known TOGSim defect: its tile graph, config, the literal command and
    ISSUE.md in PyTorchSim's terms (report.togsim_bundle)."""
    from torchsim_diff.report.bundles import BundleError, claim_folder, write_manifest
    from torchsim_diff.report.togsim_bundle import NotADefect, write_defect_bundle
    from torchsim_diff.buckets.known_defects import BadDefect
    try:
        written = write_defect_bundle(folder, args.to, claim_folder)
        write_manifest(written)
    except (BadDefect, NotADefect, BundleError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(f"bundle for TOGSim defect {os.path.basename(os.path.normpath(folder))} written to {written}")
    return EXIT_CLEAN


def cmd_causes(args) -> int:
    """List the known bugs by root cause: project, status, cases, upstream; the ledger's TOGSim
    defects (buckets.known_defects) too, each one cause with its minimal TOG as its case."""
    from torchsim_diff.buckets.known_defects import BadDefect, known_defects
    from torchsim_diff.buckets.causes import read_causes
    causes, problems = read_causes(args.known_bugs)
    try:
        defects = sorted({d.name: d for d in known_defects(args.known_bugs).values()}.values(), key=lambda d: d.name)
    except BadDefect as exc:
        defects, problems = [], problems + [str(exc)]
    for line in problems:
        warn(line)
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
    others = tables.render([{k: v for k, v in row.items() if k != "title"} for row in rows], "plain")
    room = max(40, shutil.get_terminal_size().columns - max(map(len, others.splitlines())) - 2)
    return [{**row, "title": row["title"] if len(row["title"]) <= room else row["title"][:room - 1] + "…"}
            for row in rows]


# -- parsers ---------------------------------------------------------------------------------
def add_export_parser(sub) -> None:
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


def add_causes_parser(sub) -> None:
    p = sub.add_parser("causes", help="list the known bugs by root cause: project, status, cases, upstream")
    p.add_argument("--known-bugs", default=default_ledger(),
                   help=f"the known-bug ledger (default: {LEDGER_DEFAULT_HELP})")
    p.add_argument("--format", choices=FORMATS, default="plain", help="table format (default: plain)")
    p.set_defaults(func=cmd_causes)
