"""A stage call's deadline: tight for a replica that has answered since it started, the full one while it starts."""

from __future__ import annotations

import time

import pytest
from helpers import drive_until_settled

from mmrag.actors.pool import SUSPECT_SECONDS, ReplicaPool
from mmrag.actors.stage_pools import wait_until_one_up


def test_a_replica_that_answered_gets_the_factor_times_the_median_recent_answer_and_a_starting_one_the_full_deadline():
    pool = ReplicaPool("answer", ["replica 0", "replica 1"], calls_per_replica=2, retries=3, deadline_s=300.0,
                       timeout_factor=8.0, min_timeout_s=2.0)
    assert pool.deadline_for(0) == 300.0, "no answer yet: it may still be loading its model"
    pool.answered(0, 0.1)
    assert pool.deadline_for(0) == 2.0, "8 x 0.1 s is under the floor"
    pool.answered(0, 1.5)
    pool.answered(0, 1.0)
    assert pool.deadline_for(0) == pytest.approx(8.0), "8 x the median of 0.1, 1.5 and 1.0 s"
    pool.answered(0, 20.0)
    pool.answered(0, 0.9)
    assert pool.deadline_for(0) == pytest.approx(8.0), "one slow answer does not hold the deadline up"
    assert pool.deadline_for(1) == 300.0, "replica 1 has not answered since it started"
    pool.lost(0)
    assert pool.deadline_for(0) == 300.0, "restarting: its first call waits for the restart"
    for _ in range(6):
        pool.answered(0, 100.0)
    assert pool.deadline_for(0) == 300.0, "never above pools.call_timeout_s"


def test_without_a_factor_every_call_gets_the_configured_deadline():
    pool = ReplicaPool("answer", ["replica 0"], calls_per_replica=2, retries=3, deadline_s=30.0)
    pool.answered(0, 0.1)
    assert pool.deadline_for(0) == 30.0


class _Replica:
    """A stage replica that only has to exist: the test drives the pool's bookkeeping, not calls."""


def test_a_replica_hung_twice_in_a_row_stays_avoided_twice_as_long_even_when_its_queued_call_then_reports_it_lost(
        ray_session):
    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1)(_Replica)
    pool = ReplicaPool("answer", [actor_class.remote(), actor_class.remote()], calls_per_replica=2, retries=3,
                       deadline_s=30.0)
    start = time.monotonic()
    pool.hung(0)
    assert pool.suspect_until[0] == pytest.approx(start + SUSPECT_SECONDS, abs=1.0)
    pool.hung(0)
    # Killing the replica fails the call queued behind the hung one; settling that call reports the replica lost.
    pool.lost(0)
    assert pool.suspect_until[0] == pytest.approx(start + 2 * SUSPECT_SECONDS, abs=1.0), \
        "the second timeout in a row doubles the suspension; a loss reported after it must not shorten it"
    assert 0 in pool.roster.out and pool.pick() == 1


def test_an_outage_spans_the_first_lost_call_to_the_replicas_next_answer_and_counts_every_call_lost_in_it():
    pool = ReplicaPool("answer", ["replica 0", "replica 1"], calls_per_replica=2, retries=3, deadline_s=30.0)
    now = time.monotonic()
    pool.lost(0, call_sent=now - 1.0)
    pool.lost(0, call_sent=now - 0.5)  # the call queued behind it fails too: the same outage
    pool.answered(1, 0.1)
    assert pool.outages.closed == [], "a sibling's answer does not end replica 0's outage"
    pool.answered(0, 0.1)
    (outage,) = pool.outages.records()
    assert (outage["pool"], outage["replica"], outage["cause"], outage["calls_lost"]) == ("answer", 0, "died", 2)
    assert outage["work_lost_s"] == pytest.approx(1.5, abs=0.1)
    assert now <= outage["noticed"] <= outage["answered_again"]


def test_a_call_held_by_a_stopped_replica_is_hedged_to_its_sibling_and_the_straggler_killed_at_its_deadline(
        ray_session):
    class Echo:  # defined here, so Ray ships it by value (workers cannot import a test module)
        """A replica that answers `echo(x)` with (x, its delay) after `delay` seconds (long: a stopped process)."""

        def __init__(self, delay: float):
            self.delay = delay

        def echo(self, x: int) -> tuple[int, float]:
            time.sleep(self.delay)
            return x, self.delay

    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1)(Echo)
    actors = [actor_class.remote(60.0), actor_class.remote(0.0)]
    ray_session.get([actor.__ray_ready__.remote() for actor in actors])  # both started: time only the call
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=2.0, hedge_factor=3.0)
    pool.answered(0, 0.05)
    pool.answered(1, 0.05)
    assert pool.hedge_after(0) == pytest.approx(0.15)
    start = time.monotonic()
    call = pool.call("echo", 7)
    drive_until_settled(pool, call)
    assert call.value == (7, 0.0), f"the sibling's answer ({call.error})"
    assert time.monotonic() - start < 1.5, "hedged after 0.15 s, not after the 2 s deadline"
    assert (pool.hedged, pool.timed_out, pool.in_flight) == (1, 0, [1, 0]), "replica 0's slot held by the straggler"
    assert pool.pick() == 1, "the slow replica is avoided"
    time.sleep(max(start + 2.1 - time.monotonic(), 0.0))
    pool.check_stragglers(time.monotonic())
    assert (pool.timed_out, pool.in_flight, pool.stragglers) == (1, [0, 0], []), \
        "past its deadline the straggler counts hung: its replica killed (Ray restarts it), its slot freed"


def test_a_pool_of_one_replica_never_hedges():
    pool = ReplicaPool("answer", ["replica 0"], calls_per_replica=2, retries=3, deadline_s=30.0, hedge_factor=3.0)
    pool.answered(0, 0.1)
    assert pool.hedge_after(0) == float("inf")


def test_a_broadcast_leaves_out_a_dead_replica_instead_of_failing(ray_session):
    class Counter:  # defined here, so Ray ships it by value
        def count(self) -> int:
            return 1

    actor_class = ray_session.remote(num_cpus=0)(Counter)
    actors = [actor_class.remote(), actor_class.remote()]
    ray_session.get(actors[0].__ray_ready__.remote())
    ray_session.kill(actors[1], no_restart=True)
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0)
    assert pool.broadcast("count") == [1]


def test_a_stage_starts_once_one_replica_is_up_and_the_one_still_loading_joins_its_pool_when_up(ray_session):
    class Loading:  # defined here, so Ray ships it by value
        def __init__(self, seconds: float):
            time.sleep(seconds)  # loading its model (or stopped while it does)

    actor_class = ray_session.remote(num_cpus=0)(Loading)
    actors = [actor_class.remote(3.0), actor_class.remote(0.0)]
    starting = wait_until_one_up("answer", actors)
    # No time bound (starting two actors took 3.5 s on 2 loaded cores): returning while replica 0 is still loading
    # shows it waited for one replica only.
    assert list(starting) == [0], "replica 1 is up; replica 0 still loading"
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0)
    pool.starting(starting)
    assert pool.serving() == [1]
    ray_session.get(starting[0])
    pool.check_health()
    assert pool.serving() == [0, 1]


def test_a_replica_killed_while_it_loads_restarts_and_the_stage_still_starts(ray_session):
    class KilledWhileLoading:  # defined here, so Ray ships it by value
        def __init__(self):
            import os
            import signal

            import ray

            if not ray.get_runtime_context().was_current_actor_reconstructed:
                os.kill(os.getpid(), signal.SIGKILL)  # what a fault (or the OOM killer) does to a loading process

    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(KilledWhileLoading)
    actors = [actor_class.remote()]
    assert wait_until_one_up("answer", actors) == {}, "the restarted replica is up"


def test_a_replica_whose_constructor_raises_fails_the_start_at_once_naming_it(ray_session):
    class CannotLoad:  # defined here, so Ray ships it by value
        def __init__(self):
            raise FileNotFoundError("model.safetensors")

    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(CannotLoad)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"(?s)answer replica 0 failed to start: .*model\.safetensors"):
        wait_until_one_up("answer", [actor_class.remote()])
    assert time.monotonic() - start < 60, "a constructor error is not waited out"
