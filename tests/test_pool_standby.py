"""Standby replicas: loaded and idle while the serving ones are healthy, serving at once when one is lost or hung."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import drive_until_settled

from actors.pool import ReplicaPool
from actors.roster import Roster
from cluster.resources import resource_plan
from mmrag.config import ConfigError, config_from_dict, load_config

ROOT = Path(__file__).resolve().parents[1]
RESTART_S = 4.0
"""How long a restarted replica of these tests takes to load (its constructor sleeps): what a standby saves."""


def test_a_serving_replica_that_leaves_is_replaced_by_the_first_standby_and_stands_by_once_back():
    roster = Roster(size=3, serving=1)
    assert (roster.serving, roster.standby) == ([0], [1, 2])
    assert roster.leave(0, check="ready ref of 0") == 1
    assert (roster.serving, roster.standby, roster.out) == ([1], [2], {0: "ready ref of 0"})
    roster.join(0)
    assert (roster.serving, roster.standby, roster.out) == ([1], [2, 0], {})


def test_without_a_standby_a_replica_back_from_its_check_serves_again():
    roster = Roster(size=2, serving=2)
    assert roster.leave(1, check="ready ref of 1") is None
    assert roster.serving == [0]
    roster.join(1)
    assert (roster.serving, roster.standby) == ([0, 1], [])


def test_a_pool_sends_no_call_to_its_standby_even_when_the_serving_replica_is_full():
    pool = ReplicaPool("answer", ["replica 0", "replica 1"], calls_per_replica=2, retries=3, deadline_s=30.0,
                       serving=1)
    pool.in_flight[0] = 2
    assert pool.serving() == [0] and pool.pick() == 0
    assert not pool.has_room(), "the standby's free slots are not room for new calls"


def test_standby_replicas_are_refused_below_zero_naming_the_key_and_planned_with_every_stage_and_shard():
    with pytest.raises(ConfigError, match=r"^pools\.standby_replicas: expected at least 0, got -1$"):
        config_from_dict({}, ["pools.standby_replicas=-1"])
    plan = resource_plan(load_config(ROOT / "configs/local.yaml", ["pools.standby_replicas=1"]))
    assert [(g.name, g.count) for g in plan] == [
        ("translator", 2), ("encoder", 2), ("retrieval_shards", 4), ("reranker", 2), ("generator_pool", 2),
        ("reward_pool", 2), ("learner_workers", 1)], "2 shards, each 1 serving + 1 standby; ranks are no replicas"


def _up(ray_session, *actors) -> list:
    """Echo replicas made from `actors` (each its constructor's arguments), every one loaded."""
    class Echo:  # defined in a function, so Ray ships it by value (workers cannot import a test module)
        """A replica that answers `echo(x, seconds)` with (x, its name) after `seconds` (`slow_s` more: a stopped
        process); restarted, its constructor takes `restart_s` (loading its model)."""

        def __init__(self, name: str, restart_s: float, slow_s: float = 0.0):
            import ray

            if ray.get_runtime_context().was_current_actor_reconstructed:
                time.sleep(restart_s)
            self.name, self.slow_s, self.calls = name, slow_s, 0

        def echo(self, x: int, seconds: float = 0.0) -> tuple[int, str]:
            self.calls += 1
            time.sleep(seconds + self.slow_s)
            return x, self.name

        def calls_answered(self) -> int:
            return self.calls

    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)(Echo)
    handles = [actor_class.remote(*args) for args in actors]
    ray_session.get([actor.__ray_ready__.remote() for actor in handles])  # all loaded: time only the calls
    return handles


def test_a_killed_serving_replicas_call_is_answered_by_the_standby_before_the_restart_and_it_then_stands_by(
        ray_session):
    actors = _up(ray_session, ("serving", RESTART_S), ("standby", RESTART_S))
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0, serving=1)
    for x in range(3):
        call = pool.call("echo", x)
        drive_until_settled(pool, call)
        assert call.value == (x, "serving")
    call = pool.call("echo", 3, 2.0)  # still running when its replica is killed
    time.sleep(0.5)
    killed = time.monotonic()
    ray_session.kill(actors[0], no_restart=False)
    drive_until_settled(pool, call)
    answered_s = time.monotonic() - killed
    assert call.value == (3, "standby") and answered_s < RESTART_S, \
        f"answered after {answered_s:.1f} s by the standby, not after the {RESTART_S:g} s restart ({call.error})"
    assert (pool.roster.serving, list(pool.roster.out), pool.promoted) == ([1], [0], 1)
    while 0 in pool.roster.out and time.monotonic() < killed + 60:
        time.sleep(0.2)
        pool.check_health()
    assert pool.roster.standby == [0], "restarted and loaded, the lost replica stands by"
    assert time.monotonic() - killed >= RESTART_S
    call = pool.call("echo", 4)
    drive_until_settled(pool, call)
    assert call.value == (4, "standby"), "the promoted replica keeps serving"
    assert ray_session.get(actors[1].calls_answered.remote()) == 2, \
        "the standby had no call before the kill: only the re-sent one and the next"


def test_a_stopped_serving_replicas_call_is_not_hedged_to_the_standby_but_resent_there_at_its_deadline(ray_session):
    actors = _up(ray_session, ("stopped", 0.0, 60.0), ("standby", 0.0))
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=2.0, hedge_factor=3.0,
                       serving=1)
    pool.answered(0, 0.05)
    assert pool.hedge_after(0) == float("inf"), "a hiccup of a healthy replica must not keep its standby busy"
    start = time.monotonic()
    call = pool.call("echo", 7)
    drive_until_settled(pool, call)
    assert call.value == (7, "standby") and 2.0 <= time.monotonic() - start < 5.0, \
        "found at its 2 s deadline, re-sent to the standby at once"
    assert (pool.hedged, pool.timed_out, pool.promoted) == (0, 1, 1)
    assert (pool.roster.serving, list(pool.roster.out)) == ([1], [0]), "killed, out until Ray has restarted it"


def test_a_replica_back_from_its_restart_serves_at_once_when_the_standby_that_replaced_it_is_lost_too(ray_session):
    """Two faults in one pool within a restart: the second finds no standby loaded. The first lost replica, the first
    back, must take the call then, not stand by beside a dead serving replica until that one has restarted too."""
    actors = _up(ray_session, ("first", RESTART_S), ("second", RESTART_S))
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0, serving=1)
    call = pool.call("echo", 1, 1.0)  # each kill finds a call in flight: that is how the pool notices it
    time.sleep(0.3)
    first_killed = time.monotonic()
    ray_session.kill(actors[0], no_restart=False)
    drive_until_settled(pool, call)
    assert call.value == (1, "second"), "promoted at once"
    call = pool.call("echo", 2, 1.0)
    time.sleep(max(first_killed + 0.75 * RESTART_S - time.monotonic(), 0.3))
    second_killed = time.monotonic()
    ray_session.kill(actors[1], no_restart=False)
    drive_until_settled(pool, call)
    answered_s = time.monotonic() - second_killed
    # Who serves, not how fast: on 2 cores the answer came 3.0-5.2 s after the second kill with `ReplicaPool.lost`
    # taking the dead replica out and 5.2-7.7 s without (4 s restarts), too close for a time bound that never fails
    # on a loaded machine; so this checks the outcome, which both versions reach, and not the speed-up.
    assert call.value == (2, "first"), f"answered {answered_s:.1f} s after the second kill: {call.value}, {call.error}"
    while 0 in pool.roster.out and time.monotonic() < second_killed + 60:
        time.sleep(0.2)
        pool.check_health()
    assert pool.roster.serving == [0], "the first replica back serves (the other stands by once it is back)"
