"""Every fault visible: each kind a stage pool or the learner group absorbs logs one WARNING line (where, which
replica or rank, the cause, the seconds) and is counted by kind (`mmrag.actors.faults`).

Faults are injected into small pools of tiny actors, as tests/test_pool_*.py do, not into training runs.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.request

import pytest
from helpers import drive_until_settled

from mmrag.actors.faults import FaultLog, count_driver_faults
from mmrag.actors.learner import LearnerRankError, wait_for_ranks
from mmrag.actors.pool import ReplicaPool


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def _echo_actor(ray):
    class Echo:  # defined in a function, so Ray ships it by value (workers cannot import a test module)
        """A replica answering `echo(x)` with x after `delay` seconds (long: a stopped process)."""

        def __init__(self, delay: float):
            self.delay = delay

        def echo(self, x: int) -> int:
            time.sleep(self.delay)
            return x

    return ray.remote(num_cpus=0, max_restarts=-1)(Echo)


def test_an_outage_logs_one_line_when_noticed_and_one_when_the_replica_answers_again(caplog):
    pool = ReplicaPool("answer", ["replica 0", "replica 1"], calls_per_replica=2, retries=3, deadline_s=30.0)
    now = time.monotonic()
    pool.lost(0, call_sent=now - 1.0)
    pool.lost(0, call_sent=now - 0.5)  # the call queued behind it: the same outage, no second line
    pool.answered(0, 0.1)
    noticed, back = _warnings(caplog)
    assert re.fullmatch(r"answer pool outage: replica 0 died \(Ray reported the actor dead or restarting\), "
                        r"1\.0 s into its call", noticed), noticed
    assert re.fullmatch(r"answer pool restart: replica 0 answers again 0\.\d s after it was noticed died "
                        r"\(2 calls lost\)", back), back
    assert pool.faults.counts == {"outage": 1, "restart": 1}


def test_an_unknown_fault_kind_is_refused():
    with pytest.raises(ValueError, match="fault kind: expected one of outage, .*, got 'oops'"):
        FaultLog("answer pool").record("oops", "")


@pytest.mark.slow  # Ray actors
def test_a_hedge_a_slow_outage_and_the_stragglers_kill_each_log_their_line(ray_session, caplog):
    actor_class = _echo_actor(ray_session)
    actors = [actor_class.remote(60.0), actor_class.remote(0.0)]
    ray_session.get([actor.__ray_ready__.remote() for actor in actors])
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=2.0, hedge_factor=3.0)
    pool.answered(0, 0.05)
    pool.answered(1, 0.05)
    drive_until_settled(pool, pool.call("echo", 7))
    time.sleep(2.1)
    pool.check_stragglers(time.monotonic())
    hedge, slow, kill = _warnings(caplog)
    assert re.fullmatch(r"answer pool hedge: replica 0 has not answered echo in \d+\.\d s \(3 x the median answer\): "
                        r"sent to replica 1 too", hedge), hedge
    assert re.fullmatch(r"answer pool outage: replica 0 slow \(a hedge on another replica answered first\), "
                        r"\d+\.\d s into its call", slow), slow
    assert re.fullmatch(r"answer pool kill: replica 0 killed as hung \(no answer \d+\.\d s after its call was sent; "
                        r"1 timeouts in a row\); Ray restarts it", kill), kill
    assert pool.faults.counts == {"hedge": 1, "outage": 1, "kill": 1}


@pytest.mark.slow  # Ray actors
def test_a_replica_dying_mid_call_logs_its_outage_the_standby_promoted_and_the_call_re_sent(ray_session, caplog):
    actor_class = _echo_actor(ray_session)
    actors = [actor_class.remote(30.0), actor_class.remote(0.0)]
    ray_session.get([actor.__ray_ready__.remote() for actor in actors])
    pool = ReplicaPool("answer", actors, calls_per_replica=2, retries=3, deadline_s=60.0, serving=1)
    call = pool.call("echo", 7)
    assert call.replica == 0
    time.sleep(0.5)
    ray_session.kill(actors[0], no_restart=False)
    drive_until_settled(pool, call)
    assert call.value == 7
    while 0 in pool.roster.out:  # until Ray has restarted replica 0 and its readiness check answered
        time.sleep(0.2)
        pool.check_health()
    lines = _warnings(caplog)
    assert [line.split(":")[0] for line in lines] == ["answer pool outage", "answer pool promotion",
                                                      "answer pool resend", "answer pool restart"]
    assert lines[1] == "answer pool promotion: standby replica 1 serves in place of replica 0"
    assert lines[2].startswith("answer pool resend: echo call re-sent (re-send 1) after replica 0: "), lines[2]
    assert re.fullmatch(r"answer pool restart: replica 0 answers again \d+\.\d s after it was noticed died "
                        r"\(1 calls lost\)", lines[3]), lines[3]
    assert pool.faults.counts == {"outage": 1, "promotion": 1, "resend": 1, "restart": 1}


@pytest.mark.slow  # Ray tasks
def test_a_learner_rank_that_raises_or_hangs_logs_a_line_naming_the_rank_and_the_seconds(ray_session, caplog):
    @ray_session.remote(num_cpus=0)
    def rank_call(seconds: float, fail: bool) -> int:
        time.sleep(seconds)
        if fail:
            raise RuntimeError("out of memory")
        return 0

    with pytest.raises(LearnerRankError):
        wait_for_ranks([rank_call.remote(0.0, False), rank_call.remote(0.2, True)], "update", 30.0)
    with pytest.raises(LearnerRankError):
        wait_for_ranks([rank_call.remote(0.0, False), rank_call.remote(30.0, False)], "save", 1.0)
    raised, hung = _warnings(caplog)
    assert re.fullmatch(r"learner group learner_fault: rank 1, \d+\.\d s into update: learner rank 1 raised during "
                        r"update: RuntimeError: out of memory", raised), raised
    assert re.fullmatch(r"learner group learner_fault: rank 1, \d+\.\d s into save: learner rank 1 did not finish save "
                        r"within 1 s \(learner.call_timeout_s\)", hung), hung


def _ray_metric(ray, name: str, tags: dict[str, str]) -> float:
    """The value the node's Prometheus endpoint exports now for metric `name` with `tags` (0 before any)."""
    node = ray._private.worker.global_worker.node
    url = f"http://{node.node_ip_address}:{node.metrics_export_port}/metrics"
    wanted = [f'{key}="{value}"' for key, value in tags.items()]
    for line in urllib.request.urlopen(url, timeout=10).read().decode().splitlines():
        if line.startswith(f"ray_{name}") and all(tag in line for tag in wanted):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


METRICS_REPORT_S = 12.0
"""Longer than the period in which a Ray process reports its metrics to the node's endpoint (10 s by default)."""


def _wait_for_ray_metric(ray, name: str, tags: dict[str, str], value: float, timeout_s: float = 60.0) -> None:
    """Wait until the node exports `value` for `name` with `tags` (metrics reach the endpoint every few seconds)."""
    deadline = time.monotonic() + timeout_s
    while (seen := _ray_metric(ray, name, tags)) != value and time.monotonic() < deadline:
        time.sleep(1.0)
    assert seen == value, f"{name} {tags}: {seen:g} after {timeout_s:g} s, expected {value:g}"


@pytest.mark.slow  # Ray metrics
def test_the_pools_faults_and_the_drivers_learner_restores_and_stale_batches_are_counted_in_the_ray_metric(
        ray_session):
    """Counted on top of what earlier tests of the session's Ray counted (its counters live as long as it does)."""
    counted = {("unfit", "answer pool"): 1, ("learner_restore", "learner group"): 1,
               ("stale_batch_dropped", "rollouts"): 2}

    def read() -> dict:
        return {key: _ray_metric(ray_session, "mmrag_faults", {"kind": key[0], "where": key[1]}) for key in counted}

    # Counts of earlier tests may still be on their way to the endpoint: read once nothing changes for a report period.
    before, settled = read(), False
    while not settled:
        time.sleep(METRICS_REPORT_S)
        now = read()
        before, settled = now, now == before
    FaultLog("answer pool").record("unfit", "replica 1 leaves the pool")
    count_driver_faults({"learner_restore": 1, "stale_batch_dropped": 2, "failed_batch": 0})
    for (kind, where), n in counted.items():
        _wait_for_ray_metric(ray_session, "mmrag_faults", {"kind": kind, "where": where}, before[(kind, where)] + n)
    with pytest.raises(ValueError, match="driver fault kind: expected one of learner_restore, .*, got 'outage'"):
        count_driver_faults({"outage": 1})
