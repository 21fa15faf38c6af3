"""Placement groups: the learner ranks as one group (PACK, or STRICT_PACK), replicas sharing a GPU packed one
bundle per device, the plan placed on a simulated multi-node GPU cluster, and a plan that cannot fit stopped
before anything is reserved, naming its bundle."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmrag.cluster.resources import PlanDoesNotFit, local_ray_cpus, place_bundles, placement_plan, plan_totals, resource_plan
from mmrag.config import load_config

ROOT = Path(__file__).resolve().parents[1]
GPU_PRESET = ROOT / "mmrag" / "configs" / "gpu_qwen2vl.yaml"


def test_replicas_sharing_a_gpu_are_packed_one_bundle_per_device():
    cfg = load_config(ROOT / "mmrag" / "configs" / "local.yaml", ["translator.num_replicas=3", "translator.num_gpus=0.5",
                                                        "learner.num_workers=2"])
    plans = {plan.name: plan for plan in placement_plan(cfg)}
    assert [(b.actors, b.num_cpus, b.num_gpus) for b in plans["translator"].bundles] == [(2, 1.0, 1.0), (1, 0.5, 0.5)]
    assert plans["learner_workers"].strategy == "PACK" and len(plans["learner_workers"].bundles) == 2
    assert set(plans) == {"translator", "learner_workers"}, "CPU-only stages need no placement group"


def test_spare_ranks_hold_bundles_of_their_own_like_the_ranks():
    cfg = load_config(GPU_PRESET, ["learner.spare_ranks=2"])  # 2 GPU ranks, 2 spares
    plans = {plan.name: plan for plan in placement_plan(cfg)}
    assert [(b.num_cpus, b.num_gpus) for b in plans["learner_workers"].bundles] == [(1.0, 1.0)] * 4


def test_a_local_ray_declares_cpus_for_the_largest_plan_and_never_fewer_than_ray_num_cpus():
    plain = load_config(ROOT / "mmrag" / "configs" / "local.yaml", [])
    standing_by = load_config(ROOT / "mmrag" / "configs" / "local.yaml", ["pools.standby_replicas=1", "learner.spare_ranks=2"])
    assert plan_totals(resource_plan(plain))["CPU"] < plain.ray.num_cpus == local_ray_cpus([plain])
    assert local_ray_cpus([plain, standing_by]) == 10 > plain.ray.num_cpus, plan_totals(resource_plan(standing_by))


def test_pack_spreads_ranks_when_no_node_holds_them_all_and_strict_pack_refuses():
    nodes = {"a": {"CPU": 8, "GPU": 1}, "b": {"CPU": 8, "GPU": 1}}
    cfg = load_config(GPU_PRESET, [])  # 2 GPU ranks
    landing = place_bundles(placement_plan(cfg)[:1], nodes)
    assert landing == {("learner_workers", 0): "a", ("learner_workers", 1): "b"}
    strict = load_config(GPU_PRESET, ["learner.strict_pack=true"])
    with pytest.raises(PlanDoesNotFit, match="learner_workers: STRICT_PACK needs 2 CPU and 2 GPU on one node"):
        place_bundles(placement_plan(strict)[:1], nodes)


def test_a_bundle_no_node_can_hold_is_named():
    cfg = load_config(GPU_PRESET, ["translator.num_replicas=4", "translator.num_gpus=0.5"])
    nodes = {"a": {"CPU": 48, "GPU": 3}}  # the learner takes 2 GPUs, the translator's second device has no room
    with pytest.raises(PlanDoesNotFit, match="translator bundle 1: needs 1 CPU and 1 GPU on one node for 2 actor"):
        place_bundles(placement_plan(cfg), nodes)


def place_gpu_preset_on_simulated_cluster() -> None:
    """Run in its own process (it starts its own Ray): two 4-GPU nodes declared on this CPU machine."""
    import ray
    from ray.cluster_utils import Cluster

    from mmrag.actors.placement import bundle_nodes, check_placement, in_bundle, reserve

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=16, num_gpus=4)
    ray.init(address=cluster.address)

    @ray.remote
    def node_of() -> str:
        return ray.get_runtime_context().get_node_id()

    try:
        cfg = load_config(GPU_PRESET, ["ray.address="])
        plans = placement_plan(cfg)
        check_placement(plans)
        for plan in plans:
            group = reserve(plan, timeout_s=60)
            nodes = bundle_nodes(group)
            for index, bundle in enumerate(plan.bundles):
                share = {"num_cpus": bundle.num_cpus / bundle.actors, "num_gpus": bundle.num_gpus / bundle.actors}
                landed = ray.get([node_of.options(**share, **in_bundle(group, index)).remote()
                                  for _ in range(bundle.actors)])
                assert set(landed) == {nodes[index]}, (plan.name, index, landed, nodes)
            if plan.name == "learner_workers":
                assert len(set(nodes.values())) == 1, "PACK keeps the ranks on one node when one has room"
        reserved = len(ray.util.placement_group_table())
        too_big = load_config(GPU_PRESET, ["learner.num_workers=6", "learner.strict_pack=true"])
        try:
            check_placement(placement_plan(too_big))
        except PlanDoesNotFit as exc:
            assert "learner_workers: STRICT_PACK needs 6 CPU and 6 GPU on one node" in str(exc), exc
        else:
            raise AssertionError("6 strictly packed GPU ranks cannot fit a 4-GPU node")
        assert len(ray.util.placement_group_table()) == reserved, "nothing was reserved for the plan that cannot fit"
    finally:
        ray.shutdown()
        cluster.shutdown()
    print("placed")


@pytest.mark.slow
def test_the_gpu_preset_lands_in_its_bundles_on_a_simulated_two_node_gpu_cluster():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", "import test_placement; "
                           "test_placement.place_gpu_preset_on_simulated_cluster()"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0 and "placed" in done.stdout, done.stderr[-3000:]
