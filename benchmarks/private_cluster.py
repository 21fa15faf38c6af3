"""A private multi-node Ray cluster on this machine, for a benchmark whose `mmrag train` runs lose a worker node.

Three nodes: a head that holds no actors (the driver joins it through `ray.address`, so no node loss reaches the
driver), a stage node sized for the config's stage actors and a learner node sized for its learner ranks. Losing a
node takes its raylet, object store and every worker on it; a node like it is added right after, as an autoscaler
would. Nodes are processes of this one, and the actors' workers are children of their node's raylet.

Token authentication comes from the environment, which the nodes and a driver started from this process share:
with RAY_AUTH_MODE=token the nodes require the token of $RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token;
without it they require none (as `ray.cluster_utils.Cluster` starts them) and a driver that finds a token sends it
unchecked.
"""

from __future__ import annotations

import math

import psutil
from ray._private import ray_constants
from ray.cluster_utils import Cluster

from benchmarks.chaos import actor_processes
from mmrag.cluster.connect import RAY_SYSTEM_CONFIG
from mmrag.cluster.resources import placement_plan, resource_plan
from mmrag.config import Config

FAST_FAILURE_DETECTION = {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
                          "health_check_initial_delay_ms": 1000}
"""Node death noticed in about 2 s, not Ray's default 15-30 s."""


def node_resources(cfg: Config) -> dict[str, dict[str, int]]:
    """`add_node` arguments of the stage node (every stage actor of `cfg`'s resource plan, standbys included) and
    of the learner node (the learner's placement group: its ranks and spares)."""
    stage = [group for group in resource_plan(cfg) if group.name != "learner_workers"]
    learner = next(plan for plan in placement_plan(cfg) if plan.name == "learner_workers").bundles
    return {
        "stage": {"num_cpus": math.ceil(sum(g.total_cpus for g in stage)),
                  "num_gpus": math.ceil(sum(g.total_gpus for g in stage))},
        # At least one GPU declared: Ray places an actor that asks for none off a node with a GPU while another
        # node has room (`scheduler_avoid_gpu_nodes`), so the stage actors, placed before the learner's ranks,
        # fill the stage node rather than taking part of the learner's (measured: 2 of 8 went there without it).
        "learner": {"num_cpus": math.ceil(sum(b.num_cpus for b in learner)),
                    "num_gpus": max(1, math.ceil(sum(b.num_gpus for b in learner)))},
    }


class PrivateCluster:
    """The head, the stage node and the learner node, started for `cfg`; a context manager that shuts them all
    down on leaving."""

    def __init__(self, cfg: Config):
        self.resources = node_resources(cfg)
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "_system_config": {**RAY_SYSTEM_CONFIG, **FAST_FAILURE_DETECTION}})
        try:
            self.nodes = {role: self.cluster.add_node(**resources) for role, resources in self.resources.items()}
        except BaseException:
            self.cluster.shutdown()
            raise

    @property
    def address(self) -> str:
        """What `ray.address` joins."""
        return self.cluster.address

    def lose_node(self, role: str) -> None:
        """Kill the `role` node ("stage" or "learner") outright, then add a node like it."""
        self.cluster.remove_node(self.nodes[role], allow_graceful=False)
        self.nodes[role] = self.cluster.add_node(**self.resources[role])

    def actor_processes(self) -> dict[int, str]:
        """pid -> actor class of the stage actors and learner ranks on the worker nodes (never a raylet, the GCS
        or the driver)."""
        found = {}
        for node in self.nodes.values():
            raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process
            try:
                found.update(actor_processes(psutil.Process(raylet.pid)))
            except psutil.NoSuchProcess:  # a node being lost
                continue
        return found

    def shutdown(self) -> None:
        self.cluster.shutdown()

    def __enter__(self) -> PrivateCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
