"""Fuzz TOGSim directly: Hypothesis-drawn TOGs and NPU configs through TOGSim and every check.

    TORCHSIM_DIFF_TOGSIM=path/to/Simulator .venv/bin/python benchmarks/fuzz_togsim.py --budget 600

Each example is a kernel tiling and a config (`torchsim_diff.timing.tog_strategies`), examined by
`torchsim_diff.timing.fuzz_example.examine` (TOGSim runs of it and of its variants, and the
checks). A failure never seen before in this campaign stops the round and Hypothesis shrinks it
to the smallest tiling and config that fail the same way; the campaign then goes on, drawing
afresh, until the budget is spent. Prints pass/fail counts per check and each finding, reduced,
with the command that reproduces it; --out writes them as JSON. The configs are drawn, so
TORCHSIM_DIFF_TOGSIM_CONFIG is not used.
Exit status: 0 no finding, 1 findings, 2 TOGSim unavailable or bad arguments.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import time

from hypothesis import HealthCheck, Phase, given, seed, settings

from torchsim_diff.timing.fuzz_example import examine
from torchsim_diff.buckets.known_defects import known_defects
from torchsim_diff.timing.togsim_buckets import NOT_RUN, bucket_key
from torchsim_diff.timing.tog_strategies import hardware_configs, tilings
from torchsim_diff.timing.togsim_runner import TOGSimInstall, Unavailable, find_togsim
from torchsim_diff.buckets.known_ledger import default_ledger


class _NewFinding(Exception):
    pass


class _BudgetSpent(BaseException):
    """Not an Exception: Hypothesis lets it through at once instead of shrinking it."""


@dataclasses.dataclass
class Campaign:
    install: object
    timeout_s: float
    deadline: float
    max_tiles: int
    counts: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    findings: dict = dataclasses.field(default_factory=dict)
    known: dict = dataclasses.field(default_factory=dict)       # bucket key -> KnownDefect
    known_hits: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    examples: int = 0

    def round(self, round_seed: int) -> bool:
        """Draw until a new finding (shrunk, recorded: True) or the budget ends (False)."""
        state = {"target": None, "smallest": None}

        @seed(round_seed)
        @settings(max_examples=10 ** 6, deadline=None, database=None, derandomize=False,
                  phases=[Phase.generate, Phase.shrink], suppress_health_check=list(HealthCheck))
        @given(tilings(self.max_tiles), hardware_configs())
        def explore(tiling, hardware):
            if time.monotonic() > self.deadline:
                if state["target"] is None:
                    raise _BudgetSpent
                return      # shrinking: what is smallest so far stands
            verdicts = examine(self.install, tiling, hardware, self.timeout_s)
            failing = {signature(v): v for v in verdicts if not v.passed}
            if state["target"] is None:
                self.examples += 1
                for verdict in verdicts:
                    self.counts[verdict.check]["pass" if verdict.passed else "fail"] += 1
                self.known_hits.update(self.known[s].name for s in failing if s in self.known)
                new = [s for s in failing if s not in self.findings and s not in self.known]
                state["target"] = new[0] if new else None
            if state["target"] in failing:
                state["smallest"] = (tiling, hardware, failing[state["target"]])
                raise _NewFinding(state["target"])

        try:
            explore()
        except _BudgetSpent:
            return False
        except _NewFinding:
            tiling, hardware, verdict = state["smallest"]
            self.findings[state["target"]] = {"check": verdict.check, "message": verdict.message,
                                              "figures": verdict.figures, "tiling": repr(tiling),
                                              "hardware": repr(hardware)}
            return True
        return False


def signature(verdict) -> str:
    """A finding's identity: its bucket key (check, run outcome, normalised message)."""
    return bucket_key(verdict, verdict.figures.get("outcome", NOT_RUN))


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=600.0, help="seconds (default 600)")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per TOGSim run (default 30)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tiles", type=int, default=4, help="tiles per dim at most (default 4)")
    parser.add_argument("--out", help="write the findings and counts here as JSON")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    install = find_togsim()
    if isinstance(install, Unavailable):
        print(f"fuzz_togsim: {install.reason}", file=sys.stderr)
        return 2
    started = time.monotonic()
    campaign = Campaign(TOGSimInstall(install.binary), args.timeout, started + args.budget, args.max_tiles,
                        known=known_defects(default_ledger()))
    round_seed = args.seed
    while time.monotonic() < campaign.deadline and campaign.round(round_seed):
        round_seed += 1
    report(campaign, time.monotonic() - started)
    if args.out:
        with open(args.out, "w") as out:
            json.dump({"examples": campaign.examples, "counts": {k: dict(v) for k, v in campaign.counts.items()},
                       "findings": campaign.findings, "known": dict(campaign.known_hits)}, out, indent=1, default=str)
    return 1 if campaign.findings else 0


def report(campaign: Campaign, seconds: float) -> None:
    print(f"{campaign.examples} examples in {seconds:.0f} s")
    print(f"{'check':<24}{'pass':>8}{'fail':>8}")
    for check, counter in sorted(campaign.counts.items()):
        print(f"{check:<24}{counter['pass']:>8}{counter['fail']:>8}")
    for name, hits in sorted(campaign.known_hits.items()):
        print(f"KNOWN {name}: {hits} example(s)")
    for name, finding in campaign.findings.items():
        print(f"\nFINDING {name}\n  {finding['message']}\n  tiling:   {finding['tiling']}\n  hardware: {finding['hardware']}")


if __name__ == "__main__":
    sys.exit(main())
