"""What several test files share: comparing training runs, driving a pool call (imported as `helpers`: pytest puts
tests/ on the path)."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from mmrag.training.export import exported_trainable_weights


def assert_same_exported_weights(run_dir: str | Path, expected_run_dir: str | Path, atol: float = 1e-5) -> None:
    """Two runs' exports hold the same trainable weights, to within `atol`."""
    expected = exported_trainable_weights(Path(expected_run_dir) / "export")
    actual = exported_trainable_weights(Path(run_dir) / "export")
    assert expected.keys() == actual.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, atol=atol, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")


def drive_until_settled(pool, call) -> None:
    """Drive a `ReplicaPool` call as `ActorPools.wait` does: wait until a ref is ready or its next deadline, settle
    or expire it, and take back replicas whose health check answered."""
    import ray

    while not call.done:
        ready = set(ray.wait(call.refs, timeout=max(call.deadline - time.monotonic(), 0.0), fetch_local=False)[0])
        if ready:
            call.settle(ready)
        else:
            call.expire(time.monotonic())
        pool.check_health()
