"""Print the Ray resource plan of a config and check it fits the cluster it will run on.

One row per actor group the distributed trainer starts (count, CPUs and GPUs each),
then the totals, checked against, in this order of precedence: the capacity a launcher
YAML declares at full scale (--cluster-yaml), the running cluster at --address or
ray.address (connects, reads `ray.cluster_resources()`, disconnects), or else the local
Ray the trainer would start (ray.num_cpus CPUs and the GPUs torch sees). Exits 1 naming
the first group that does not fit. `--runtime-env-json` prints instead the runtime_env of
the config, for `ray job submit --runtime-env-json "$(mmrag plan --runtime-env-json)"`.
"""

from __future__ import annotations

import argparse
import json
import sys

import ray
import torch
import yaml

from cluster.resources import (
    PlanDoesNotFit,
    check_fits,
    declared_capacity,
    format_plan,
    resource_plan,
)
from cluster.runtime_env import runtime_env
from mmrag.config import Config
from pipelines.options import add_config_options, config_from_args, run_main


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_options(parser)
    parser.add_argument("--cluster-yaml", help="check against this Ray launcher config at max_workers")
    parser.add_argument("--address", help="check against the running cluster at this address (default: ray.address)")
    parser.add_argument("--runtime-env-json", action="store_true",
                        help="print the config's job runtime_env as JSON (working dir: the current one) and exit")


def _connected_capacity(address: str) -> dict[str, float]:
    ray.init(address=address, log_to_driver=False)
    try:
        return dict(ray.cluster_resources())
    finally:
        ray.shutdown()


def _local_capacity(cfg: Config) -> dict[str, float]:
    return {"CPU": float(cfg.ray.num_cpus), "GPU": float(torch.cuda.device_count())}


def _capacity(args: argparse.Namespace, cfg: Config) -> tuple[str, dict[str, float]]:
    if args.cluster_yaml:
        with open(args.cluster_yaml) as handle:
            return f"declared by {args.cluster_yaml} at max_workers", declared_capacity(yaml.safe_load(handle))
    address = args.address or cfg.ray.address
    if address:
        return f"Ray cluster at {address}", _connected_capacity(address)
    return "local Ray (ray.num_cpus, visible GPUs)", _local_capacity(cfg)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    if args.runtime_env_json:
        print(json.dumps(runtime_env(cfg)))
        return 0
    plan = resource_plan(cfg)
    print(format_plan(plan))
    try:
        source, capacity = _capacity(args, cfg)
    except (OSError, ValueError, ConnectionError) as exc:
        print(f"plan: cannot read the cluster's capacity: {exc}", file=sys.stderr)
        return 2
    print(f"\ncapacity ({source}): {capacity.get('CPU', 0.0):g} CPU, {capacity.get('GPU', 0.0):g} GPU")
    try:
        check_fits(plan, capacity)
    except (PlanDoesNotFit, ValueError) as exc:
        print(f"does not fit: {exc}", file=sys.stderr)
        return 1
    print("fits")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
