"""Time a case's kernels on TOGSim and check them (timing.kernel_timing), from the command line.

    python -m torchsim_diff.campaign.time_kernels CASE.json [--route spike] [--out DIR] [--timeout S]

Exit status: 0 every check passed or failed as a known defect, 1 a new failure, 2 bad input or
TOGSim unavailable (one line on stderr).
"""
from __future__ import annotations

import argparse
import sys
import tempfile

from torchsim_diff.buckets.known_defects import known_defects
from torchsim_diff.buckets.known_ledger import default_ledger
from torchsim_diff.report.tables import timing_table
from torchsim_diff.timing.kernel_timing import (ROUTE, ROUTES, TIMING_FILE, RouteUnavailable, Settings, hardware_of,
                                               new_failures, read_case, route_server, time_case, write_timings)
from torchsim_diff.timing.togsim_runner import DEFAULT_TIMEOUT_S, Unavailable, find_togsim


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="time a case's kernels on TOGSim and check them")
    parser.add_argument("case", help="a case JSON file (a corpus entry or a bare case)")
    parser.add_argument("--route", choices=ROUTES, default=ROUTE,
                        help="triton-spike: its captured launches; spike: its lowered module's linalg ops")
    parser.add_argument("--out", help="folder for runs, buckets and timing.json (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per TOGSim run")
    args = parser.parse_args(argv)
    install = find_togsim()
    if isinstance(install, Unavailable):
        return _error(install.reason)
    try:
        case = read_case(args.case)
    except ValueError as bad:
        return _error(str(bad))
    out = args.out or tempfile.mkdtemp(prefix="togsim-kernels-")
    settings = Settings(install, hardware_of(install), out, args.timeout, known_defects(default_ledger()))
    try:
        with route_server(args.route) as server:
            reply, timings, skipped = time_case(case, settings, server, args.route)
    except RouteUnavailable as why:
        return _error(str(why))
    write_timings(out, timings)
    outcome = "ok" if reply.get("ok") else f"{reply.get('kind')}: {str(reply.get('message'))[:160]}"
    print(f"route {args.route}: {outcome}")
    print(timing_table([t.row() for t in timings], "md"))
    for name, why in skipped:
        print(f"not timed: {name}: {why}")
    print(f"runs, buckets and {TIMING_FILE} in {out}")
    return 1 if new_failures(timings) else 0


def _error(message: str) -> int:
    print(f"togsim: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
