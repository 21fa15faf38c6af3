"""The learner group: one Ray actor per rank, each owning its DeepSpeed engines, driven by method calls.

`LearnerGroup` is the `mmrag.training.learner.Learner` of the distributed mode. It starts
`learner.num_workers` `LearnerRank` actors and hands every rank rank 0's node address and
a free port there, so the ranks join one torch process group themselves. Then each call
is the same method on every rank, awaited together: `update` (one optimiser step on
`roots[rank::W]`; rank 0's call also returns the new trainable weights as extra return
values, so they enter the object store once per version; with `learner.durable_weights` it also writes
them to the run's storage, whose URI the record carries, so losing rank 0's node loses no version; with
`learner.weight_sync: broadcast` it then sends them to the attached policy replicas, `mmrag.actors.weight_sync`),
`save`, `load`, `export`. A failing rank fails the call at once, naming the rank, and so does a rank that
has not answered within `learner.call_timeout_s` (hung: a wedged device call, a stuck collective, a stopped
process), an update within `learner.call_timeout_factor` times the recent updates' median once the group has
answered one (`mmrag.actors.deadlines`); each failure logs one line (`mmrag.actors.faults`). The process group
itself is built with `learner.call_timeout_s`, so a collective broken by
a dead peer fails on the survivors too. A process group cannot take a rank
back, so `restart` replaces the whole group and restores a checkpoint, taking as its ranks the
`learner.spare_ranks` processes started ahead (`mmrag.actors.rank_processes`). The ranks are one placement group
(`learner.strict_pack`: STRICT_PACK, else PACK), reserved once and kept across restarts. What a rank does is
`mmrag.training.deepspeed_rank.DeepSpeedRank`; `LearnerRank` only hosts it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import ray
from ray.exceptions import RayActorError, RayError

from ray.util.placement_group import remove_placement_group

from mmrag.actors.deadlines import RecentAnswers
from mmrag.actors.faults import report_fault
from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.placement import in_bundle, reserve
from mmrag.actors.rank_processes import RankProcesses, error_of
from mmrag.actors.retrieval import fetch_hits_rows
from mmrag.actors.weight_sync import WeightBroadcast
from mmrag.cluster.resources import PlanDoesNotFit, check_fits, placement_plan, resource_plan
from mmrag.config import Config
from mmrag.rl.rollout import Node
from mmrag.training.deepspeed_rank import DeepSpeedRank, serve_rendezvous
from mmrag.training.learner import LearnerFailed, LearnerUpdate, Weights
from mmrag.training.weight_broadcast import join_sync_group, serve_sync_store

log = logging.getLogger(__name__)

DEAD_PEER_GRACE_S = 10.0
"""After a rank fails, how long to wait for the others: a collective broken by a dead peer fails on the
survivors too, and the dead rank is the one to name."""


class LearnerRankError(LearnerFailed):
    """A learner rank died, raised, or did not start in time; the group must be restarted (`LearnerGroup.restart`)."""

    def __init__(self, rank: int, message: str, lost: bool = True):
        super().__init__(message, lost)
        self.rank = rank


class LearnerRank:
    """The process of one rank: hosts a `DeepSpeedRank` once `start` has built it (a plain class, made an
    actor where `LearnerGroup` places it, so that a benchmark can place a subclass)."""

    def __init__(self):
        use_actor_cpus("LearnerRank")
        self.worker = None
        self.store = None
        self.sync_stores: dict = {}
        """Rank 0: component -> the store of its weight-sync group (`learner.weight_sync: broadcast`)."""
        self.sync_groups: dict = {}
        """Rank 0: component -> its weight-sync group, this rank the sender."""

    def pid(self) -> int:
        return os.getpid()

    def rendezvous_address(self, world: int) -> tuple[str, int]:
        """Rank 0: serve the process group's store on a port the OS picks, held from now on (a port probed free
        and bound later could be taken in between); this node's address and that port."""
        self.store = serve_rendezvous(world)
        return ray.util.get_node_ip_address(), self.store.port

    def start(self, cfg: Config, rank: int, world: int, address: str, port: int, checkpoint: str | None) -> int:
        """Join the process group, load the components, build the engines (restore `checkpoint`); the version."""
        self.worker = DeepSpeedRank(cfg, rank, world, address, port, self.store)
        if checkpoint is not None:
            self.worker.load(checkpoint)
        return self.worker.version

    @ray.method(num_returns=3)
    def publish(self) -> tuple:
        """(translator, reranker, {"publish_id", "durable", "probe_scores", "digests"}) on rank 0: the trainable
        weights, their id, where they were also written (None without `learner.durable_weights`) and the weight-sync
        check's figures (`DeepSpeedRank.publish`); (None, None, {...}) on the others."""
        weights, published = self.worker.publish()
        return *(weights or (None, None)), published

    def use_sync_probe(self, probe) -> None:
        """Score the weight-sync probe batch (`mmrag.training.sync_probe.SyncProbe`) with the versions published
        from now on."""
        self.worker.sync_probe = probe

    def sync_rendezvous(self, component: str, world: int) -> tuple[str, int]:
        """Rank 0: serve the store of `component`'s weight-sync group (`weight_broadcast`); its address and port."""
        self.sync_stores[component] = serve_sync_store(world)
        return ray.util.get_node_ip_address(), self.sync_stores[component].port

    def join_sync(self, component: str, world: int, timeout_s: float) -> None:
        """Rank 0: join `component`'s weight-sync group as its sender."""
        store = self.sync_stores[component]
        group = join_sync_group(store, "", 0, 0, world, timeout_s, self.worker.device.type == "cuda")
        self.sync_groups[component] = group

    def send_weights(self, component: str) -> None:
        """Rank 0: broadcast the last published `component` weights to its sync group."""
        self.worker.send_published(component, self.sync_groups[component])

    @ray.method(num_returns=3)
    def update(self, roots: list[Node]) -> tuple:
        """({"version", "losses", "seconds"}, translator weights, reranker weights); weights on rank 0 only."""
        record, weights = self.worker.update(fetch_hits_rows(roots))
        return record, *(weights or (None, None))

    def save(self, directory: str) -> None:
        self.worker.save(directory)

    def load(self, directory: str) -> int:
        self.worker.load(directory)
        return self.worker.version

    def export(self, directory: str) -> None:
        self.worker.export(directory)


def check_placeable(cfg: Config) -> None:
    """Fail fast, naming what is missing, when the cluster can never hold the ranks (Ray would wait forever)."""
    group = next(g for g in resource_plan(cfg) if g.name == "learner_workers")
    check_fits([group], ray.cluster_resources())
    nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
    if not any(n.get("CPU", 0) >= group.num_cpus and n.get("GPU", 0) >= group.num_gpus for n in nodes):
        raise PlanDoesNotFit(f"learner_workers: each rank needs {group.num_cpus:g} CPU and {group.num_gpus:g} GPU on "
                             f"one node, but no node has that much; lower learner.num_cpus_per_worker or add nodes")


def _rank_failure(rank_of: dict, ref: ray.ObjectRef, error: RayError, others: list, what: str) -> LearnerRankError:
    """The error to raise for a failed rank call: a dead rank is named before a survivor it broke."""
    if not isinstance(error, RayActorError) and others:
        finished, _ = ray.wait(others, num_returns=len(others), timeout=DEAD_PEER_GRACE_S)
        dead = [(other, exc) for other in finished if isinstance(exc := error_of(other), RayActorError)]
        if dead:
            ref, error = dead[0]
    rank = rank_of[ref]
    if isinstance(error, RayActorError):
        return LearnerRankError(rank, f"learner rank {rank} died during {what} (its process exited or became "
                                      f"unreachable)")
    cause = getattr(error, "cause", None) or error  # a task error carries the rank's own exception
    return LearnerRankError(rank, f"learner rank {rank} raised during {what}: {type(cause).__name__}: {cause}",
                            lost=False)


def wait_for_ranks(refs: list[ray.ObjectRef], what: str, timeout: float, waiting_for: str = "",
                   setting: str = "learner.call_timeout_s", started: float | None = None) -> list:
    """Each rank's result of one call (refs in rank order, sent at `started`, default now), raising
    `LearnerRankError` as soon as one rank fails, or when `timeout` (the config's `setting`) has passed since
    `started`: a hung rank counts as lost (`waiting_for` says on what). A failure is reported
    (`mmrag.actors.faults`) before it is raised.

    Waits on all ranks at once: the others may be blocked in a collective with the failed one.
    """
    started = time.monotonic() if started is None else started
    rank_of = {ref: rank for rank, ref in enumerate(refs)}
    results, pending = [None] * len(refs), list(refs)
    deadline = started + timeout
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = ", ".join(str(rank_of[ref]) for ref in pending)
            failure = LearnerRankError(rank_of[pending[0]], f"learner rank {late} did not finish {what} within "
                                                            f"{timeout:g} s ({setting}){': ' if waiting_for else ''}"
                                                            f"{waiting_for}")
            _report(failure, what, started)
            raise failure
        try:
            results[rank_of[ready[0]]] = ray.get(ready[0])
        except RayError as error:
            failure = _rank_failure(rank_of, ready[0], error, pending, what)
            _report(failure, what, started)
            raise failure from error
    return results


def _report(failure: LearnerRankError, what: str, started: float) -> None:
    report_fault("learner group", "learner_fault", f"rank {failure.rank}, {time.monotonic() - started:.1f} s into "
                                                   f"{what}: {failure}")


@dataclass
class GroupUpdate:
    """An update running on every rank (`PendingUpdate`); `result` makes it the group's current version."""

    group: LearnerGroup
    futures: list
    """Each rank's record of the update, in rank order."""
    weight_refs: tuple
    """Rank 0's (translator, reranker) weights of the new version."""
    started: float
    """When it was sent (`time.monotonic()`)."""
    timeout_s: float
    """Seconds after `started` past which a rank still updating counts as hung (`LearnerGroup.update_timeout_s`)."""

    @property
    def deadline(self) -> float:
        return self.started + self.timeout_s

    def done(self) -> bool:
        """Every rank finished, or one failed (noticed at once: the others may wait in a collective for it), or the
        deadline passed."""
        ready = ray.wait(self.futures, num_returns=len(self.futures), timeout=0)[0]
        return (len(ready) == len(self.futures) or any(error_of(ref) is not None for ref in ready)
                or time.monotonic() >= self.deadline)

    def result(self) -> LearnerUpdate:
        records = wait_for_ranks(self.futures, "update", self.timeout_s, started=self.started,
                                 setting="learner.call_timeout_factor x the median recent update, within "
                                         "[learner.min_call_timeout_s, learner.call_timeout_s]")
        self.group.updated(time.monotonic() - self.started)
        record = records[0]
        weights = Weights(record["version"], *self.weight_refs, publish_id=record["publish_id"],
                          durable=record["durable"], probe_scores=record["probe_scores"],
                          sync_probe=self.group.sync_probe, digests=record["digests"])
        update = LearnerUpdate(record["version"], record["losses"], record["seconds"], weights, record["rollouts"])
        self.group.version, self.group.published = update.version, weights
        self.group.broadcast(weights)
        return update


class LearnerGroup:
    """`learner.num_workers` DeepSpeed ranks (`learner.zero_stage`), driven as one `Learner`."""

    def __init__(self, cfg: Config, resume_from: str | Path | None = None, rank_class: type = LearnerRank):
        """`rank_class`: what each rank's actor is made from (`LearnerRank` or a subclass)."""
        if cfg.learner.num_workers < 1:
            raise ValueError(f"learner.num_workers: expected at least 1, got {cfg.learner.num_workers}")
        self.cfg = cfg
        self.rank_actor = ray.remote(rank_class)
        self.world_size = cfg.learner.num_workers
        self.processes = RankProcesses(self._new_rank, self.world_size + cfg.learner.spare_ranks)
        self.sync: WeightBroadcast | None = None
        """The policy replicas versions are broadcast to (`attach_policy_replicas`), if any."""
        learner = cfg.learner
        self.recent_updates = RecentAnswers(learner.call_timeout_s, learner.call_timeout_factor,
                                            learner.min_call_timeout_s)
        self.answered_update = False
        """Whether the current ranks have answered an update (then it gets the tighter deadline)."""
        self.sync_probe: ray.ObjectRef | None = None
        """The weight-sync probe batch (`use_sync_probe`), once given."""
        check_placeable(cfg)
        # Reserved once, kept across restarts: a rebuilt group finds its bundles still held.
        self.placement = reserve(placement_plan(cfg)[0], cfg.learner.startup_timeout_s)
        try:
            self._start_replacing_lost_ranks(resume_from)
        except BaseException:
            self.shutdown()
            raise

    def _start_replacing_lost_ranks(self, checkpoint: str | Path | None) -> None:
        """`_start`; a rank lost while the group starts (its process killed, its node gone) costs a start with new
        processes, up to `learner.max_restores` times, as a rank lost later costs a restore. A rank that raises (a
        model that cannot load, a bad checkpoint) fails the start at once."""
        for attempt in range(1, self.cfg.learner.max_restores + 2):
            try:
                self._start(checkpoint)
                return
            except LearnerRankError as error:
                if not error.lost or attempt > self.cfg.learner.max_restores:
                    raise
                log.warning("learner rank %d lost while the group started; starting again with new processes "
                            "(%d of at most %d)", error.rank, attempt, self.cfg.learner.max_restores)

    def _start(self, checkpoint: str | Path | None) -> None:
        """Place the ranks, let them join one process group at rank 0 and load (or restore); publish."""
        learner, world = self.cfg.learner, self.cfg.learner.num_workers
        self.processes.take(world)
        try:
            wait_for_ranks([rank.__ray_ready__.remote() for rank in self.ranks], "placement",
                           learner.startup_timeout_s, "no node has its CPUs/GPUs free (other actors hold them)",
                           "learner.startup_timeout_s")
            address, port = ray.get(self.ranks[0].rendezvous_address.remote(world))
            restore = None if checkpoint is None else str(checkpoint)
            starts = [rank.start.remote(self.cfg, i, world, address, port, restore)
                      for i, rank in enumerate(self.ranks)]
            self.version = wait_for_ranks(starts, "start-up", learner.startup_timeout_s,
                                          "still joining the process group or loading its models",
                                          "learner.startup_timeout_s")[0]
            self._give_sync_probe()
            self.published = self._publish()
        except BaseException:
            self._stop_ranks()
            raise
        self.processes.start_spares()

    @property
    def ranks(self) -> list:
        """The rank actors, in rank order."""
        return self.processes.rank_actors()

    def _new_rank(self, bundle: int):
        """A new rank actor in bundle `bundle` of the group's placement group."""
        learner = self.cfg.learner
        return self.rank_actor.options(
            num_cpus=learner.num_cpus_per_worker, num_gpus=1 if learner.use_gpu else 0,
            # Named outright, DeepSpeed does not warn that it found no GPU on a CPU learner.
            runtime_env={"env_vars": {"DS_ACCELERATOR": "cuda" if learner.use_gpu else "cpu"}},
            **in_bundle(self.placement, bundle)).remote()

    def _publish(self) -> Weights:
        calls = [rank.publish.remote() for rank in self.ranks]
        published = wait_for_ranks([call[2] for call in calls], "publishing weights",
                                   self.cfg.learner.call_timeout_s)[0]
        weights = Weights(self.version, *calls[0][:2], **published, sync_probe=self.sync_probe)
        self.broadcast(weights)
        return weights

    def use_sync_probe(self, probe) -> None:
        """Score `probe` (`mmrag.training.sync_probe.SyncProbe`) with every `learner.sync_check_every`-th version
        from now on; put in the object store once, and given to the ranks of every restart too."""
        self.sync_probe = ray.put(probe)
        self._give_sync_probe()

    def _give_sync_probe(self) -> None:
        if self.sync_probe is not None:
            wait_for_ranks([rank.use_sync_probe.remote(self.sync_probe) for rank in self.ranks],
                           "taking the weight-sync probe", self.cfg.learner.call_timeout_s)

    def attach_policy_replicas(self, replicas: dict[str, list]) -> None:
        """With `learner.weight_sync: broadcast`: the policy replicas (component -> actors) each published version
        is sent to from now on, the current one at once."""
        if self.cfg.learner.weight_sync == "broadcast":
            self.sync = WeightBroadcast(replicas, self.cfg.learner.sync_timeout_s, self.cfg.learner.sync_bucket_mb)
            self.broadcast(self.published)

    def broadcast(self, weights: Weights) -> None:
        """Send `weights` to the attached policy replicas (`learner.weight_sync: broadcast`), else nothing."""
        if self.sync is not None:
            self.sync.deliver(self.ranks[0], weights)

    def weights(self) -> Weights:
        """The current version's trainable weights, as object refs."""
        return self.published

    def start_update(self, roots: list[Node]) -> GroupUpdate:
        """Start one optimiser step on every rank; returns at once."""
        batch = ray.put(roots)
        calls = [rank.update.remote(batch) for rank in self.ranks]
        return GroupUpdate(self, [record for record, _, _ in calls], tuple(calls[0][1:]), time.monotonic(),
                           self.update_timeout_s())

    def update_timeout_s(self) -> float:
        """An update's deadline: from the recent updates' seconds once this group has answered one (its first may
        be slow: warm-up), else `learner.call_timeout_s`."""
        return self.recent_updates.deadline() if self.answered_update else self.cfg.learner.call_timeout_s

    def updated(self, seconds: float) -> None:
        """An update answered after `seconds` (from its sending to the driver reading it)."""
        self.recent_updates.add(seconds)
        self.answered_update = True

    def _on_every_rank(self, method: str, *args) -> list:
        return wait_for_ranks([getattr(rank, method).remote(*args) for rank in self.ranks], method,
                              self.cfg.learner.call_timeout_s)

    def save(self, directory: str | Path) -> None:
        self._on_every_rank("save", str(directory))

    def load(self, directory: str | Path) -> None:
        self.version = self._on_every_rank("load", str(directory))[0]
        self.published = self._publish()

    def export(self, directory: str | Path) -> None:
        self._on_every_rank("export", str(directory))

    def restart(self, checkpoint_dir: str | Path | None = None) -> None:
        """Replace every rank by a spare (`learner.spare_ranks`) or a new process (a new process group, in the same
        placement group) and restore `checkpoint_dir`, else start over."""
        self._stop_ranks()
        self.answered_update = False
        if self.sync is not None:
            self.sync.reset()  # its sender was rank 0
        self._start(checkpoint_dir)

    def pids(self) -> list[int]:
        """Each rank's process id (to watch or, in tests, kill a rank)."""
        return self._on_every_rank("pid")

    def spare_pids(self) -> list[int]:
        """Each spare rank's process id (`learner.spare_ranks`)."""
        return self.processes.spare_pids()

    def _stop_ranks(self) -> None:
        self.processes.stop_ranks()

    def shutdown(self) -> None:
        self.processes.stop_all()
        remove_placement_group(self.placement)
