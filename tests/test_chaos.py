"""Chaos: SIGKILL stage actors and a learner rank mid-call, SIGSTOP a replica past its deadline, a rank that raises.

Stage actors, one serving replica per stage and per shard with one standby each
(`pools.standby_replicas`): the generator, the reward actor, a retrieval shard, the
translator and the reranker each lose their process while a call of theirs is in flight.
Each lost call is re-sent to the standby promoted in its place (one promotion per kill, a
standby answers no call before), Ray restarts the lost replica (reloading model, shard,
weights) and it stands by; because every sampling call is seeded by its micro-batch alone,
the run draws exactly the trees an uninterrupted run draws. The same run loses one of its two
learner ranks mid-update: the group is rebuilt from the latest checkpoint, the steps after it
are redone with the same batches, and the run still ends with the uninterrupted run's weights.
(A lone replica's call waiting for its restart, and a sibling taking over, are the lag-2
run's below: no standby there.) The run reaches its step count, exports, and balances its
ledger. At lag 2 with a checkpoint every step, the same kills plus a
generator stopped (SIGSTOP) for longer than the call deadline and a rank killed inside
`save`: the run reaches its steps, every step's own ledger check passes, it trains the
uninterrupted run's rollouts 1..STEPS, and the driver idles while the replica hangs. A rank
whose own code raises on one version is restored `learner.max_restores` times, then the run
stops naming the rank, the call and the error.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import pytest
import ray
from helpers import assert_same_exported_weights

from mmrag.actors.learner import LearnerGroup, wait_for_ranks
from mmrag.actors.stage_pools import ActorPools
from mmrag.training.metrics_log import step_records
from mmrag.training.loop import LearnerGaveUp, train

pytestmark = pytest.mark.slow  # kills actors of distributed runs on Ray

STEPS = 4


def process_id(actor) -> int:
    return ray.get(actor.__ray_call__.remote(lambda _: os.getpid()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class ChaosPools(ActorPools):
    """Kills (or stops, with `stop_at`) the replica serving the n-th call of a stage right after that call is
    submitted (so it is in flight)."""

    kill_at: dict[tuple[str, int], str] = {}
    stop_at: tuple[str, int] | None = None

    def start_chaos(self, kill_at: dict[tuple[str, int], str], stop_at: tuple[str, int] | None = None,
                    stop_s: float = 0.0) -> None:
        self.kill_at, self.stop_at, self.stop_s, self.calls, self.killed = kill_at, stop_at, stop_s, Counter(), []
        self.pids = {id(a): process_id(a) for pool in [*self.pools.values(), *self.shards] for a in pool.actors}
        self.hung_since: tuple[float, float] | None = None
        self.driver_cpu_while_hung: float | None = None

    def submit(self, stage, *args):
        future = super().submit(stage, *args)
        self.calls[stage] += 1
        if (stage, self.calls[stage]) in self.kill_at or (stage, self.calls[stage]) == self.stop_at:
            call = future.searches[0] if stage == "retrieve" else future.call  # retrieval: shard 0's search
            actor = call.pool.actors[call.replica]
            pid = self.pids[id(actor)]
            if not _alive(pid):  # killed earlier in this run and restarted by Ray: a new process
                pid = self.pids[id(actor)] = process_id(actor)
            if (stage, self.calls[stage]) == self.stop_at:
                os.kill(pid, signal.SIGSTOP)
                threading.Timer(self.stop_s, _resume_if_alive, args=(pid,)).start()
                self.hung_since = (time.monotonic(), time.process_time())
            else:
                os.kill(pid, signal.SIGKILL)
                self.killed.append(self.kill_at[(stage, self.calls[stage])])
        return future

    def all_replicas_in(self, timeout_s: float) -> bool:
        """Poll the health checks until no replica of any pool is out (each serves or stands by, loaded), at most
        `timeout_s`; whether they all came in."""
        until = time.monotonic() + timeout_s
        while any(pool.roster.out for pool in self._all_pools()) and time.monotonic() < until:
            time.sleep(0.2)
            for pool in self._all_pools():
                pool.check_health()
        return not any(pool.roster.out for pool in self._all_pools())

    def wait(self, futures, timeout=None):
        done = super().wait(futures, timeout)
        if self.hung_since and self.driver_cpu_while_hung is None and self.timed_out_calls():
            wall, cpu = self.hung_since
            self.driver_cpu_while_hung = (time.process_time() - cpu) / (time.monotonic() - wall)
        return done


def _resume_if_alive(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:  # killed past its deadline, as it should be
        pass


class ChaosLearner(LearnerGroup):
    """Kills rank 1's process right after update `kill_at` (or save `kill_in_save`) has started on every rank;
    from version `raise_at` on, every update raises inside the ranks' own code."""

    kill_at = kill_in_save = 0
    raise_at: int | None = None

    def start_update(self, roots):
        self.updates = getattr(self, "updates", 0) + 1
        if self.version == self.raise_at:
            return super().start_update(None)  # DeepSpeedRank.update slices its roots: a TypeError on every rank
        if self.updates != self.kill_at:
            return super().start_update(roots)
        victim = self.pids()[1]  # asked while the ranks are idle: a busy rank answers only after its update
        pending = super().start_update(roots)
        os.kill(victim, signal.SIGKILL)
        return pending

    def save(self, directory):
        self.saves = getattr(self, "saves", 0) + 1
        if self.saves != self.kill_in_save:
            return super().save(directory)
        victim = self.pids()[1]
        calls = [rank.save.remote(str(directory)) for rank in self.ranks]
        os.kill(victim, signal.SIGKILL)
        wait_for_ranks(calls, "save", self.cfg.learner.call_timeout_s)


def assert_finished_and_balanced(run_dir, summary) -> None:
    """The run reached its steps and exported; every step passed its own ledger check, so the trained rollouts
    are the learner's, each once: they must be the uninterrupted run's 1..STEPS."""
    assert max(r["step"] for r in step_records(run_dir)) == STEPS
    assert (run_dir / "export" / "export.json").is_file()
    assert summary["trained_rollouts"] == list(range(1, STEPS + 1))


def test_killed_serving_replicas_are_replaced_by_their_standbys_and_a_rank_killed_mid_update_is_rebuilt(
        ray_session, tiny_config, distributed_sync_run, tmp_path):
    """One serving replica per stage and per shard, one standby each: every call lost with its replica is answered
    by the standby promoted in its place, while Ray restarts the lost one, which then stands by. Deadlines are the
    flat `pools.call_timeout_s` (`call_timeout_factor=0`), so that only the kills promote (on loaded cores the
    tight 5 s deadline can count a slow healthy call hung, and promote too). Rank 1 of two is killed in update 4:
    the group is rebuilt from step 2's checkpoint and steps 3 and 4 are trained again (one run for both, since each
    run costs a fresh set of actor processes)."""
    cfg = tiny_config(tmp_path, "pools.standby_replicas=1", "pools.call_timeout_factor=0", "learner.num_workers=2",
                      "train.checkpoint_every=2", f"train.steps={STEPS}")
    pools = ChaosPools.launch(cfg)
    learner = ChaosLearner(cfg)
    learner.kill_at = 4
    try:
        # Calls 1-2 of each stage are the untrained evaluation's and step 1's first micro-batch.
        pools.start_chaos({("answer", 3): "generator", ("retrieve", 4): "retrieval shard", ("score", 6): "reward",
                           ("translate", 5): "translator", ("rerank", 7): "reranker"})
        assert pools.all_replicas_in(timeout_s=120), "every standby loaded before the first kill"
        assert all(len(pool.roster.standby) == 1 for pool in pools._all_pools())
        standby = {pool.name: pool.roster.standby[0] for pool in pools._all_pools()}
        summary = train(cfg, pools, learner, progress=False)
        assert sorted(pools.killed) == ["generator", "reranker", "retrieval shard", "reward", "translator"]
        assert sum(pools.redispatched_calls().values()) >= 5, pools.redispatched_calls()
        promoted = pools.promoted_standbys()
        standby_answered = sorted(pool.name for pool in pools._all_pools() if pool.started[standby[pool.name]])
        assert pools.all_replicas_in(timeout_s=120), "every killed replica restarted and loaded"
        rosters = {pool.name: (pool.roster.serving, pool.roster.standby) for pool in pools._all_pools()}
    finally:
        learner.shutdown()
        pools.shutdown()
    killed_pools = ["answer", "rerank", "retrieval_shard_0", "score", "translate"]
    assert promoted == dict.fromkeys(killed_pools, 1), "one promotion per kill, none elsewhere"
    assert standby_answered == killed_pools, "standbys answered only where a kill promoted them"
    for name, roles in rosters.items():  # (serving, standing by): swapped where a kill promoted the standby
        first_roles = ([1 - standby[name]], [standby[name]])
        assert roles == (first_roles[::-1] if name in killed_pools else first_roles), f"{name}: {roles}"
    assert_finished_and_balanced(tmp_path, summary)
    assert summary["ledger"]["failed_attempts"] == 0, "every lost call was re-sent, to the standby"
    assert summary["ledger"]["steps_redone"] == 1
    assert summary["ledger"]["abandoned_attempts"] == 2, "rollouts 3 (trained) and 4 (in the failed update)"
    assert summary["ledger"]["restores"]["rank_lost"] == 1
    # Two ranks sum gradients in another order than the yardstick's one; see test_learner's ZeRO-3 comparison.
    assert_same_exported_weights(tmp_path, distributed_sync_run, atol=5e-5)


@pytest.mark.slow
def test_at_lag_2_killed_actors_and_a_rank_lost_in_save_the_run_trains_the_uninterrupted_rollouts(
        ray_session, tiny_config, tmp_path):
    cfg = tiny_config(tmp_path, "generator.num_replicas=2", "learner.num_workers=2", "train.max_policy_lag=2",
                      "train.checkpoint_every=1", f"train.steps={STEPS}")
    pools = ChaosPools.launch(cfg)
    learner = ChaosLearner(cfg)
    learner.kill_at, learner.kill_in_save = 2, 3
    try:
        pools.start_chaos({("answer", 3): "generator", ("translate", 6): "translator"})
        summary = train(cfg, pools, learner, progress=False)
        assert sorted(pools.killed) == ["generator", "translator"]
    finally:
        learner.shutdown()
        pools.shutdown()
    assert_finished_and_balanced(tmp_path, summary)
    assert summary["ledger"]["restores"]["rank_lost"] == 2, "one rank killed in an update, one in a save"


@pytest.mark.slow
def test_at_lag_2_a_generator_hung_past_its_deadline_is_killed_and_its_call_resent_without_busy_waiting(
        ray_session, tiny_config, tmp_path):
    """Alone, so that no learner restore discards the hung call before its deadline; not hedged (a hedge to the
    sibling would answer first: tests/test_pool_deadlines.py), so the deadline has to find it."""
    deadline_s = 8.0  # tiny calls take well under a second
    cfg = tiny_config(tmp_path, "generator.num_replicas=2", "train.max_policy_lag=2", "train.checkpoint_every=1",
                      f"train.steps={STEPS}", f"pools.call_timeout_s={deadline_s}", "pools.hedge_factor=0")
    pools = ChaosPools.launch(cfg)
    learner = LearnerGroup(cfg)
    try:
        pools.start_chaos({}, stop_at=("answer", 3), stop_s=2 * deadline_s)
        summary = train(cfg, pools, learner, progress=False)
        assert pools.timed_out_calls().get("answer", 0) >= 1, "the stopped generator's call passed its deadline"
        assert pools.driver_cpu_while_hung is not None and pools.driver_cpu_while_hung < 0.1, \
            f"the driver used {pools.driver_cpu_while_hung:.0%} of a core while a replica hung"
    finally:
        learner.shutdown()
        pools.shutdown()
    assert_finished_and_balanced(tmp_path, summary)
    assert summary["ledger"]["failed_attempts"] == 0, "the hung call was re-sent, not failed"


@pytest.mark.slow
def test_a_rank_that_raises_on_one_version_is_restored_a_few_times_then_the_run_stops_naming_it(
        ray_session, tiny_config, tmp_path):
    cfg = tiny_config(tmp_path, "train.max_policy_lag=2", "train.checkpoint_every=1", "learner.max_restores=1")
    pools = ActorPools.launch(cfg)
    learner = ChaosLearner(cfg)
    learner.raise_at = 1
    try:
        with pytest.raises(LearnerGaveUp, match=r"failed 2 times in a row .* learner rank 0 raised during update: "
                                                r"TypeError"):
            train(cfg, pools, learner, progress=False)
    finally:
        learner.shutdown()
        pools.shutdown()
    restores = step_records(tmp_path)
    assert [r["step"] for r in restores] == [1]
