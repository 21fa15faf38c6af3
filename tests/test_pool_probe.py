"""A call past its tight deadline probes its replica before killing it: a busy replica answers the probe from a
thread of its own and keeps its call; a stopped one does not and is killed; one alive but wedged is killed at
`pools.call_timeout_s`."""

from __future__ import annotations

import os
import signal
import time

from helpers import drive_until_settled

from mmrag.actors.pool import ReplicaPool, probed


def _pool(ray_session, deadline_s: float, probe_timeout_s: float) -> ReplicaPool:
    """One started replica with a tight deadline of 1 s (the floor: its one answer took 0.05 s)."""

    class Slow:  # defined here, so Ray ships it by value (workers cannot import a test module)
        """`work(seconds)` sleeps that long in the replica's call thread, then answers its pid."""

        def work(self, seconds: float) -> int:
            time.sleep(seconds)
            return os.getpid()

        def pid(self) -> int:
            return os.getpid()

    actor = probed(Slow).options(num_cpus=0, max_restarts=-1).remote()
    ray_session.get(actor.__ray_ready__.remote())
    pool = ReplicaPool("answer", [actor], calls_per_replica=2, retries=3, deadline_s=deadline_s,
                       timeout_factor=4.0, min_timeout_s=1.0, probe_timeout_s=probe_timeout_s)
    pool.answered(0, 0.05)
    assert pool.deadline_for(0) == 1.0
    return pool


def test_a_busy_replica_past_its_tight_deadline_answers_the_probe_and_keeps_its_call(ray_session):
    pool = _pool(ray_session, deadline_s=30.0, probe_timeout_s=2.0)
    pid = ray_session.get(pool.actors[0].pid.remote())
    call = pool.call("work", 4.0)
    drive_until_settled(pool, call)
    assert call.value == pid, f"answered by the same process, not a restarted one ({call.error})"
    assert (pool.timed_out, pool.redispatched) == (0, 0), "alive and working: not killed"
    assert pool.probed_alive >= 1, "probed at its 1 s deadline, the probe answered"


def test_a_stopped_replica_does_not_answer_the_probe_and_is_killed_long_before_the_full_deadline(ray_session):
    pool = _pool(ray_session, deadline_s=60.0, probe_timeout_s=1.0)
    pid = ray_session.get(pool.actors[0].pid.remote())
    call = pool.call("work", 1.5)
    os.kill(pid, signal.SIGSTOP)
    start = time.monotonic()
    try:
        while pool.timed_out == 0 and time.monotonic() - start < 30.0:
            ready = ray_session.wait(call.refs, timeout=max(call.deadline - time.monotonic(), 0.0))[0]
            call.settle(set(ready)) if ready else call.expire(time.monotonic())
        noticed = time.monotonic() - start
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:  # killed as hung, as it should be
            pass
    assert pool.timed_out == 1 and pool.probed_alive == 0
    assert noticed < 10.0, f"found at the tight deadline plus the probe's 1 s, not at the 60 s one ({noticed:.1f} s)"
    drive_until_settled(pool, call)
    assert call.value not in (None, pid), f"re-sent and answered by the restarted replica ({call.error})"


def test_a_replica_alive_but_never_answering_is_killed_at_the_full_deadline(ray_session):
    pool = _pool(ray_session, deadline_s=4.0, probe_timeout_s=1.0)
    call = pool.call("work", 600.0)
    start = time.monotonic()
    while pool.timed_out == 0:
        ready = ray_session.wait(call.refs, timeout=max(call.deadline - time.monotonic(), 0.0))[0]
        assert not ready, "the call cannot answer"
        call.expire(time.monotonic())
    assert pool.probed_alive >= 1, "it answered its probes (a wedged device call, not a stopped process)"
    assert time.monotonic() - start >= 3.9, "killed at pools.call_timeout_s, not at a probe it answered"


def test_without_a_probe_timeout_a_call_past_its_tight_deadline_kills_its_replica_as_before(ray_session):
    pool = _pool(ray_session, deadline_s=30.0, probe_timeout_s=0.0)
    call = pool.call("work", 3.0)
    drive_until_settled(pool, call)
    assert pool.timed_out >= 1 and pool.probed_alive == 0
