"""Standby replicas: loaded and idle while the serving ones are healthy, serving at once when one is lost or hung."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers import drive_until_settled

from mmrag.actors.pool import ReplicaPool
from mmrag.actors.roster import Roster
from mmrag.cluster.resources import resource_plan
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
    plan = resource_plan(load_config(ROOT / "mmrag/configs/local.yaml", ["pools.standby_replicas=1"]))
    assert [(g.name, g.count) for g in plan] == [
        ("translator", 2), ("encoder", 2), ("retrieval_shards", 4), ("reranker", 2), ("generator_pool", 2),
        ("reward_pool", 2), ("learner_workers", 1)], "2 shards, each 1 serving + 1 standby; ranks are no replicas"


def _up(ray_session, *actors) -> list:
    """Echo replicas made from `actors` (each its constructor's arguments), every one loaded."""
    class Echo:  # defined in a function, so Ray ships it by value (workers cannot import a test module)
        """A replica that answers `echo(x, seconds)` with (x, its name) after `seconds` (`slow_s` more: a stopped
        process), one call at a time; restarted, its constructor takes `restart_s` (loading its model). It tells
        how many calls it has started while it runs one (in a group of its own)."""

        def __init__(self, name: str, restart_s: float, slow_s: float = 0.0):
            import ray

            if ray.get_runtime_context().was_current_actor_reconstructed:
                time.sleep(restart_s)
            self.name, self.slow_s, self.calls = name, slow_s, 0

        def echo(self, x: int, seconds: float = 0.0) -> tuple[int, str]:
            self.calls += 1
            time.sleep(seconds + self.slow_s)
            return x, self.name

        @ray_session.method(concurrency_group="inspect")
        def calls_started(self) -> int:
            return self.calls

    actor_class = ray_session.remote(num_cpus=0, max_restarts=-1, max_task_retries=0,
                                     concurrency_groups={"inspect": 1})(Echo)
    handles = [actor_class.remote(*args) for args in actors]
    ray_session.get([actor.__ray_ready__.remote() for actor in handles])  # all loaded: time only the calls
    return handles


def _kill_once_running(ray_session, actor, call_number: int) -> None:
    """Kill `actor` (Ray restarts it) once it has started its `call_number`-th call, so that the kill fails that call
    (one not yet sent to the actor would wait in Ray's queue for the restart instead)."""
    while ray_session.get(actor.calls_started.remote()) < call_number:
        time.sleep(0.05)
    ray_session.kill(actor, no_restart=False)


def test_a_killed_serving_replicas_call_is_answered_by_the_standby_before_the_restart_and_it_then_stands_by(
        ray_session):
    actors = _up(ray_session, ("serving", RESTART_S), ("standby", RESTART_S))
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0, serving=1)
    for x in range(3):
        call = pool.call("echo", x)
        drive_until_settled(pool, call)
        assert call.value == (x, "serving")
    call = pool.call("echo", 3, 1.0)
    killed = time.monotonic()
    _kill_once_running(ray_session, actors[0], 4)
    drive_until_settled(pool, call)
    # Who answered, not how fast (on 2 loaded cores Ray took up to 2 s to report the kill): the restarted replica
    # would answer as "serving", and the killed one is still out, restarting.
    assert call.value == (3, "standby"), f"answered by the standby, not after the restart ({call.error})"
    assert (pool.roster.serving, list(pool.roster.out), pool.promoted) == ([1], [0], 1)
    while 0 in pool.roster.out and time.monotonic() < killed + 60:
        time.sleep(0.2)
        pool.check_health()
    assert pool.roster.standby == [0], "restarted and loaded, the lost replica stands by"
    assert time.monotonic() - killed >= RESTART_S
    call = pool.call("echo", 4)
    drive_until_settled(pool, call)
    assert call.value == (4, "standby"), "the promoted replica keeps serving"
    assert ray_session.get(actors[1].calls_started.remote()) == 2, \
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


def test_a_promoted_standby_lost_before_the_first_replica_is_back_leaves_the_pool_and_the_first_back_serves(
        ray_session):
    """Two faults in one pool within a restart: the second finds no standby loaded. The dead replica must leave the
    pool all the same, so that its call goes to the first replica back instead of waiting on the dead one (which
    restarts slower here, so the order in which they come back is fixed)."""
    actors = _up(ray_session, ("first", RESTART_S), ("second", 3 * RESTART_S))
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=30.0, serving=1)
    call = pool.call("echo", 1, 1.0)  # each kill finds a call running: that is how the pool notices it
    _kill_once_running(ray_session, actors[0], 1)
    drive_until_settled(pool, call)
    assert call.value == (1, "second"), "promoted at once"
    call = pool.call("echo", 2, 1.0)
    _kill_once_running(ray_session, actors[1], 2)  # its first call was the re-sent one
    ray_session.wait(call.refs)  # the kill fails the call: settling it reports the second loss
    call.settle()
    assert (sorted(pool.roster.out), pool.roster.serving, pool.roster.standby) == ([0, 1], [], []), \
        "the dead replica leaves the pool though no standby is loaded (the first is still restarting), not serving on"
    while 0 in pool.roster.out:
        ray_session.wait([pool.roster.out[0]])
        pool.check_health()
    assert (pool.roster.serving, list(pool.roster.out)) == ([0], [1]), \
        "the first replica back serves; the second, still restarting, stands by once its check answers"
    drive_until_settled(pool, call)
    assert call.value == (2, "first"), f"re-sent to the first replica back ({call.error})"
