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

    Mirrors `mmrag.actors.stage_pools.ActorPools.launch` and `mmrag.actors.learner.LearnerGroup`.
    """
    actor_cpus, standby = cfg.pools.actor_num_cpus, cfg.pools.standby_replicas
    learner_gpus = 1.0 if cfg.learner.use_gpu else 0.0
    return [
        ActorGroup("translator", cfg.translator.num_replicas + standby, actor_cpus, cfg.translator.num_gpus),
        ActorGroup("encoder", cfg.encoder.num_replicas + standby, actor_cpus, cfg.encoder.num_gpus),
        ActorGroup("retrieval_shards", cfg.index.num_shards * (cfg.index.shard_replicas + standby),
                   cfg.index.shard_num_cpus, cfg.index.shard_num_gpus),
        ActorGroup("reranker", cfg.reranker.num_replicas + standby, actor_cpus, cfg.reranker.num_gpus),
        ActorGroup("generator_pool", cfg.generator.num_replicas + standby, actor_cpus, cfg.generator.num_gpus),
        ActorGroup("reward_pool", cfg.reward.num_replicas + standby, actor_cpus, cfg.reward.num_gpus),
        ActorGroup("learner_workers", cfg.learner.num_workers + cfg.learner.spare_ranks,
                   cfg.learner.num_cpus_per_worker, learner_gpus),
    ]


def local_ray_cpus(cfgs: list[Config]) -> int:
    """Logical CPUs a local Ray declares to place the plan of every config in `cfgs` (each run alone): the first's
    `ray.num_cpus`, or more where a plan needs more (its standbys' and spare ranks' bundles too)."""
    needed = max(plan_totals(resource_plan(cfg))["CPU"] for cfg in cfgs)
    return max(cfgs[0].ray.num_cpus, math.ceil(needed))


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


@dataclass(frozen=True)
class Bundle:
    """One placement-group bundle: the resources reserved for `actors` actors of one group, on one node."""

    group: str
    actors: int
    num_cpus: float
    num_gpus: float

    def resources(self) -> dict[str, float]:
        return {"CPU": self.num_cpus, "GPU": self.num_gpus} if self.num_gpus else {"CPU": self.num_cpus}


@dataclass(frozen=True)
class PlacementGroupPlan:
    """A placement group: its bundles, reserved together, and Ray's strategy for spreading them over nodes."""

    name: str
    strategy: str
    bundles: tuple[Bundle, ...]


def placement_plan(cfg: Config) -> list[PlacementGroupPlan]:
    """The placement groups the distributed trainer reserves: the learner ranks (one bundle per rank, PACK, or
    STRICT_PACK with `learner.strict_pack`), and for each stage with a fractional GPU share one bundle per GPU
    holding as many of its replicas as fit on the device (their CPUs with them), PACK. Mirrors
    `mmrag.actors.learner.LearnerGroup` and `mmrag.actors.placement.StagePlacement`."""
    learner = next(g for g in resource_plan(cfg) if g.name == "learner_workers")
    plans = [PlacementGroupPlan("learner_workers", "STRICT_PACK" if cfg.learner.strict_pack else "PACK",
                                tuple(Bundle(learner.name, 1, learner.num_cpus, learner.num_gpus)
                                      for _ in range(learner.count)))]
    for group in resource_plan(cfg):
        # Retrieval shards hold one index each and are placed by their router, a GPU share apiece.
        if not 0 < group.num_gpus < 1 or group.name == "retrieval_shards":
            continue
        per_gpu = math.floor(1 / group.num_gpus + 1e-9)
        counts = [min(per_gpu, group.count - start) for start in range(0, group.count, per_gpu)]
        plans.append(PlacementGroupPlan(group.name, "PACK", tuple(
            Bundle(group.name, n, n * group.num_cpus, n * group.num_gpus) for n in counts)))
    return plans


def _fits(bundle: Bundle, free: dict[str, float]) -> bool:
    return bundle.num_cpus <= free["CPU"] + 1e-9 and bundle.num_gpus <= free["GPU"] + 1e-9


def place_bundles(plans: list[PlacementGroupPlan], nodes: dict[str, dict[str, float]]) -> dict[tuple[str, int], str]:
    """Where each bundle would land: (group, bundle index) -> node name, or `PlanDoesNotFit` naming the first
    bundle no node can hold. PACK puts a group's bundles on one node when one has room for all, else on the
    fewest nodes first-fit; STRICT_PACK only on one node. `nodes`: name -> {"CPU", "GPU"} free on it."""
    free = {name: {"CPU": float(r.get("CPU", 0)), "GPU": float(r.get("GPU", 0))} for name, r in nodes.items()}
    landing: dict[tuple[str, int], str] = {}
    for plan in plans:
        need = {"CPU": sum(b.num_cpus for b in plan.bundles), "GPU": sum(b.num_gpus for b in plan.bundles)}
        whole = next((n for n, f in free.items() if _fits(Bundle(plan.name, 0, need["CPU"], need["GPU"]), f)), None)
        if whole is None and plan.strategy == "STRICT_PACK":
            raise PlanDoesNotFit(f"{plan.name}: STRICT_PACK needs {need['CPU']:g} CPU and {need['GPU']:g} GPU on one "
                                 f"node for its {len(plan.bundles)} bundles, but no node has that free; unset "
                                 f"learner.strict_pack (PACK may spread the ranks) or use larger nodes")
        for index, bundle in enumerate(plan.bundles):
            node = whole or next((n for n, f in free.items() if _fits(bundle, f)), None)
            if node is None:
                raise PlanDoesNotFit(f"{plan.name} bundle {index}: needs {bundle.num_cpus:g} CPU and "
                                     f"{bundle.num_gpus:g} GPU on one node for {bundle.actors} actor(s), but no "
                                     f"node has that free after the bundles before it; add nodes or lower the "
                                     f"group's count, num_cpus or num_gpus")
            free[node]["CPU"] -= bundle.num_cpus
            free[node]["GPU"] -= bundle.num_gpus
            landing[(plan.name, index)] = node
    return landing


def declared_nodes(launcher: dict) -> dict[str, dict[str, float]]:
    """Each node of a launcher config at full scale (as `declared_capacity` counts them): name -> resources."""
    node_types = launcher.get("available_node_types") or {}
    head, workers_left, nodes = launcher.get("head_node_type"), int(launcher.get("max_workers", 0)), {}
    for name, node_type in node_types.items():
        copies = 1 if name == head else min(int(node_type.get("max_workers", workers_left)), workers_left)
        workers_left -= 0 if name == head else copies
        for i in range(copies):
            nodes[name if name == head else f"{name}-{i}"] = dict(node_type.get("resources", {}))
    return nodes


def format_placement(plans: list[PlacementGroupPlan], landing: dict[tuple[str, int], str]) -> str:
    """A table of the placement groups: one row per bundle with the node it would land on."""
    header = f"{'placement group':<18}{'strategy':>12}{'bundle':>8}{'actors':>8}{'CPU':>7}{'GPU':>7}  node"
    rows = [header, "-" * len(header)]
    rows += [f"{p.name:<18}{p.strategy:>12}{i:>8}{b.actors:>8}{b.num_cpus:>7g}{b.num_gpus:>7g}  {landing[(p.name, i)]}"
             for p in plans for i, b in enumerate(p.bundles)]
    return "\n".join(rows)
