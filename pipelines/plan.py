"""Print the Ray resource plan of a config and check it fits the cluster it will run on.

One row per actor group the distributed trainer starts (count, CPUs and GPUs each),
then the totals, then the placement groups' bundles and the node each would land on, checked
against, in this order of precedence: the capacity a launcher
YAML declares at full scale (--cluster-yaml), the running cluster at --address or
ray.address (connects, reads `ray.cluster_resources()`, disconnects), or else the local
Ray the trainer would start (ray.num_cpus CPUs and the GPUs torch sees). Exits 1 naming
the first group that does not fit. `--runtime-env-json` prints instead the runtime_env of
the config, for `ray job submit --runtime-env-json "$(mmrag plan --runtime-env-json)"`.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

import ray
import torch
import yaml

from mmrag.actors.placement import node_resources
from mmrag.cluster.resources import (
    PlanDoesNotFit,
    check_fits,
    declared_capacity,
    declared_nodes,
    format_placement,
    format_plan,
    place_bundles,
    placement_plan,
    resource_plan,
)
from mmrag.cluster.runtime_env import runtime_env
from mmrag.config import Config
from mmrag.pipelines.options import config_from_args, run_main



def _connected_nodes(address: str) -> dict[str, dict[str, float]]:
    ray.init(address=address, log_to_driver=False)
    try:
        return node_resources()
    finally:
        ray.shutdown()


def _answers(address: str, timeout_s: float = 3.0) -> bool:
    """Whether a `host:port` address (or `ray://host:port`) takes a TCP connection: Ray's own client waits minutes
    on an address where nothing listens. Other addresses (`auto`) are left to Ray."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return True
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def _nodes(args: argparse.Namespace, cfg: Config) -> tuple[str, dict[str, dict[str, float]]]:
    """Where the capacity comes from, and each node's resources."""
    if args.cluster_yaml:
        with open(args.cluster_yaml) as handle:
            launcher = yaml.safe_load(handle)
        declared_capacity(launcher)  # validates every node type
        return f"declared by {args.cluster_yaml} at max_workers", declared_nodes(launcher)
    address = args.address or cfg.ray.address
    if address:
        if not _answers(address):
            raise ConnectionError(f"nothing answers at {address}")
        return f"Ray cluster at {address}", _connected_nodes(address)
    return "local Ray (ray.num_cpus, visible GPUs)", {"local": {"CPU": float(cfg.ray.num_cpus),
                                                               "GPU": float(torch.cuda.device_count())}}


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.runtime_env_json:
        print(json.dumps(runtime_env(cfg)))
        return 0
    plan = resource_plan(cfg)
    print(format_plan(plan))
    try:
        source, nodes = _nodes(args, cfg)
    except (OSError, ValueError, ConnectionError) as exc:
        hint = "" if args.cluster_yaml else (
            "; no running cluster? check the plan against the cluster you will launch: --cluster-yaml FILE "
            "(a Ray launcher config, e.g. ray_cluster.yaml)")
        print(f"plan: cannot read the cluster's capacity: {exc}{hint}", file=sys.stderr)
        return 2
    capacity = {key: sum(node.get(key, 0.0) for node in nodes.values()) for key in ("CPU", "GPU")}
    print(f"\ncapacity ({source}): {capacity['CPU']:g} CPU, {capacity['GPU']:g} GPU on {len(nodes)} node(s)")
    try:
        check_fits(plan, capacity)
        groups = placement_plan(cfg)
        landing = place_bundles(groups, nodes)
    except (PlanDoesNotFit, ValueError) as exc:
        print(f"does not fit: {exc}", file=sys.stderr)
        return 1
    print("\n" + format_placement(groups, landing))
    print("fits")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
