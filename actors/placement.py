"""Placement groups on the running cluster: reserve a plan's bundles (`mmrag.cluster.resources.placement_plan`), or stop
before anything is reserved, naming the bundle that cannot fit; then the scheduling strategy of each actor.

The learner ranks' group is reserved once by `mmrag.actors.learner.LearnerGroup` and kept across its restarts, so a
rebuilt group finds its GPUs still held rather than competing with restarting stage actors for them.
"""

from __future__ import annotations

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from mmrag.cluster.resources import PlacementGroupPlan, PlanDoesNotFit, place_bundles, placement_plan
from mmrag.config import Config


def node_resources() -> dict[str, dict[str, float]]:
    """Each alive node's declared resources: "address (node id prefix)" -> {"CPU", "GPU"}."""
    return {f"{n['NodeManagerAddress']} ({n['NodeID'][:8]})": {"CPU": n["Resources"].get("CPU", 0.0),
                                                                 "GPU": n["Resources"].get("GPU", 0.0)}
            for n in ray.nodes() if n["Alive"]}


def check_placement(plans: list[PlacementGroupPlan]) -> dict[tuple[str, int], str]:
    """Before anything is placed: where every bundle of `plans` would land on this cluster's nodes, or
    `PlanDoesNotFit` naming the first bundle that cannot (a placement group that cannot be placed waits forever)."""
    return place_bundles(plans, node_resources())


def reserve(plan: PlacementGroupPlan, timeout_s: float) -> PlacementGroup:
    """Reserve `plan`'s bundles, waiting at most `timeout_s` (then `PlanDoesNotFit`, releasing them)."""
    group = placement_group([b.resources() for b in plan.bundles], strategy=plan.strategy)
    if not group.wait(timeout_s):
        remove_placement_group(group)
        raise PlanDoesNotFit(f"{plan.name}: its {len(plan.bundles)} bundles were not reserved within {timeout_s:g} s "
                             f"(other actors hold the resources; see `mmrag plan`)")
    return group


def in_bundle(group: PlacementGroup, index: int) -> dict:
    """Actor options that place it in bundle `index` of `group` (its children too)."""
    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=group, placement_group_bundle_index=index, placement_group_capture_child_tasks=True)}


def bundle_nodes(group: PlacementGroup) -> dict[int, str]:
    """Bundle index -> the id of the node Ray reserved it on."""
    return dict(ray.util.placement_group_table(group)["bundles_to_node_id"])


STAGE_GROUPS = {"translate": "translator", "retrieve": "encoder", "rerank": "reranker", "answer": "generator_pool",
                "score": "reward_pool"}
"""The resource-plan group of each stage's actors (`mmrag.actors.stage_pools.ActorPools.launch`)."""


class StagePlacement:
    """The placement groups of the stages whose replicas share GPUs (fractional `num_gpus`): one bundle per GPU,
    holding as many replicas as fit on it, so shares of one device are never split over nodes."""

    def __init__(self, cfg: Config):
        plans = {plan.name: plan for plan in placement_plan(cfg) if plan.name in STAGE_GROUPS.values()}
        self.groups: dict[str, tuple[PlacementGroup, PlacementGroupPlan]] = {}
        try:
            for name, plan in plans.items():
                self.groups[name] = (reserve(plan, cfg.learner.startup_timeout_s), plan)
        except BaseException:
            self.remove()
            raise

    def options(self, stage: str, replica: int) -> dict:
        """Actor options of replica `replica` of `stage`: its bundle, or none for a stage not sharing GPUs."""
        if STAGE_GROUPS[stage] not in self.groups:
            return {}
        group, plan = self.groups[STAGE_GROUPS[stage]]
        return in_bundle(group, replica // plan.bundles[0].actors)

    def remove(self) -> None:
        for group, _ in self.groups.values():
            remove_placement_group(group)
        self.groups = {}
