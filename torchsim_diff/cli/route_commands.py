"""`torchsim-diff routes`, `ops` and `kernel replay`: what can run here, what can be drawn, and
one captured kernel launch replayed."""
from __future__ import annotations

import concurrent.futures
import os
import tempfile

from torchsim_diff.campaign import options as opt
from torchsim_diff.cli.usage import EXIT_CLEAN, EXIT_FINDINGS, CliParser, UsageError
from torchsim_diff.report.tables import FORMATS, render
from torchsim_diff.routes import route_class, route_names

# Imports inside functions are the slow ones (torch alone takes about 2 s): `--help` starts without them.


# -- routes / ops -----------------------------------------------------------------------
def cmd_routes(args) -> int:
    """List every route with its availability and reason, probed in its own worker."""
    from torchsim_diff.run.checker import Checker
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
    rows = [{"op": s.name, "family": s.family, "dtypes": s.dtypes, "mutates": s.mutates}
            for s in all_ops().values()]
    print(render(rows, args.format))
    return EXIT_CLEAN


# -- kernel replay ----------------------------------------------------------------------
def cmd_kernel_replay(args) -> int:
    """Replay one captured kernel launch on its captured inputs; diff against its outputs."""
    from torchsim_diff.kernels.capture import CaptureFormatError
    from torchsim_diff.routes.triton.launch_replay import replay_artifact
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


# -- parsers ---------------------------------------------------------------------------------
def add_routes_parser(sub) -> None:
    p = sub.add_parser("routes", help="list routes, whether they can run here, and why not")
    p.add_argument("--routes", type=opt.route_list, help="only these routes (comma-separated)")
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.set_defaults(func=cmd_routes)


def add_ops_parser(sub) -> None:
    p = sub.add_parser("ops", help="list the ops the generator can use")
    p.add_argument("--format", choices=FORMATS, default="plain")
    p.set_defaults(func=cmd_ops)


def add_kernel_parser(sub) -> None:
    p = sub.add_parser("kernel", help="kernel-level tools (Triton kernel captures)")
    kernel_sub = p.add_subparsers(dest="kernel_command", required=True, parser_class=CliParser)
    k = kernel_sub.add_parser("replay", help="replay a captured kernel launch and diff with its captured outputs")
    k.add_argument("artifact", help="a launch folder (launch.json + kernel.py) or a case's artifact folder")
    k.add_argument("--executor", choices=("interpreter", "cuda"), default="interpreter")
    k.set_defaults(func=cmd_kernel_replay)
