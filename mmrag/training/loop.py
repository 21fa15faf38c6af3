"""The trainer: one loop over optimiser steps, whichever parts it runs on.

Each step: take the oldest fresh experience batch (rolled out and scored by reward
backpropagation), start the learner's update on it, keep rolling out ahead while the learner
works (within `train.max_policy_lag`), install the new weights on the policy replicas, log,
checkpoint and evaluate on schedule. The parts are two interfaces:

* stages, as `StagePools` (`mmrag.training.streaming`): `InlinePools(LocalPipeline)` in one
  process, or `actors.stages.ActorPools` over Ray actor pools;
* the learner (`mmrag.training.learner.Learner`): `LocalLearner` in one process, or
  `actors.learner.LearnerGroup` of DeepSpeed ranks.

`--mode local-reference` is this loop with the in-process parts and no lag; `distributed` is
this loop with the Ray parts. If the learner fails, it is restored from the latest checkpoint
and the driver rolls its own state back to match; the steps redone are counted.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from mmrag import storage
from mmrag.config import Config
from mmrag.data.dataset import Question, load_questions
from mmrag.training.accounting import RolloutLedger
from mmrag.training.checkpoint import (DriverState, checkpoint_to_resume, latest_checkpoint, learner_dir,
                                       load_driver_state, save_checkpoint)
from mmrag.training.evaluate import evaluate, held_out_sample
from mmrag.training.learner import Learner, LearnerFailed, LearnerUpdate
from mmrag.training.ledger import MetricsLedger, read_metrics
from mmrag.training.rollouts import Experience, Rollouts
from mmrag.training.run import RUN_FILES, QuestionCursor, prepare_run_dir, rollout_metrics
from mmrag.training.seeding import seed_everything
from mmrag.training.streaming import RolloutStream, StagePools

log = logging.getLogger(__name__)


@dataclass
class TrainingRun:
    """The driver's state between steps; `DriverState` is its checkpointed form."""

    cfg: Config
    rollouts: Rollouts
    ledger: RolloutLedger
    step: int = 0
    evaluations: dict[int, dict] = field(default_factory=dict)
    initial: DriverState | None = None
    """The state before the first step: what a learner with no checkpoint yet is restored to."""

    def driver_state(self, learner_version: int) -> DriverState:
        cursor = self.rollouts.cursor
        return DriverState(self.step, learner_version, self.rollouts.started, cursor.epoch, cursor.position,
                           self.rollouts.shuffle_rng.getstate(), self.ledger.as_dict())

    def restore(self, state: DriverState) -> None:
        """Put step, rollout count, cursor and RNGs back where `state` was captured (the ledger is not rolled back)."""
        self.step = state.step
        self.rollouts.started = state.rollouts_started
        cursor = self.rollouts.cursor
        self.rollouts.cursor = QuestionCursor(cursor.questions, cursor.seed, state.cursor_epoch,
                                              state.cursor_position)
        self.rollouts.shuffle_rng.setstate(state.reward_shuffle_rng)
        state.restore_global_rngs()


def train(cfg: Config, pools: StagePools, learner: Learner, resume: bool = False, progress: bool = True) -> dict:
    """Train translator and reranker on these parts; returns the first and last held-out evaluations."""
    seed_everything(cfg.train.seed)
    run_dir = prepare_run_dir(cfg)
    held_out = held_out_sample(load_questions(cfg.data.dir, "val"), cfg.train.eval_questions)
    stream = RolloutStream(pools, cfg.translator.num_samples, cfg.reranker.num_samples,
                           cfg.train.micro_batch_size, cfg.train.seed)
    ledger = RolloutLedger()
    cursor = QuestionCursor(load_questions(cfg.data.dir, "train"), cfg.train.seed)
    run = TrainingRun(cfg, Rollouts(cfg, stream, cursor, ledger), ledger)
    checkpoint = checkpoint_to_resume(cfg.train.run_dir, "required" if resume else cfg.train.resume)
    if checkpoint is not None:
        _resume(run, learner, checkpoint, run_dir)
    else:
        run.initial = run.driver_state(learner.version)
    pools.stages.install(learner.weights())
    metrics = MetricsLedger(run_dir)
    try:
        if 0 not in run.evaluations:
            run.evaluations[0] = _evaluate(pools, held_out, metrics, 0)
        _loop(run, pools, learner, stream, metrics, held_out, run_dir, progress)
        learner.export(storage.join(cfg.train.run_dir, "export"))
    finally:
        metrics.close()
        storage.mirror_up(run_dir, cfg.train.run_dir, RUN_FILES)
    first, last = run.evaluations[min(run.evaluations)], run.evaluations[max(run.evaluations)]
    return {"initial": first, "final": last, "evaluations": run.evaluations, "run_dir": str(run_dir),
            "ledger": ledger.as_dict()}


def _loop(run: TrainingRun, pools: StagePools, learner: Learner, stream: RolloutStream, metrics: MetricsLedger,
          held_out: list[Question], run_dir: Path, progress: bool) -> None:
    cfg = run.cfg
    bar = tqdm(total=cfg.train.steps, initial=run.step, desc=f"train ({cfg.train.mode})", disable=not progress)
    last_end = time.perf_counter()
    while run.step < cfg.train.steps:
        experience = run.rollouts.next_experience(learner.version, steps_left=cfg.train.steps - run.step)
        learner_version = learner.version
        pending = learner.start_update(experience.roots)
        run.rollouts.overlap(pending, steps_after=cfg.train.steps - run.step - 1)
        try:
            update = pending.result()
        except LearnerFailed as exc:
            _recover_learner(run, learner, pools, run_dir, exc)
            bar.n = run.step
            continue
        pools.stages.install(update.weights)
        run.step += 1
        now = time.perf_counter()
        record = _step_record(run, experience, update, learner_version, stream, now - last_end)
        last_end = now
        metrics.log(run.step, record)
        bar.update(1)
        bar.set_postfix(reward=f"{record['reward_mean']:.3f}", lag=record["policy_lag"])
        final = run.step == cfg.train.steps
        if (cfg.train.checkpoint_every and run.step % cfg.train.checkpoint_every == 0) or final:
            save_checkpoint(cfg.train.run_dir, learner, run.driver_state(learner.version))
            storage.mirror_up(run_dir, cfg.train.run_dir, RUN_FILES)
        if run.step % cfg.train.eval_every == 0 or final:
            run.evaluations[run.step] = _evaluate(pools, held_out, metrics, run.step)
    bar.close()


def _step_record(run: TrainingRun, experience: Experience, update: LearnerUpdate, learner_version: int,
                 stream: RolloutStream, seconds: float) -> dict:
    run.ledger.check()
    record = rollout_metrics(experience.roots)
    record.update(update.losses)
    record.update(
        policy_version=update.version, experience_version=experience.oldest_version,
        policy_lag=learner_version - experience.oldest_version, sampled_versions=experience.versions,
        rollout=experience.number, ledger=run.ledger.as_dict(),
        leaves_per_s=record["leaves"] / seconds, updates_per_s=1.0 / seconds, step_seconds=seconds,
        stage_seconds={**stream.take_stage_seconds(), "learn": update.seconds})
    return record


def _resume(run: TrainingRun, learner: Learner, checkpoint: str, run_dir: Path) -> None:
    state = load_driver_state(checkpoint)
    learner.load(learner_dir(checkpoint))
    run.restore(state)
    for name, value in state.ledger.items():
        setattr(run.ledger, name, value)
    run.ledger.resumed()
    # Evaluations this run logged up to the checkpoint (later ones belong to steps about to be redone).
    run.evaluations = {r["step"]: r["eval"] for r in read_metrics(run_dir) if "eval" in r and r["step"] <= run.step}


def _recover_learner(run: TrainingRun, learner: Learner, pools: StagePools, run_dir: Path,
                     error: Exception) -> None:
    """Restore the learner from the latest checkpoint (or its initial weights), roll the driver back to match."""
    checkpoint = latest_checkpoint(run.cfg.train.run_dir)
    log.warning("learner failed at step %d (%s); restoring it from %s", run.step + 1, error,
                checkpoint or "its initial weights")
    learner.restart(learner_dir(checkpoint) if checkpoint is not None else None)
    state = load_driver_state(checkpoint) if checkpoint is not None else run.initial
    run.rollouts.discard()
    run.ledger.learner_restored(state.ledger["trained"], run.step - state.step)
    run.restore(state)
    run.evaluations = {step: result for step, result in run.evaluations.items() if step <= run.step}
    pools.stages.install(learner.weights())


def _evaluate(pools: StagePools, questions: list[Question], metrics: MetricsLedger, step: int) -> dict:
    result, _ = evaluate(pools.stages, questions)
    metrics.log(step, {"eval": result})
    return result
