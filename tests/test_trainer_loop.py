"""The trainer loop's control flow without Ray: in-process stages (tiny random models) and a counting learner.

The learner here takes no optimiser step: each update only bumps the weights version, and
reports itself done after a few polls, so rollouts run meanwhile as they would beside a
real learner. What is under test is the loop: the lag bound, stale batches dropped and
counted, the versions each sample records, micro-batch order, failed batches, and the
ledger through a resume and a learner failure.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from mmrag import storage
from mmrag.config import config_to_dict
from mmrag.rl.losses import gate_value_gap
from mmrag.rl.rollout import leaves, nodes_at
from mmrag.training.accounting import LedgerUnbalanced, RolloutLedger
from mmrag.training.learner import LearnerFailed, LearnerUpdate, Weights, rollouts_of
from mmrag.training.metrics_log import step_records
from mmrag.training.loop import LearnerGaveUp, train
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.reward_guard import RewardServiceFailed
from mmrag.training.rollouts import RolloutFailed, Rollouts
from mmrag.training.run import QuestionCursor, score_trees
from mmrag.training.updates import example_count
from mmrag.data.dataset import load_questions
from mmrag.training.streaming import InlinePools, RolloutStream, assemble_trees

Q = 2  # questions per step (tiny_config)


class CountingLearner:
    """Each update bumps the version once `done()` has been polled `polls` times; update `fail_at` raises once."""

    def __init__(self, polls: int = 0, fail_at: int | None = None, driver_dies_at: int | None = None,
                 nudged: LocalPipeline | None = None):
        self.version, self.polls, self.fail_at, self.driver_dies_at = 0, polls, fail_at, driver_dies_at
        self.nudged = nudged
        """A pipeline whose translator and reranker each update moves a little, so that samples' log-probs differ
        from version to version."""
        self.updates: list[tuple[int, list]] = []
        self.restored_from: list = []

    def weights(self) -> Weights:
        return Weights(self.version, None, None)

    def start_update(self, roots):
        if len(self.updates) + 1 == self.driver_dies_at:
            raise DriverKilled
        self.updates.append((self.version, roots))
        return _Pending(self, len(self.updates))

    world_size = 1

    def save(self, directory) -> None:
        with storage.writing_to(directory, "rank_0") as local:  # a checkpoint is complete once its part is listed
            (local / "version.json").write_text(json.dumps(self.version))

    def load(self, directory) -> None:
        self.version = json.loads((Path(directory) / "version.json").read_text())

    def restart(self, directory) -> None:
        self.restored_from.append(directory)
        if directory is None:
            self.version = 0
        else:
            self.load(directory)

    def export(self, directory) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)

    def use_sync_probe(self, probe) -> None:
        """Its versions carry no weights, so there is nothing for a replica to check."""

    def shutdown(self) -> None:
        pass


class DriverKilled(BaseException):
    """The driver process dying mid-run (as SIGKILL would, but inside the test's process)."""


class _Pending:
    futures = ()

    def __init__(self, learner: CountingLearner, number: int):
        self.learner, self.number, self.polled = learner, number, 0

    def done(self) -> bool:
        self.polled += 1
        return self.polled > self.learner.polls

    def result(self) -> LearnerUpdate:
        if self.number == self.learner.fail_at:
            self.learner.fail_at = None
            raise LearnerFailed(f"rank 0 died during update {self.number}")
        self.learner.version += 1
        if self.learner.nudged is not None:
            with torch.no_grad():
                self.learner.nudged.reranker.stop_scorer.linear.bias.add_(0.1)
                next(self.learner.nudged.translator.model.parameters()).mul_(1.01)
        roots = self.learner.updates[self.number - 1][1]
        return LearnerUpdate(self.learner.version, {}, 0.0, self.learner.weights(), rollouts_of(roots))


class ShuffledPools(InlinePools):
    """Calls finish one at a time, in random order, like replicas of different speeds."""

    def __init__(self, stages, seed: int):
        super().__init__(stages)
        self.rng = random.Random(seed)

    def wait(self, futures, timeout=None):
        return [self.rng.choice(list(futures))] if futures else []


class VersionRecorder:
    """The pipeline's stages, noting the version installed when each sample was drawn (keyed by its log-prob)."""

    def __init__(self, pipeline: LocalPipeline):
        self.pipeline = pipeline
        self.translator_versions: dict[float, int] = {}
        self.reranker_versions: dict[float, int] = {}

    def __getattr__(self, name):
        return getattr(self.pipeline, name)

    def translate(self, *args):
        drawn = self.pipeline.translate(*args)
        self.translator_versions.update({s.logprob: self.pipeline.policy_version for row in drawn.queries for s in row})
        return drawn

    def rerank(self, *args):
        drawn = self.pipeline.rerank(*args)
        self.reranker_versions.update({lp: self.pipeline.policy_version for row in drawn.logprobs for lp in row})
        return drawn


class FailingOnce:
    """The pipeline's stages, with the first `failures` sampling `rerank` calls raising."""

    def __init__(self, pipeline: LocalPipeline, failures: int = 1):
        self.pipeline, self.failures = pipeline, failures

    def __getattr__(self, name):
        return getattr(self.pipeline, name)

    def rerank(self, *args):
        if self.failures:
            self.failures -= 1
            raise RuntimeError("reranker out of memory")
        return self.pipeline.rerank(*args)


@pytest.fixture(scope="module")
def pipeline(tiny_config, tmp_path_factory) -> LocalPipeline:
    return LocalPipeline.from_config(tiny_config(tmp_path_factory.mktemp("unused")))


def test_micro_batches_finishing_out_of_order_give_the_trees_in_question_order(pipeline, synth_dir):
    questions = load_questions(synth_dir, "train")[:5]

    def trees(pools) -> list:
        stream = RolloutStream(pools, n=2, m=2, micro_batch_size=1, seed=7)
        batch = stream.start(questions, number=1)
        while batch.finished is None:
            stream.pump()
        return [(root.output, [(t.output, [(leaf.output, leaf.reward) for leaf in t.children])
                               for t in root.children]) for root in assemble_trees(batch)]

    in_order = trees(InlinePools(pipeline))
    assert [tree[0] for tree in in_order] == [q.id for q in questions]
    assert trees(ShuffledPools(pipeline, seed=1)) == in_order
    assert trees(ShuffledPools(pipeline, seed=2)) == in_order


def test_a_gated_reranker_rolls_out_both_of_its_arms_under_every_query(tiny_config, synth_dir, tmp_path):
    cfg = tiny_config(tmp_path, "reranker.gate=true", "train.doc_cost=0.1")
    gated = LocalPipeline.from_config(cfg)
    stream = RolloutStream(InlinePools(gated), n=2, m=3, micro_batch_size=2, seed=7)
    roots = stream.run(load_questions(synth_dir, "train")[:2], number=1)
    score_trees(roots, cfg, random.Random(0))
    for query in (t for root in roots for t in root.children):
        skip, retrieve = query.children
        assert (skip.level, skip.output, retrieve.level, retrieve.output) == ("gate", "skip", "gate", "retrieve")
        assert [leaf.output for leaf in skip.children] == [()] and skip.children[0].payload["doc_ids"] == []
        assert len(retrieve.children) == 2 and all(leaf.logprob is not None for leaf in retrieve.children)
        assert math.exp(skip.logprob) + math.exp(retrieve.logprob) == pytest.approx(1.0)
        assert retrieve.value == pytest.approx(statistics.fmean(leaf.reward - 0.1 * len(leaf.output)
                                                                for leaf in retrieve.children))
        assert query.value == pytest.approx((skip.value + retrieve.value) / 2)
    queries = [t for root in roots for t in root.children]
    assert example_count("reranker", roots, cfg.train) == sum(
        sum(bool(leaf.advantage) for leaf in t.children[1].children) + (gate_value_gap(t) != 0) for t in queries)


def test_synchronous_loop_never_rolls_out_while_the_learner_trains(pipeline, tiny_config, tmp_path):
    learner = CountingLearner(polls=3)
    summary = train(tiny_config(tmp_path), InlinePools(pipeline), learner, progress=False)
    records = step_records(tmp_path)
    assert [(r["step"], r["rollout"], r["policy_lag"]) for r in records] == [(s, s, 0) for s in range(1, 5)]
    assert [version for version, _ in learner.updates] == [0, 1, 2, 3]
    assert summary["ledger"]["started"] == summary["ledger"]["trained"] == 4


def test_rollouts_run_ahead_while_the_learner_trains_within_the_lag_bound(pipeline, tiny_config, tmp_path):
    summary = train(tiny_config(tmp_path, "train.max_policy_lag=2", "train.steps=6"), InlinePools(pipeline),
                    CountingLearner(polls=4), progress=False)
    assert summary["ledger"]["started"] == summary["ledger"]["trained"] == 6, "nothing rolled out in vain"
    records = step_records(tmp_path)
    assert [r["step"] for r in records] == list(range(1, 7))
    assert all(r["policy_lag"] <= 2 for r in records)
    assert max(r["policy_lag"] for r in records) == 2, "three batches rolled out before the first update ended"
    assert all(r["ledger"]["buffered"] + r["ledger"]["in_flight"] <= 2 for r in records)
    assert all(r["ledger"]["dropped_stale"] == 0 for r in records)


def test_a_batch_older_than_the_lag_bound_is_dropped_and_counted(pipeline, tiny_config, tmp_path, synth_dir, caplog):
    cfg = tiny_config(tmp_path, "train.max_policy_lag=1")
    ledger = RolloutLedger()
    rollouts = Rollouts(cfg, RolloutStream(InlinePools(pipeline), 2, 2, 1, 0),
                        QuestionCursor(load_questions(synth_dir, "train"), 0), ledger)
    pipeline.install(Weights(0, None, None))
    first = rollouts.next_experience(learner_version=0)
    rollouts.overlap(_Pending(CountingLearner(polls=2), 1), steps_after=10)  # batch 2 is drawn by version 0
    pipeline.install(Weights(3, None, None))  # ...and the learner is at version 3 when its turn comes
    fresh = rollouts.next_experience(learner_version=3)
    assert (first.number, fresh.number, fresh.oldest_version) == (1, 3, 3)
    assert (ledger.numbers("dropped_stale"), ledger.numbers("trained")) == ({2}, {1, 3})
    ledger.check(rollouts.started, rollouts.in_flight(), rollouts.buffered(), [1, 3])
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line.startswith("stale batch dropped: rollout 2 drawn by version 0, the learner at 3 (lag 3 > "
                           "train.max_policy_lag 1); "), line
    pipeline.install(Weights(0, None, None))


def test_every_sample_records_the_version_that_drew_it(pipeline, tiny_config, tmp_path):
    recorder = VersionRecorder(pipeline)
    initial = (pipeline.translator.trainable_state_dict(), pipeline.reranker.trainable_state_dict())
    learner = CountingLearner(polls=1, nudged=pipeline)
    train(tiny_config(tmp_path, "train.max_policy_lag=1", "train.steps=5"), InlinePools(recorder), learner,
          progress=False)
    pipeline.install(Weights(0, *initial))
    mixed = 0
    for learner_version, roots in learner.updates:
        for root in roots:
            for query in nodes_at(root, "translator"):
                assert query.policy_version == recorder.translator_versions[query.logprob]
                for leaf in query.children:
                    assert leaf.policy_version == recorder.reranker_versions[leaf.logprob]
                    assert leaf.payload["versions"] == {"translator": query.policy_version,
                                                        "reranker": leaf.policy_version}
                    assert learner_version - min(leaf.payload["versions"].values()) <= 1
                    mixed += query.policy_version != leaf.policy_version
    assert mixed > 0, "some batch straddled a weights install, so its stages sampled with different versions"


def test_a_batch_failed_once_is_rolled_out_again_with_its_questions_and_nothing_is_lost(pipeline, tiny_config,
                                                                                        tmp_path, caplog):
    cfg = tiny_config(tmp_path, "train.steps=2")
    summary = train(cfg, InlinePools(FailingOnce(pipeline)), CountingLearner(), progress=False)
    records = step_records(tmp_path)
    assert [r["rollout"] for r in records] == [1, 2]
    assert summary["ledger"] == {**RolloutLedger().as_dict(), "started": 2, "trained": 2, "failed_attempts": 1}
    assert sum(r["faults"].get("failed_batch", 0) for r in records) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollouts failed_batch")]
    assert len(lines) == 1 and re.fullmatch(r"rollouts failed_batch: rollout 1 failed \(rerank of micro-batch 0: .*"
                                            r"reranker out of memory.*\); rolled out again with the same questions "
                                            r"and seeds", lines[0]), lines
    uninterrupted = tmp_path / "uninterrupted"
    train(tiny_config(uninterrupted, "train.steps=2"), InlinePools(pipeline), CountingLearner(), progress=False)
    assert [r["reward_mean"] for r in records] == [r["reward_mean"] for r in step_records(uninterrupted)]


def test_a_batch_failed_twice_is_skipped_and_the_ledger_counts_it(pipeline, tiny_config, tmp_path, caplog):
    cfg = tiny_config(tmp_path, "train.steps=2", "train.micro_batch_size=100")  # one rerank call per attempt
    summary = train(cfg, InlinePools(FailingOnce(pipeline, failures=2)), CountingLearner(), progress=False)
    assert [r["rollout"] for r in step_records(tmp_path)] == [2, 3]
    assert summary["ledger"] == {**RolloutLedger().as_dict(), "started": 3, "trained": 2, "failed": 1,
                                 "failed_attempts": 2}
    assert [r.getMessage().split(" (")[0] for r in caplog.records
            if r.getMessage().startswith("rollouts failed_batch")] == [
        "rollouts failed_batch: rollout 1 failed", "rollouts failed_batch: rollout 1 failed again"]


def test_resuming_rolls_out_again_the_batches_started_after_the_trained_ones(pipeline, tiny_config, tmp_path):
    settings = ("train.max_policy_lag=1", "train.checkpoint_every=1")
    # The learner is slow enough that the batch rolled out ahead is finished when step 2 is saved.
    with pytest.raises(DriverKilled):
        train(tiny_config(tmp_path, *settings), InlinePools(pipeline), CountingLearner(polls=10, driver_dies_at=3),
              progress=False)
    assert step_records(tmp_path)[-1]["ledger"]["buffered"] == 1, "rollout 3 was buffered at the checkpoint"
    learner = CountingLearner(polls=3)
    summary = train(tiny_config(tmp_path, *settings), InlinePools(pipeline), learner, resume=True, progress=False)
    assert learner.updates[0][0] == 2, "the learner resumed at the checkpoint's version"
    records = step_records(tmp_path)
    assert [(r["step"], r["rollout"]) for r in records] == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert summary["trained_rollouts"] == [1, 2, 3, 4]
    ledger = summary["ledger"]
    assert (ledger["trained"], ledger["abandoned"], ledger["abandoned_attempts"]) == (4, 0, 1)
    assert ledger["restores"]["resume"] == 1
    assert records[-1]["weights_id"] == "1.4", "the resumed run publishes under a new generation"


def test_a_learner_failure_restores_the_checkpoint_and_redoes_the_steps_after_it(pipeline, tiny_config, tmp_path):
    learner = CountingLearner(fail_at=4)
    summary = train(tiny_config(tmp_path, "train.checkpoint_every=2", "train.steps=5"), InlinePools(pipeline),
                    learner, progress=False)
    assert learner.restored_from == [str(tmp_path / "checkpoints" / "step_000002" / "learner")]
    assert [version for version, _ in learner.updates] == [0, 1, 2, 3, 2, 3, 4]
    # Synchronous and seeded: the redone steps roll out exactly the batches that were lost.
    lost, redone = learner.updates[2:4], learner.updates[4:6]
    for (_, lost_roots), (_, redone_roots) in zip(lost, redone):
        assert [(r.output, [t.output for t in r.children], [leaf.reward for leaf in leaves(r)]) for r in lost_roots] \
            == [(r.output, [t.output for t in r.children], [leaf.reward for leaf in leaves(r)]) for r in redone_roots]
    assert summary["ledger"] == {**RolloutLedger().as_dict(), "started": 5, "trained": 5, "abandoned_attempts": 2,
                                 "steps_redone": 1, "restores": {"rank_lost": 1, "rank_error": 0, "resume": 0}}
    assert [(r["step"], r["rollout"]) for r in step_records(tmp_path)] == [(1, 1), (2, 2), (3, 3), (3, 3), (4, 4),
                                                                           (5, 5)]
    assert [r["faults"]["learner_restore"] for r in step_records(tmp_path)] == [0, 0, 0, 1, 0, 0], \
        "the restore is counted in the record of the first step after it"
    assert summary["faults"] == {"learner_restore": 1}


def test_after_a_learner_restore_at_lag_2_the_run_trains_the_uninterrupted_runs_rollouts(
        pipeline, tiny_config, tmp_path):
    """The finding: restored from step 8 after failing at step 10, steps 9-12 trained rollouts 11-14 (10 never)."""
    settings = ("train.max_policy_lag=2", "train.checkpoint_every=2", "train.steps=12", "train.eval_every=100")
    calm = train(tiny_config(tmp_path / "calm", *settings), InlinePools(pipeline), CountingLearner(polls=2),
                 progress=False)
    learner = CountingLearner(polls=2, fail_at=10)
    failed = train(tiny_config(tmp_path / "failed", *settings), InlinePools(pipeline), learner, progress=False)
    assert calm["trained_rollouts"] == failed["trained_rollouts"] == list(range(1, 13))
    redone = [r["rollout"] for r in step_records(tmp_path / "failed")][9:]
    assert redone == [9, 10, 11, 12]
    assert failed["ledger"]["abandoned_attempts"] >= 2, "rollouts 9 (trained) and 10 (in flight) were thrown away"
    versions = [r["weights_id"] for r in step_records(tmp_path / "failed")]
    assert len(set(versions)) == len(versions), f"a weights id was produced twice: {versions}"


def test_a_restore_to_the_step_just_completed_keeps_the_queued_rollouts_and_retrains_the_failed_batch(
        pipeline, tiny_config, tmp_path):
    cfg = tiny_config(tmp_path, "train.max_policy_lag=2", "train.checkpoint_every=1", "train.steps=6",
                      "train.eval_every=100")
    summary = train(cfg, InlinePools(pipeline), CountingLearner(polls=2, fail_at=4), progress=False)
    assert summary["trained_rollouts"] == list(range(1, 7))
    assert [r["rollout"] for r in step_records(tmp_path)] == [1, 2, 3, 4, 5, 6], "rollout 4 trained again, once"
    ledger = summary["ledger"]
    assert (ledger["abandoned_attempts"], ledger["steps_redone"], ledger["restores"]["rank_lost"]) == (0, 0, 1), \
        "nothing rolled out again: the queued rollouts were drawn by the restored weights"


class Mutation:
    """A bookkeeping bug planted into the trainer, which the run's own ledger check must catch."""

    @staticmethod
    def no_trained_on(monkeypatch) -> None:
        monkeypatch.setattr(RolloutLedger, "trained_on", lambda self, number: None)

    @staticmethod
    def batch_handed_over_twice(monkeypatch) -> None:
        real = Rollouts.next_experience
        handed = {}

        def twice(self, *args, **kwargs):
            if "again" in handed:
                return handed.pop("again")
            handed["again"] = experience = real(self, *args, **kwargs)
            return experience

        monkeypatch.setattr(Rollouts, "next_experience", twice)

    @staticmethod
    def in_flight_batch_lost_on_restore(monkeypatch) -> None:
        # The old rollback point: after the batches already queued, so a restore never rolls them out again.
        monkeypatch.setattr(Rollouts, "rollback_point",
                            lambda self: (self.started, self.cursor.epoch, self.cursor.position))


@pytest.mark.parametrize("mutation", ["no_trained_on", "batch_handed_over_twice", "in_flight_batch_lost_on_restore"])
def test_a_bookkeeping_bug_fails_the_runs_own_ledger_check(mutation, pipeline, tiny_config, tmp_path, monkeypatch):
    getattr(Mutation, mutation)(monkeypatch)
    # A checkpoint every 2 steps: the failed update 4 then has a step to redo, so the restore rolls back (a
    # restore to the step just completed keeps the queue and never reads the rollback point).
    cfg = tiny_config(tmp_path, "train.max_policy_lag=2", "train.checkpoint_every=2", "train.steps=5",
                      "train.eval_every=100")
    with pytest.raises(LedgerUnbalanced):
        train(cfg, InlinePools(pipeline), CountingLearner(polls=2, fail_at=4), progress=False)


def test_a_rank_lost_in_the_initial_evaluations_export_restores_the_initial_weights_and_the_run_goes_on(
        pipeline, tiny_config, tmp_path):
    class LosingTheFirstExport(CountingLearner):
        def export(self, directory) -> None:
            self.exports = getattr(self, "exports", 0) + 1
            if self.exports == 1:
                raise LearnerFailed("rank 0 died during export")
            super().export(directory)

    learner = LosingTheFirstExport()
    summary = train(tiny_config(tmp_path, "train.export=best_val", "train.steps=2"), InlinePools(pipeline), learner,
                    progress=False)
    assert learner.restored_from == [None], "nothing saved yet: the initial weights"
    assert (len(learner.updates), summary["ledger"]["restores"]["rank_lost"]) == (2, 1)


def test_a_learner_failing_at_every_try_stops_the_run_naming_the_failure(pipeline, tiny_config, tmp_path):
    class AlwaysFailing(CountingLearner):
        def start_update(self, roots):
            self.fail_at = len(self.updates) + 1
            return super().start_update(roots)

    cfg = tiny_config(tmp_path, "learner.max_restores=2", "train.checkpoint_every=1")
    with pytest.raises(LearnerGaveUp, match=r"failed 3 times in a row .*max_restores = 2.* rank 0 died during update"):
        train(cfg, InlinePools(pipeline), AlwaysFailing(), progress=False)


def test_rollouts_failing_batch_after_batch_stop_the_run_naming_the_stage(pipeline, tiny_config, tmp_path):
    class BrokenReranker(FailingOnce):
        def rerank(self, *args):
            raise RuntimeError("reranker out of memory")

    with pytest.raises(RolloutFailed, match=r"rollouts failed 3 times in a row .* rerank .*reranker out of memory"):
        train(tiny_config(tmp_path), InlinePools(BrokenReranker(pipeline)), CountingLearner(), progress=False)


def test_a_reward_service_answering_a_constant_stops_the_run_naming_the_reward_pool(pipeline, tiny_config,
                                                                                     tmp_path):
    class ConstantAfterOneBatch(FailingOnce):
        """The real scorer for the first micro-batches, then 0.5 for every answer."""

        calls = 0

        def score(self, *args):
            self.calls += 1
            rewards = self.pipeline.score(*args)
            return rewards if self.calls <= 4 else [0.5] * len(rewards)

    cfg = tiny_config(tmp_path, "reward.guard_window=48", "train.steps=8")
    assert cfg.reward.min_answered == 0.95, "the default: the share ProMSA's judge had to answer"
    with pytest.raises(RewardServiceFailed, match=r"^reward pool 'score': the last 48 rewards are all 0\.5"):
        train(cfg, InlinePools(ConstantAfterOneBatch(pipeline)), CountingLearner(), progress=False)
    assert len(step_records(tmp_path)) < 8


@pytest.mark.slow  # kills training driver processes (85 s)
def test_a_driver_killed_at_any_moment_resumes_from_its_latest_complete_checkpoint(tiny_config, tmp_path):
    """SIGKILL of the `mmrag train` process while it checkpoints every step; `--resume` finishes the run."""
    cfg = tiny_config(tmp_path / "run", "train.checkpoint_every=1", "train.steps=8")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(cfg)))
    command = [sys.executable, "-m", "mmrag.pipelines.train", "--config", str(config_file), "--mode", "local-reference",
               "--no-progress"]
    latest = tmp_path / "run" / "checkpoints" / "latest"
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (latest.is_file() and latest.read_text().strip() >= "step_000003"):
        assert driver.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    killed_at = latest.read_text().strip()
    assert killed_at < "step_000008"
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    records = step_records(tmp_path / "run")
    assert records[-1]["step"] == 8
    assert records[-1]["ledger"]["trained"] == 8
    assert (tmp_path / "run" / "export" / "export.json").is_file()
    assert not list((tmp_path / "run" / "checkpoints").glob("*.tmp")), "a half-written checkpoint stays behind"


@pytest.mark.slow
def test_sigterm_checkpoints_at_the_next_step_boundary_exits_0_and_resume_finishes(tiny_config, tmp_path):
    """What Kubernetes and Slurm send before reclaiming a node: the run saves the step it is in, then exits 0."""
    cfg = tiny_config(tmp_path / "run", "train.checkpoint_every=0", "train.steps=8", "train.eval_every=100")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(cfg)))
    command = [sys.executable, "-m", "mmrag.pipelines.train", "--config", str(config_file), "--mode", "local-reference",
               "--no-progress"]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    metrics = tmp_path / "run" / "metrics.jsonl"
    while not (metrics.is_file() and '"ledger"' in metrics.read_text()):
        assert driver.poll() is None and time.monotonic() < deadline, "the run ended before it could be stopped"
        time.sleep(0.05)
    driver.send_signal(signal.SIGTERM)
    output, _ = driver.communicate(timeout=cfg.train.preemption_grace_s)
    assert driver.returncode == 0, output[-2000:]
    saved = (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    stopped_at = step_records(tmp_path / "run")[-1]["step"]
    assert saved == f"step_{stopped_at:06d}" and stopped_at < 8, "the step in progress was saved, no later one"
    assert f"stopped by SIGTERM at step {stopped_at}" in output
    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r["step"] for r in step_records(tmp_path / "run")] == list(range(1, 9))


def test_a_replica_that_held_a_version_installs_the_same_number_redone_after_a_restore():
    """The finding: a replica decided by the number alone, so it kept the pre-failure version 9 as the new 9."""
    from mmrag.actors.policy import InstalledVersion, PolicyWeights

    replica = InstalledVersion()
    replica.held = (0, 9)
    assert replica.needs(PolicyWeights(9, (), generation=1)), "version 9 of the restored learner is other weights"
    assert not replica.needs(PolicyWeights(9, (), generation=0))
