"""A hung learner rank is found within a few multiples of the recent update time, not `learner.call_timeout_s`.

A distributed run with two learner ranks; rank 1 is stopped (SIGSTOP: a process that cannot run, as a wedged
device call or a swapped-out node) right after update `FREEZE_AT` has started. Its update's deadline is
`learner.call_timeout_factor` times the median of the earlier updates (at least `learner.min_call_timeout_s`), so
the group is restored within seconds and the run goes on; the step's extra seconds are what the hang cost.
"""

from __future__ import annotations

import os
import signal
import statistics
import time

import pytest

from mmrag.actors.learner import LearnerGroup
from mmrag.actors.stage_pools import ActorPools
from mmrag.training.loop import train
from mmrag.training.metrics_log import step_records

pytestmark = pytest.mark.slow  # a distributed run on Ray

FREEZE_AT = 3
FLOOR_S = 5.0


class FreezingLearner(LearnerGroup):
    """Stops rank 1's process right after update `FREEZE_AT` has started on every rank."""

    frozen_at: float | None = None
    restarts: list[tuple[float, float]] = []
    """(when the restart began, when it ended) of each restart."""

    def start_update(self, roots):
        self.updates = getattr(self, "updates", 0) + 1
        if self.updates != FREEZE_AT:
            return super().start_update(roots)
        victim = self.pids()[1]  # asked while the ranks are idle: a busy rank answers only after its update
        pending = super().start_update(roots)
        os.kill(victim, signal.SIGSTOP)
        self.frozen_at = time.monotonic()
        return pending

    def restart(self, checkpoint_dir=None):
        began = time.monotonic()
        super().restart(checkpoint_dir)
        self.restarts = [*self.restarts, (began, time.monotonic())]


def test_a_frozen_learner_rank_costs_seconds_not_the_full_call_timeout(ray_session, tiny_config, tmp_path):
    cfg = tiny_config(tmp_path, "learner.num_workers=2", "train.steps=6", "train.checkpoint_every=1",
                      "learner.call_timeout_s=600", f"learner.min_call_timeout_s={FLOOR_S}",
                      "learner.call_timeout_factor=4")
    start = time.monotonic()
    pools = ActorPools.launch(cfg)
    learner = FreezingLearner(cfg)
    try:
        summary = train(cfg, pools, learner, progress=False)
    finally:
        learner.shutdown()
        pools.shutdown()
    assert summary["trained_rollouts"] == list(range(1, 7))
    records = step_records(tmp_path)
    assert [r["faults"]["learner_restore"] for r in records].count(1) == 1, "one restore, for the frozen rank"
    assert summary["faults"]["learner_restore"] == 1
    ((began, ended),) = learner.restarts
    found_s = began - learner.frozen_at
    updates = [r["stage_seconds"]["learn"] for r in records[:FREEZE_AT - 1]]
    print(f"frozen learner rank: found {found_s:.1f} s after it stopped (updates before: median "
          f"{statistics.median(updates):.2f} s; floor {FLOOR_S:g} s), group restored in {ended - began:.1f} s; "
          f"run {time.monotonic() - start:.0f} s")
    assert found_s < 60, "found within a few update times and the floor, far under learner.call_timeout_s = 600"
