"""Simulated device time: a benchmark-only cost slept on top of a stage call's real work.

This machine has no accelerator, and tiny CPU models cost almost nothing, so orchestration
(overlap of stages, pool scaling, asynchronous learning) cannot be judged from them alone.
A stage actor (or learner rank) given a `DeviceTime` sleeps `per_call_s + per_item_s * items`
after each call (or update), as if a GPU were busy for that long; sleeping frees the CPU, as
waiting on a device would. Only benchmarks pass one (`ActorPools.launch(..., device_time=...)`,
`LearnerGroup(..., device_time=...)`), and they say so in their output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceTime:
    per_call_s: float
    """Fixed cost of one call (kernel launches, a forward over the batch)."""
    per_item_s: float
    """Cost per item of the call (leaf answered, query encoded, ...)."""

    def spend(self, items: int) -> None:
        time.sleep(self.per_call_s + self.per_item_s * items)

    def describe(self) -> str:
        return f"{self.per_call_s * 1000:.0f} ms per call + {self.per_item_s * 1000:.0f} ms per item"
