"""How a command reaches Ray: the configured cluster, the cluster of a submitted job, or a new local Ray."""

from __future__ import annotations

import os

import ray

from cluster.runtime_env import forwarded_env_vars


def connect(address: str, num_cpus: int) -> bool:
    """Join `address` (its workers get the job variables this command set, see `cluster.runtime_env`);
    else, inside a job from `ray job submit` (which sets RAY_ADDRESS and the job's runtime_env), join that
    job's cluster; else start a single-node Ray declaring `num_cpus` (its workers inherit this process's
    environment). True if this call connected (the caller then disconnects with `ray.shutdown`), False if
    Ray was already initialised."""
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, runtime_env={"env_vars": forwarded_env_vars(os.environ)})
    elif os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"])
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    return True
