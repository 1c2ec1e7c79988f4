"""torchsim-diff: differential fuzz testing of PyTorch compiler routes down to NPU simulators.

The folders, in pipeline order from the floor up. A module imports from its own floor and the
floors below; an import that runs back up is named in the importing folder's docstring, with
its reason, on a line "Up: <folder>: why" (tests/test_package_layout.py holds the code to
this map; `python benchmarks/import_figures.py` prints the figures):

    files bytecode bucket_claims delta    standard-library helpers every part may use
    results                                the words and records every part agrees on
    ops                                    the op registry
    case                                   the case model
    generate judge                         drawing cases; judging a result
    kernels                                Triton kernel launches: capture, replay, localise
    routes                                 the compiler routes
    worker                                 a route's cases in a worker subprocess
    buckets                                naming a failure; buckets kept; the known-bug ledger
    run                                    one case through a route to a verdict and a record
    timing                                 TOGSim: the kernels' timing and its checks
    report                                 tables, the HTML page, reproducer bundles
    triage                                 after a failure: reduce it, refine its cause, self-check it
    campaign                               front ends: the CLI's campaigns, pytest, Ray
    cli __main__                           the command line: cli/ holds a module per subcommand family
"""

__version__ = "0.1.0"
