"""pytest plugin: fuzz suites as test items, one warm checker per xdist worker, one merged table.

Options (see `pytest --help`, group torchsim-diff): --routes, --fuzz-examples, --fuzz-seed,
--fuzz-dtypes, --fuzz-shards, --report-dir, --fuzz-timeout, --fuzz-budget, --fuzz-route-weights,
--known-bugs, --fuzz-reduce-budget, --fuzz-progress.

The controller probes the routes once: an unavailable route is named in the header with
its reason and gets no items. With --fuzz-budget, every route gets its share of the drawing
time from the start (torchsim_diff.campaign.route_shares), its items stop drawing cases when
their part of it is spent (torchsim_diff.campaign.budget), Hypothesis does not shrink (the
reducer does, in the budget's closing share), and per-route timeouts adapt to the run
(torchsim_diff.run.adaptive_timeouts).

Live progress (torchsim_diff.campaign.progress, --fuzz-progress) is off in a plain test run, so
nothing comes between pytest's dots; a budget or -v turns it on: tqdm bars on a terminal, whole
plain lines elsewhere. While it is on pytest reports one line per item (as with -v), and the
progress goes between those lines (pytest_controller._ProgressHooks).

Hypothesis profiles registered here: `torchsim-ci` (few examples, fixed seeds, no database,
no deadline), `torchsim-default` (a useful campaign; what fuzz items use when no profile is
named) and `torchsim-long` (thousands per item); `ci` and `long` remain as aliases. Pick one
with Hypothesis's own `--hypothesis-profile`. Other suites' profiles are never changed.

Each xdist worker keeps one Checker (warm route workers, own Inductor caches) and writes
its own results-<worker>.jsonl in the run's report folder; the controller prints the
merged tables at the end. A failing case raises its bucket's own exception type, so
Hypothesis shrinks each bug separately; a case in a known bucket (corpora/known) is
recorded and not raised, and so is one in a bucket that another item raises already
(torchsim_diff.bucket_claims): one bug ends one item, not every item that meets it.

Faults are survived: a case whose route worker was killed from outside is recorded as
`tool_error` and skipped, never raised (worker.client.RouteWorker.collect). In a fuzz run
(--routes given, as scripts/fuzz.sh does) SIGTERM ends the session as Ctrl-C does: pytest
reports it interrupted (exit 2) after the torchsim-diff report, with every record kept, and
the route workers are killed rather than waited for.

The plugin is three modules, as pytest-xdist's are: this one (options, profiles, the hooks
that register the session), the worker side (campaign.pytest_worker: a process running fuzz
items) and the controller side (campaign.pytest_controller: header, progress, the report).
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from torchsim_diff import bytecode
from torchsim_diff.campaign import options
from torchsim_diff.campaign.pytest_controller import FuzzSession, XdistHooks
from torchsim_diff.campaign.pytest_worker import DEFAULT_BATCHES, DEFAULT_ROUTES
from torchsim_diff.campaign.progress import MODES
from torchsim_diff.campaign.route_shares import parse_batches, parse_weights
from torchsim_diff.routes.base import DEFAULT_TIMEOUT_S

# Profiles under our own names: registering them changes no other suite's settings, and
# one is loaded only when --hypothesis-profile names it. Fuzz items without one get
# torchsim-default through FuzzSession.settings(), applied to those items alone.
PROFILES = {
    "torchsim-ci": dict(max_examples=6, deadline=None, database=None, print_blob=True,
                        suppress_health_check=list(HealthCheck)),
    "torchsim-default": dict(max_examples=40, deadline=None, print_blob=True,
                             suppress_health_check=list(HealthCheck)),
    "torchsim-long": dict(max_examples=1000, deadline=None, print_blob=True,
                          suppress_health_check=list(HealthCheck)),
}
# Earlier names, kept working unless another plugin registered them first. Hypothesis's own
# `default` is never touched.
ALIASES = {"ci": "torchsim-ci", "long": "torchsim-long"}


def _register_profiles() -> None:
    from hypothesis.errors import InvalidArgument
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)
    for alias, name in ALIASES.items():
        try:
            settings.get_profile(alias)
        except InvalidArgument:
            settings.register_profile(alias, **PROFILES[name])


_register_profiles()

SESSION_NAME = "torchsim-diff-session"


def pytest_addoption(parser):
    group = parser.getgroup("torchsim-diff", "differential fuzzing of compiler routes")
    group.addoption("--routes", default=None,
                    help=f"comma-separated routes the fuzz suites run on (default: {DEFAULT_ROUTES})")
    group.addoption("--fuzz-examples", type=int, default=None,
                    help="examples per fuzz item (default: the Hypothesis profile's max_examples; under "
                         "--fuzz-budget, as many as the budget allows)")
    group.addoption("--fuzz-max-nodes", type=int, default=None,
                    help="the most nodes a fuzz item's graph has (default: the generation policy's graph_nodes; "
                         "as `fuzz --max-nodes`)")
    group.addoption("--fuzz-seed", type=int, default=None,
                    help="base seed; the ci profile uses 0, others draw one and print it")
    group.addoption("--fuzz-dtypes", default="float32", help="comma-separated dtypes (default: float32)")
    group.addoption("--fuzz-shards", type=int, default=1, help="items per route x family x dtype (default: 1)")
    group.addoption("--report-dir", default=None, help="run folder (default: reports/pytest-<time>)")
    group.addoption("--fuzz-timeout", type=float, default=DEFAULT_TIMEOUT_S,
                    help=f"the most seconds a case may take; each route's limit adapts below it "
                         f"(default: {DEFAULT_TIMEOUT_S:g})")
    group.addoption("--fuzz-budget", default=None,
                    help="time for the whole run, e.g. 600, 90s, 10m: items stop drawing cases when their "
                         "share is spent, a fifth is kept for shrinking (default: no budget)")
    group.addoption("--fuzz-route-weights", default=None,
                    help="under --fuzz-budget, each route's weight in the drawing time, e.g. triton-spike=2,"
                         "inductor=0.5; routes not named weigh 1 (default: equal shares)")
    group.addoption("--fuzz-batch", default=DEFAULT_BATCHES,
                    help="under --fuzz-budget, cases a route compiles as one program (run.batch: verdicts stay "
                         f"those of solo runs), e.g. inductor=4,triton=2; routes not named: 1 (default: {DEFAULT_BATCHES})")
    group.addoption("--known-bugs", default=None, help="folder of known-bug corpus entries (default: corpora/known "
                    "under the rootdir, else the copy installed with torchsim-diff)")
    group.addoption("--fuzz-progress", default="auto", choices=MODES,
                    help="live progress per route (cases, cases/s, failures, buckets, time left): bar (tqdm bars on "
                         "the terminal), lines (a plain block every 10 s between pytest's lines) or off; auto: on "
                         "under --fuzz-budget or -v, bars on a terminal, lines elsewhere; off in a plain test run. "
                         "While on, pytest reports one line per item (as with -v) (default: auto)")
    group.addoption("--fuzz-reduce-budget", type=float, default=60.0,
                    help="seconds to reduce each new failure at session end before bucketing it (0: bucket "
                         "failures as found; default: 60)")


# Option -> check of its value (torchsim_diff.campaign.options), run before anything starts.
OPTION_CHECKS = {"--routes": options.route_list, "--fuzz-dtypes": options.dtype_list,
                 "--fuzz-examples": options.positive_int, "--fuzz-shards": options.positive_int,
                 "--fuzz-max-nodes": options.positive_int,
                 "--fuzz-timeout": options.positive_seconds, "--fuzz-reduce-budget": options.non_negative_seconds}


def _validate_options(config) -> None:
    """One line and pytest's usage exit for a bad option value, before any item runs."""
    for name, check in OPTION_CHECKS.items():
        value = config.getoption(name)
        if value is None:
            continue
        try:
            check(str(value))
        except options.BadOption as exc:
            raise pytest.UsageError(f"{name}={value!r}: {exc}") from None
    _validate_weights(config)
    _validate_report_dir(config.getoption("--report-dir"))


def _validate_report_dir(folder) -> None:
    """--report-dir as `fuzz --out` is checked: a folder this run may write, whose paths the run
    writes are absent or what it makes there, never a symbolic link (campaign.run_folder)."""
    from torchsim_diff.campaign import run_folder
    if folder is None:
        return
    try:
        options.out_folder(folder)
    except options.BadOption as exc:
        raise pytest.UsageError(f"--report-dir={folder!r}: {exc}") from None
    why = run_folder.refusal(folder)
    if why:
        raise pytest.UsageError(f"--report-dir: {why}")


def _validate_weights(config) -> None:
    text = config.getoption("--fuzz-route-weights")
    try:
        weights = parse_weights(text)
    except options.BadOption as exc:
        raise pytest.UsageError(f"--fuzz-route-weights={text!r}: {exc}") from None
    routes = config.getoption("--routes") or DEFAULT_ROUTES
    unrun = [route for route in weights if route not in routes.split(",")]
    if unrun:
        raise pytest.UsageError(f"--fuzz-route-weights={text!r}: route {unrun[0]!r} is not among --routes ({routes})")
    batches = config.getoption("--fuzz-batch")
    try:
        parse_batches(batches)
    except options.BadOption as exc:
        raise pytest.UsageError(f"--fuzz-batch={batches!r}: {exc}") from None


def pytest_configure(config):
    _validate_options(config)
    bytecode.redirect_this_process()       # before the route probe and xdist's workers import torch
    session = FuzzSession(config)
    config.pluginmanager.register(session, SESSION_NAME)
    if session.progress_mode != "off":
        # pytest's dot line stays open while items run; with one line per item the progress
        # can go between pytest's lines (and bars below them) without breaking one.
        config.option.verbose = max(config.option.verbose, 1)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistHooks(session), "torchsim-diff-xdist")


def pytest_generate_tests(metafunc):
    session = metafunc.config.pluginmanager.get_plugin(SESSION_NAME)
    if "fuzz_route" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_route", session.runnable_routes())
    if "fuzz_dtype" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_dtype", session.dtypes)
    if "fuzz_shard" in metafunc.fixturenames:
        metafunc.parametrize("fuzz_shard", range(session.shards))


@pytest.fixture(scope="session")
def torchsim_session(request):
    """The run's FuzzSession: `check(case, route)`, `fuzz_seed(...)`, `settings()`."""
    return request.config.pluginmanager.get_plugin(SESSION_NAME)
