"""Campaigns across machines on Ray: shards on actors, one driver that writes everything.

    torchsim-diff fuzz --ray local --routes inductor --max-examples 400 --seed 1
    torchsim-diff fuzz --ray HEAD_HOST:6379 --shards 64 --routes inductor,triton --max-examples 5000

The campaign is cut into shards. Shard i draws its own cases with a Hypothesis seed derived
from --seed and i, and has its own budget (its share of --max-examples), so the same --seed
and --shards give the same cases however many nodes run them. One actor per CPU slot keeps a
warm Checker (a route worker per route) and runs shards one case at a time; each case's
records go back to the driver as soon as they are made. The driver alone writes
results.jsonl, the bucket history and the bundles (failing cases' artifacts travel with
their records). A lost node keeps the records it already sent: the rest of each shard it was
running goes back in the queue, is drawn again from the shard's seed on another actor, which
skips the cases already recorded, and the summary names those shards.

Ray is an optional extra: ``pip install 'torchsim-diff[ray]'``.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import os
import shutil
import signal
import socket
import sys
import tarfile
import tempfile
import time

from torchsim_diff.campaign.fuzz import (CampaignOptions, CampaignResult, case_strategy, load_known, new_reducer,
                                         report_new_buckets, say_policy)
from torchsim_diff.generate.draws import LazyCases
from torchsim_diff.results.record import Record
from torchsim_diff.run.adaptive_timeouts import TimeoutPolicy
from torchsim_diff.run.runner import CaseRunner

PROGRESS_EVERY_S = 5.0
MAX_ARTIFACT_BYTES = 32 << 20    # a failing case's artifacts travel inside its record up to this size
INSTALL_HINT = "pip install 'torchsim-diff[ray]'"
# How long the driver waits for a first actor when none is running (starting one imports torch
# and sets a route up, which takes minutes on a loaded machine).
ACTOR_START_TIMEOUT_S = 600
# How long the driver tries to reach the cluster's address before saying it cannot: ray.init
# on an address nobody answers retries for about twenty minutes, printing as it goes.
CONNECT_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 60.0         # for the actors to close their route workers at the end


def step_timeout_s(opts: CampaignOptions) -> float:
    """How long an actor may take over one case on every route before it counts as lost and
    its shard goes to another actor (a node frozen but not yet declared dead): a fresh
    worker's start-up, then per route the case, a re-run after a kill, its per-op run, a
    second size and the reduction of a new failure, with room to spare."""
    from torchsim_diff.worker.client import STARTUP_TIMEOUT_S
    return STARTUP_TIMEOUT_S + len(opts.routes) * (5 * opts.timeout_s + 2 * opts.reduce_budget_s)


@dataclasses.dataclass
class RayCampaignResult(CampaignResult):
    notes: list = dataclasses.field(default_factory=list)   # lines for the summary: shards rerun and why


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached or has no CPU."""


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int
    seed: int
    budget: int


def shard_seed(campaign_seed: int, index: int) -> int:
    """The Hypothesis seed of shard `index`: a hash, so neighbouring seeds share no shards."""
    digest = hashlib.sha256(f"torchsim-diff/{campaign_seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def plan_shards(campaign_seed: int, max_examples: int, shards: int) -> list:
    """`shards` shards whose budgets add up to max_examples (the first ones take the remainder)."""
    if shards < 1:
        raise ValueError(f"shards={shards!r} must be at least 1")
    base, extra = divmod(max_examples, shards)
    return [Shard(i, shard_seed(campaign_seed, i), base + (i < extra)) for i in range(shards)
            if base + (i < extra) > 0]


def draw_cases(opts: CampaignOptions, seed_value: int, count: int):
    """The first `count` distinct cases Hypothesis draws with `seed_value`, whatever this
    process has imported, drawn as they are asked for (generate.draws.LazyCases)."""
    return LazyCases(case_strategy(opts), seed_value=seed_value, count=count)


class ShardRunner:
    """Runs shards one case at a time with warm route workers; a Ray actor on the cluster,
    a plain object for the single-process reference run."""

    def __init__(self, opts: CampaignOptions):
        from torchsim_diff.run.checker import Checker
        self.opts = opts
        self.scratch = tempfile.mkdtemp(prefix="torchsim-diff-shard-")
        known = load_known(opts)
        self.checker = Checker(out_dir=self.scratch, timeout_s=opts.timeout_s, route_options=opts.route_options,
                               repeat=opts.repeat, known_buckets=known)
        # Failures are reduced here, next to their warm route worker, before their record leaves.
        self.runner = CaseRunner(self.checker, timeouts=TimeoutPolicy(ceiling_s=opts.timeout_s), known=known,
                                 reducer=new_reducer(self.checker, opts, self.scratch, known))
        for route in opts.routes:
            self.runner.availability(route)
        self._shard, self._cases = None, None      # cases drawn on demand: --budget alone draws no more than it runs

    def node(self) -> str:
        """host/node-id of where this runner lives (several nodes may share a host)."""
        ray = sys.modules.get("ray")
        inside = ray is not None and ray.is_initialized()    # asking Ray outside would join a cluster
        node_id = ray.get_runtime_context().get_node_id()[:6] if inside else f"pid{os.getpid()}"
        return f"{socket.gethostname()}/{node_id}"

    def step(self, shard: Shard, position: int):
        """Records of the shard's case at `position` (one per route), or None past its end."""
        if self._shard != shard:
            self._close_cases()
            self._shard, self._cases = shard, draw_cases(self.opts, shard.seed, shard.budget)
        try:
            case = self._cases[position]
        except IndexError:
            return None
        return [self._record(case, route) for route in self.opts.routes]

    def _record(self, case, route: str) -> Record:
        _, record = self.runner.run(case, route)
        if record.artifacts:
            record = record.with_fields(artifacts_tar=_pack(record.artifacts))
        return record

    def _close_cases(self) -> None:
        close = getattr(self._cases, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        self._close_cases()
        self.checker.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _pack(folder: str) -> bytes | None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=".")
    blob = buffer.getvalue()
    return blob if len(blob) <= MAX_ARTIFACT_BYTES else None


def _unpack(record: Record, out_dir: str) -> Record:
    """Artifacts that travelled with a record land in OUT/artifacts/<route>/<case_id>."""
    blob = record.artifacts_tar
    record = record.with_fields(artifacts_tar=None)
    if record.artifacts:
        folder = None
        if blob:
            folder = os.path.join(out_dir, "artifacts", record.route, record.case_id)
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
                tar.extractall(folder, filter="data")
        record = record.with_fields(artifacts=folder)
    return record


class NodeProgress:
    """One line every few seconds: position, overall speed, and speed per node."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.stream = total, stream
        self.t0 = self.last = time.monotonic()
        self.per_node: collections.Counter = collections.Counter()

    def count(self, node: str) -> None:
        self.per_node[node] += 1

    def update(self, result: CampaignResult, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < PROGRESS_EVERY_S:
            return
        self.last = now
        elapsed = max(now - self.t0, 1e-9)
        nodes = ", ".join(f"{node} {n / elapsed:.2f}/s" for node, n in sorted(self.per_node.items()))
        self.stream.write(f"[{result.cases}/{self.total}] {result.cases / elapsed:.2f} cases/s "
                          f"({nodes}), {len(result.findings)} failing records\n")
        self.stream.flush()


class Driver:
    """Receives records, keeps the campaign's state, and alone writes results and history."""

    def __init__(self, opts: CampaignOptions, writer, store, progress: NodeProgress):
        self.opts, self.writer, self.store, self.progress = opts, writer, store, progress
        self.result = RayCampaignResult()

    def accept(self, records: list, node: str) -> None:
        for record in records:
            record = _unpack(record, self.opts.out_dir).with_fields(node=node)
            self.writer.write(record)
            self.result.records.append(record)
            if record.unavailable_route:      # not a killed worker's (kind tool_error)
                self.result.unavailable.setdefault(record.route, record.message)
            if self.store is not None and record.is_new_failure and self.store.add(record):
                self.store.save()
        self.result.cases += 1
        self.progress.count(node)
        self.progress.update(self.result)


def run_ray_campaign(opts: CampaignOptions, address: str, shards: int | None = None) -> RayCampaignResult:
    """Run the campaign on the Ray cluster at `address` ("local": start one here).
    shards: default one per CPU slot of the cluster (pass it to reproduce a campaign on
    another cluster)."""
    ray = _import_ray()
    if not ray.is_initialized():
        _join(ray, address)
    slots = int(ray.cluster_resources().get("CPU", 0))
    if slots < 1:
        raise RayUnavailable(f"--ray {address}: the cluster has no CPU for actors")
    plan = plan_shards(opts.seed, opts.max_examples, shards or slots)
    say_policy()
    return _with_outputs(opts, lambda driver: _dispatch(ray, opts, plan, slots, driver))


def _join(ray, address: str) -> None:
    """ray.init on `address`, once its head answers within CONNECT_TIMEOUT_S. ray.init sets
    its own SIGTERM handler (sys.exit): the one in place before (the command's, which ends a
    campaign with its summary) is put back."""
    if address not in ("local", "auto"):
        _reachable_or_raise(address)
    handler = signal.getsignal(signal.SIGTERM)
    try:
        local = {"include_dashboard": False} if address == "local" else {}
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, **local)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"--ray {address}: cannot join the cluster: {exc}") from None
    finally:
        if handler is not None and signal.getsignal(signal.SIGTERM) is not handler:
            try:
                signal.signal(signal.SIGTERM, handler)
            except ValueError:            # not the main thread: ray.init set none either
                pass


def _reachable_or_raise(address: str) -> None:
    """RayUnavailable unless something accepts a connection at the address ray.init will
    use (Ray maps a loopback host to this node's address) within CONNECT_TIMEOUT_S."""
    target = address.split("://", 1)[-1]
    try:
        from ray._private.services import canonicalize_bootstrap_address
        target = canonicalize_bootstrap_address(target) or target
    except ImportError:
        pass                              # Ray's private helper moved: the address as given
    except ValueError as exc:
        raise RayUnavailable(f"--ray {address}: {exc} (expected HOST:PORT, 'local' or 'auto')") from None
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray {address}: expected HOST:PORT (e.g. 10.0.0.1:6379), 'local' or 'auto'")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise RayUnavailable(f"--ray {address}: cannot reach the cluster's head at {host}:{port} within "
                             f"{CONNECT_TIMEOUT_S:g} s ({exc.strerror or exc}); is `ray start --head` "
                             f"running there?") from None


def run_shards_here(opts: CampaignOptions, shards: int) -> RayCampaignResult:
    """The same shards in this process, one after the other: the single-process reference."""
    runner = ShardRunner(opts)

    def run(driver):
        budget = _budget(opts)
        for shard in plan_shards(opts.seed, opts.max_examples, shards):
            position = 0
            while not _spent(budget) and (records := runner.step(shard, position)) is not None:
                driver.accept(records, runner.node())
                position += 1
        _note_budget(driver, budget)
    try:
        return _with_outputs(opts, run)
    finally:
        runner.close()


def _with_outputs(opts: CampaignOptions, run) -> RayCampaignResult:
    from torchsim_diff.buckets.bucket_history import BucketStore
    from torchsim_diff.results.jsonl import ResultsWriter
    os.makedirs(opts.out_dir, exist_ok=True)
    store = BucketStore(opts.bucket_store) if opts.bucket_store else None
    progress = NodeProgress(opts.max_examples)
    with ResultsWriter(os.path.join(opts.out_dir, "results.jsonl")) as writer:
        driver = Driver(opts, writer, store, progress)
        try:
            run(driver)
        except KeyboardInterrupt as exc:
            driver.result.interrupt(exc)
        progress.update(driver.result, force=True)
    result = driver.result
    report_new_buckets(result, store, opts)
    return result


def _dispatch(ray, opts: CampaignOptions, plan: list, slots: int, driver: Driver) -> None:
    """Hand shards to idle actors a case at a time until every shard is done; a shard whose
    actor is lost goes back to the front of the queue with its position kept.

    An actor gets its first shard once it has started. The cluster's CPU count can still
    include a node that just died, so an actor may never be placed: it holds no shard, and
    is dropped when the work is done (or, when no actor starts at all, the campaign stops).
    An actor that does not answer a step within step_timeout_s is lost like one whose node
    died."""
    remote_runner = ray.remote(num_cpus=1, max_restarts=0)(ShardRunner)
    queue = collections.deque(plan)
    position = {shard.index: 0 for shard in plan}
    starting = {actor.node.remote(): actor for actor in
                (remote_runner.remote(opts) for _ in range(min(slots, len(plan))))}
    nodes, inflight, deadlines = {}, {}, {}
    budget = _budget(opts)
    step_limit = step_timeout_s(opts)

    def hand_out(actor, shard):
        ref = actor.step.remote(shard, position[shard.index])
        inflight[ref], deadlines[ref] = (actor, shard), time.monotonic() + step_limit

    def give(actor):
        if queue:
            hand_out(actor, queue.popleft())

    def requeue(actor, shard, why: str):
        _lose(ray, actor, shard, position[shard.index], nodes.pop(actor), driver, why)
        queue.appendleft(shard)
        busy = {id(a) for a, _ in inflight.values()}
        for idle in [a for a in nodes if id(a) not in busy]:
            give(idle)

    while inflight or (queue and starting):
        waiting_for_starts_only = not inflight
        next_deadline = min(deadlines.values(), default=0.0)
        wait_s = ACTOR_START_TIMEOUT_S if waiting_for_starts_only else max(next_deadline - time.monotonic(), 0.0)
        ready, _ = ray.wait([*inflight, *starting], num_returns=1, timeout=wait_s)
        if not ready and waiting_for_starts_only:
            raise RayUnavailable(f"no actor started within {ACTOR_START_TIMEOUT_S} s; the campaign stops "
                                 f"with what it has")
        if not ready:
            for ref in [r for r, end in deadlines.items() if end <= time.monotonic()]:
                actor, shard = inflight.pop(ref)
                del deadlines[ref]
                requeue(actor, shard, f"no answer within {step_limit:g} s")
            continue
        if ready[0] in starting:
            actor = starting.pop(ready[0])
            try:
                nodes[actor] = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                continue
            give(actor)
            continue
        actor, shard = inflight.pop(ready[0])
        del deadlines[ready[0]]
        try:
            records = ray.get(ready[0])
        except ray.exceptions.RayActorError as exc:
            requeue(actor, shard, type(exc).__name__)
            continue
        if records is None:
            give(actor)
            continue
        driver.accept(records, nodes[actor])
        position[shard.index] += 1
        if _spent(budget):
            queue.clear()        # the cases in flight on other actors still finish and are kept
            continue
        hand_out(actor, shard)
    if queue:
        raise RayUnavailable("every actor was lost; the campaign stops with what it has")
    _note_budget(driver, budget)
    for never_started in starting.values():
        ray.kill(never_started)
    _close(ray, list(nodes))


def _close(ray, actors: list) -> None:
    """Let each actor close its route workers, for at most CLOSE_TIMEOUT_S; then kill them."""
    try:
        ray.get([actor.close.remote() for actor in actors], timeout=CLOSE_TIMEOUT_S)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError):
        for actor in actors:
            ray.kill(actor)


def _budget(opts: CampaignOptions):
    from torchsim_diff.campaign.budget import Budget
    return Budget(opts.budget_s) if opts.budget_s else None


def _spent(budget) -> bool:
    """No new case starts once --budget is spent (as in a campaign in one process)."""
    return budget is not None and budget.left() <= 0


def _note_budget(driver: Driver, budget) -> None:
    if _spent(budget) and driver.result.cases < driver.opts.max_examples:
        driver.result.notes.append(f"--budget {budget.total_s:g}s spent after {driver.result.cases} of "
                                   f"{driver.opts.max_examples} cases; the rest of the shards were not drawn")


def _lose(ray, actor, shard: Shard, done: int, node: str, driver: Driver, why: str) -> None:
    note = (f"shard {shard.index} rerun on another node from its case {done} "
            f"(node {node} lost: {why})")
    driver.result.notes.append(note)
    sys.stderr.write(note + "\n")
    ray.kill(actor)


def _import_ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from None
    return ray
