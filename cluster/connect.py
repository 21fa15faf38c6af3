"""How a command reaches Ray: the configured cluster, the cluster of a submitted job, or a new local Ray."""

from __future__ import annotations

import json
import os

import ray

from mmrag.cluster.runtime_env import forwarded_env_vars

RAY_SYSTEM_CONFIG = {"kill_worker_timeout_milliseconds": 1000}
"""Ray settings a Ray this project starts is given (`ray_cluster.yaml`'s head restates them, `--system-config`).
`kill_worker_timeout_milliseconds`: how long the raylet waits for an actor told to exit before it SIGKILLs the
process (Ray's default 5000). A replica the pools kill as hung is stopped or frozen and never exits by itself, so
this wait is added to every hung replica's restart: measured 7.0 s from `ray.kill` to the restarted actor's first
answer at Ray's default, 3.0 s at 1000 ms (2 cores). A replica that can run exits at once, as before.
Pass `ray.init` a copy: it adds its session's settings (the spilling directory) to the dict it is given."""


def system_config_flag() -> str:
    """`RAY_SYSTEM_CONFIG` as `ray start --head`'s `--system-config` argument."""
    return json.dumps(RAY_SYSTEM_CONFIG, separators=(",", ":"))


def connect(address: str, num_cpus: int) -> bool:
    """Join `address` (its workers get the job variables this command set, see `mmrag.cluster.runtime_env`);
    else, inside a job from `ray job submit` (which sets RAY_ADDRESS and the job's runtime_env), join that
    job's cluster; else start a new single-node Ray declaring `num_cpus` (its workers inherit this process's
    environment; never another Ray running on this machine, which a plain `ray.init()` would join).
    True if this call connected (the caller then disconnects with `ray.shutdown`), False if Ray was already
    initialised."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, runtime_env={"env_vars": forwarded_env_vars(os.environ)})
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"])
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _system_config=dict(RAY_SYSTEM_CONFIG))
    return True
