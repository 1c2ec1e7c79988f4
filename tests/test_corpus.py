"""Replay corpora/ on every available route: seeds must pass, known bugs must still fail.

A seed that fails in a known bug's bucket is an expected failure (the known entry is the
strict witness of that bug); in any other bucket it fails the suite.
Known bugs are strict expected failures raising their own bucket's exception type: a bug
that stops reproducing (XPASS) or starts failing differently (another bucket) fails the
suite, so nothing changes unnoticed. Routes that cannot run here are skipped with the reason.
"""
import os

import pytest

from torchsim_diff.buckets.signatures import finding_type
from torchsim_diff.buckets.corpus import KNOWN, SEED, iter_entries
from torchsim_diff.triage.corpus_replay import replay_entry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPORA = os.path.join(REPO, "corpora")
ROUTES = os.environ.get("TORCHSIM_DIFF_CORPUS_ROUTES", "eager,inductor,triton,mlir,spike,triton-spike").split(",")
ENTRIES = [e for e, err in iter_entries([CORPORA]) if e is not None]
KNOWN_BUCKETS = {e.bucket for e in ENTRIES if e.kind == KNOWN}
CORRUPT = [err for e, err in iter_entries([CORPORA]) if err is not None]

pytestmark = [pytest.mark.slow, pytest.mark.corpus]


@pytest.fixture
def corpus_checker(route_checker):
    """The xdist worker's shared Checker (tests/conftest.py): its route workers are warm. A
    known bug's replay wants its verdict alone: localising a Triton one's divergent kernel
    would cost it seconds."""
    route_checker.leave_unlocalised(KNOWN_BUCKETS)
    return route_checker


def _require(checker, route):
    ok, reason, _ = checker.availability(route)
    if not ok:
        pytest.skip(f"route {route} unavailable: {reason}")


def test_corpus_has_no_corrupt_entries():
    assert not CORRUPT, "\n".join(str(e) for e in CORRUPT)


# In the README's test command each seed replays on one route, the routes taken in turn (seed k
# on route k mod 6), so every route replays seeds and every seed is replayed; the e2e set
# (.ci/run) replays each seed on the other routes. Seeds are passing cases: the fuzz pass
# already runs fresh cases on every route, and all of them on all routes was 124 s of CPU.
def _seed_params():
    seeds = [e for e in ENTRIES if e.kind == SEED]
    for index, entry in enumerate(seeds):
        for route in ROUTES:
            rotated_out = ROUTES[index % len(ROUTES)] != route
            yield pytest.param(entry, route, id=f"{entry.name}-{route}",
                               marks=[pytest.mark.e2e] if rotated_out else [])


@pytest.mark.parametrize("entry, route", list(_seed_params()))
def test_seed_entry_passes(corpus_checker, entry, route):
    _require(corpus_checker, route)
    outcome = replay_entry(corpus_checker, entry, route)
    if not outcome.ok and outcome.verdict.bucket in KNOWN_BUCKETS:
        pytest.xfail(f"hits known bug {outcome.verdict.bucket} (corpora/known)")
    assert outcome.ok, f"{entry.path} on {route}: {outcome.got}\n{outcome.verdict.message}"


# Known bugs of these routes replay in the e2e set (.ci/run): each compiles through Triton, the
# adapter and Spike, about a minute and a half of the README's test command in all. Known hangs
# replay there too: each waits its timeout out (10 s apiece).
E2E_REPLAY_ROUTES = frozenset({"triton-spike"})


def _known_params():
    for entry in ENTRIES:
        if entry.kind == KNOWN:
            marks = [pytest.mark.xfail(strict=True, raises=finding_type(entry.failure_kind, entry.bucket),
                                       reason=f"known bug {entry.bucket}: {entry.note}")]
            if entry.route in E2E_REPLAY_ROUTES or entry.failure_kind == "timeout":
                marks.append(pytest.mark.e2e)
            yield pytest.param(entry, id=entry.name, marks=marks)


@pytest.mark.parametrize("entry", list(_known_params()))
def test_known_bug_still_reproduces(corpus_checker, entry):
    _require(corpus_checker, entry.route)
    # A known hang says how long to wait for it (the default 120 s would be spent in full).
    verdict = corpus_checker.check(entry.case, entry.route, timeout_s=entry.raw.get("timeout_s"))
    verdict.raise_if_failed()


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.kind == KNOWN and e.cause], ids=lambda e: e.name)
def test_a_known_entrys_cause_is_a_cause_signature_of_its_route_and_kind(entry):
    """The cause is what a failure must have once reduced to be this bug: a cause signature
    (route|kind|what|trigger) of the entry's own route, whose kind is the entry's (or the
    wrong value a NaN reduces as)."""
    route, kind, *_what, trigger = entry.cause.split("|")
    assert route == entry.route and kind in (entry.failure_kind, "wrong_values"), entry.cause
    assert trigger and trigger not in ("output", "input"), entry.cause
