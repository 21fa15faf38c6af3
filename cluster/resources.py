"""Resource plan: which Ray actor groups a config starts, and whether they fit a cluster.

Read by the distributed driver before it places actors and by `mmrag plan`. Ray-free:
the cluster's capacity comes in as a plain `{"CPU": ..., "GPU": ...}` mapping (what
`ray.cluster_resources()` returns, or a launcher YAML's declared node resources), so a
config can be checked against a cluster it is not connected to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mmrag.config import Config


class PlanDoesNotFit(RuntimeError):
    """A resource plan that asks for more than the cluster has."""


@dataclass(frozen=True)
class ActorGroup:
    """`count` identical actors, each reserving `num_cpus` CPUs and `num_gpus` GPUs."""

    name: str
    count: int
    num_cpus: float
    num_gpus: float

    @property
    def total_cpus(self) -> float:
        return self.count * self.num_cpus

    @property
    def total_gpus(self) -> float:
        return self.count * self.num_gpus


def resource_plan(cfg: Config) -> list[ActorGroup]:
    """The actor groups the distributed trainer starts for `cfg`, in placement order.

    Mirrors `actors.stage_pools.ActorPools.launch` and `actors.learner.LearnerGroup`.
    """
    actor_cpus = cfg.pools.actor_num_cpus
    learner_gpus = 1.0 if cfg.learner.use_gpu else 0.0
    return [
        ActorGroup("translator", cfg.translator.num_replicas, actor_cpus, cfg.translator.num_gpus),
        ActorGroup("encoder", cfg.encoder.num_replicas, actor_cpus, cfg.encoder.num_gpus),
        ActorGroup("retrieval_shards", cfg.index.num_shards, cfg.index.shard_num_cpus, cfg.index.shard_num_gpus),
        ActorGroup("reranker", cfg.reranker.num_replicas, actor_cpus, cfg.reranker.num_gpus),
        ActorGroup("generator_pool", cfg.generator.num_replicas, actor_cpus, cfg.generator.num_gpus),
        ActorGroup("reward_pool", cfg.reward.num_replicas, actor_cpus, cfg.reward.num_gpus),
        ActorGroup("learner_workers", cfg.learner.num_workers, cfg.learner.num_cpus_per_worker, learner_gpus),
    ]


def plan_totals(plan: list[ActorGroup]) -> dict[str, float]:
    """Summed reservations of a plan: {"CPU": ..., "GPU": ...}."""
    return {"CPU": sum(g.total_cpus for g in plan), "GPU": sum(g.total_gpus for g in plan)}


def _validate(group: ActorGroup) -> None:
    if group.count < 1:
        raise ValueError(f"{group.name}: count must be at least 1, got {group.count}")
    if group.num_cpus < 0 or group.num_gpus < 0:
        raise ValueError(f"{group.name}: num_cpus and num_gpus must be >= 0, got {group.num_cpus}, {group.num_gpus}")
    if group.num_gpus > 1 and group.num_gpus != int(group.num_gpus):
        raise ValueError(f"{group.name}: num_gpus above 1 must be a whole number (Ray cannot split an actor "
                         f"across part of a GPU), got {group.num_gpus}")


def _place_gpus(group: ActorGroup, free_per_gpu: list[float]) -> bool:
    """First-fit each replica's GPU share onto single devices; False when one does not fit.

    A fractional share must fit on one device and a whole share takes that many idle
    devices, which is how Ray schedules GPUs; summing fractions would overcount capacity.
    """
    if group.num_gpus == 0:
        return True
    for _ in range(group.count):
        if group.num_gpus < 1:
            slot = next((i for i, free in enumerate(free_per_gpu) if free >= group.num_gpus - 1e-9), None)
            if slot is None:
                return False
            free_per_gpu[slot] -= group.num_gpus
            continue
        idle = [i for i, free in enumerate(free_per_gpu) if free >= 1 - 1e-9][: int(group.num_gpus)]
        if len(idle) < group.num_gpus:
            return False
        for i in idle:
            free_per_gpu[i] = 0.0
    return True


def check_fits(plan: list[ActorGroup], available: dict[str, float]) -> None:
    """Raise `PlanDoesNotFit` naming the first group whose CPUs or GPUs exceed what is left.

    `available` is e.g. `ray.cluster_resources()`; a missing key means none of that
    resource. CPUs are pooled over the cluster (per-node packing is Ray's to decide).
    """
    cpus_left = float(available.get("CPU", 0.0))
    free_per_gpu = [1.0] * math.floor(float(available.get("GPU", 0.0)) + 1e-9)
    for group in plan:
        _validate(group)
        gpus_before = sum(free_per_gpu)
        if group.total_cpus > cpus_left + 1e-9:
            raise PlanDoesNotFit(
                f"{group.name}: needs {group.count} x {group.num_cpus:g} CPU = {group.total_cpus:g} CPU, "
                f"but only {cpus_left:g} of {available.get('CPU', 0.0):g} CPU are left after the groups before it; "
                f"add CPUs (ray.num_cpus, or larger/more nodes) or lower this group's count or num_cpus")
        if not _place_gpus(group, free_per_gpu):
            raise PlanDoesNotFit(
                f"{group.name}: needs {group.count} x {group.num_gpus:g} GPU, but only {gpus_before:g} of "
                f"{available.get('GPU', 0.0):g} GPU are free after the groups before it (a fractional share must "
                f"fit on one GPU); add GPU nodes or lower this group's count or num_gpus (0 runs it on CPU)")
        cpus_left -= group.total_cpus


def declared_capacity(launcher: dict) -> dict[str, float]:
    """Resources of a Ray cluster launcher config at full scale: head plus each worker type's max_workers.

    Worker types are counted in file order until the cluster-wide `max_workers` is used up,
    as the autoscaler never exceeds it. Every node type must declare `resources`.
    """
    node_types = launcher.get("available_node_types") or {}
    head = launcher.get("head_node_type")
    if head not in node_types:
        raise ValueError(f"head_node_type: {head!r} is not one of available_node_types {sorted(node_types)}")
    workers_left = int(launcher.get("max_workers", 0))
    capacity = {"CPU": 0.0, "GPU": 0.0}
    for name, node_type in node_types.items():
        if "resources" not in node_type:
            raise ValueError(f"available_node_types.{name}.resources: missing; declare e.g. {{CPU: 48, GPU: 4}}")
        if name == head:
            copies = 1
        else:
            copies = min(int(node_type.get("max_workers", workers_left)), workers_left)
            workers_left -= copies
        for key in capacity:
            capacity[key] += copies * float(node_type["resources"].get(key, 0))
    return capacity


def format_plan(plan: list[ActorGroup]) -> str:
    """A table of the plan: one row per group, then the totals."""
    header = f"{'actor group':<18}{'count':>6}{'CPU each':>10}{'GPU each':>10}{'CPU total':>11}{'GPU total':>11}"
    rows = [header, "-" * len(header)]
    rows += [f"{g.name:<18}{g.count:>6}{g.num_cpus:>10g}{g.num_gpus:>10g}{g.total_cpus:>11g}{g.total_gpus:>11g}"
             for g in plan]
    totals = plan_totals(plan)
    rows += ["-" * len(header), f"{'total':<18}{'':>6}{'':>10}{'':>10}{totals['CPU']:>11g}{totals['GPU']:>11g}"]
    return "\n".join(rows)
