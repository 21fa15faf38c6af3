"""Torch threads in a Ray actor or Serve replica: as many as the CPUs Ray assigned it.

Each actor's constructor calls `use_actor_cpus` first (`mmrag.cpu_threads` decides, without Ray).
Ray also sets `OMP_NUM_THREADS` from them, but only when a task starts, after the worker has
imported torch, whose thread pool the variable no longer sizes.
"""

from __future__ import annotations

import ray

from mmrag.cpu_threads import ThreadDecision, use_owned_cpus


def assigned_cpus() -> float | None:
    """The CPUs Ray assigned this process (0 for an actor placed without any); None outside a Ray worker."""
    if not ray.is_initialized():  # (asking for the runtime context would start a local Ray)
        return None
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:
        return None
    return context.get_assigned_resources().get("CPU", 0.0)


def use_actor_cpus(role: str) -> ThreadDecision:
    """`use_owned_cpus` for the actor `role`, with the CPUs Ray assigned it."""
    return use_owned_cpus(role, assigned_cpus())
