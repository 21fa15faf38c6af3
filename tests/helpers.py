"""What several test files share: comparing training runs, running independent ones at once, driving a pool call
(imported as `helpers`: pytest puts tests/ on the path)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

from mmrag.training.export import exported_trainable_weights


def assert_same_exported_weights(run_dir: str | Path, expected_run_dir: str | Path, atol: float = 1e-5,
                                 rtol: float = 1e-4) -> None:
    """Two runs' exports hold the same trainable weights, to within `atol` and `rtol` (both 0: bit for bit)."""
    expected = exported_trainable_weights(Path(expected_run_dir) / "export")
    actual = exported_trainable_weights(Path(run_dir) / "export")
    assert expected.keys() == actual.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, atol=atol, rtol=rtol, msg=lambda m, name=name: f"{name}: {m}")


def run_in_processes(function: Callable, *calls: tuple) -> list:
    """`function(*arguments)` for each tuple of `calls`, each in a spawned process of one torch thread, all at once;
    the results in order. For independent in-process runs that would otherwise leave all cores but one idle.

    `function` must be importable (a test module's top-level function is: spawned processes get the parent's path).
    """
    context = multiprocessing.get_context("spawn")  # a fork of a process that already ran torch can deadlock
    with ProcessPoolExecutor(len(calls), mp_context=context, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        futures = [pool.submit(function, *arguments) for arguments in calls]
        return [future.result() for future in futures]


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
