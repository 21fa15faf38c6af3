"""A stage call's deadline: tight for a replica that has answered since it started, the full one while it starts."""

from __future__ import annotations

import pytest

from actors.pool import ReplicaPool


def test_a_replica_that_answered_gets_the_factor_times_the_slowest_recent_answer_and_a_starting_one_the_full_deadline():
    pool = ReplicaPool("answer", ["replica 0", "replica 1"], calls_per_replica=2, retries=3, deadline_s=300.0,
                       timeout_factor=8.0, min_timeout_s=2.0)
    assert pool.deadline_for(0) == 300.0, "no answer yet: it may still be loading its model"
    pool.answered(0, 0.1)
    assert pool.deadline_for(0) == 2.0, "8 x 0.1 s is under the floor"
    pool.answered(0, 1.5)
    assert pool.deadline_for(0) == pytest.approx(12.0)
    assert pool.deadline_for(1) == 300.0, "replica 1 has not answered since it started"
    pool.lost(0)
    assert pool.deadline_for(0) == 300.0, "restarting: its first call waits for the restart"
    pool.answered(0, 100.0)
    assert pool.deadline_for(0) == 300.0, "never above pools.call_timeout_s"


def test_without_a_factor_every_call_gets_the_configured_deadline():
    pool = ReplicaPool("answer", ["replica 0"], calls_per_replica=2, retries=3, deadline_s=30.0)
    pool.answered(0, 0.1)
    assert pool.deadline_for(0) == 30.0
