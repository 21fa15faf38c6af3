"""How a command reaches Ray: the configured cluster, the cluster of a submitted job, or a new local Ray."""

from __future__ import annotations

import os

import ray


def connect(address: str, num_cpus: int) -> bool:
    """Join `address`; else, inside a job from `ray job submit` (which sets RAY_ADDRESS), join that job's
    cluster; else start a single-node Ray declaring `num_cpus`. True if this call connected (the caller
    then disconnects with `ray.shutdown`), False if Ray was already initialised."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address:
        ray.init(address=address)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    return True
