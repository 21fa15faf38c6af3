"""The trainer: one loop over optimiser steps, whichever parts it runs on.

Each step: take the oldest fresh experience batch (rolled out and scored by reward
backpropagation), start the learner's update on it, keep rolling out ahead while the learner
works (within `train.max_policy_lag`), install the new weights on the policy replicas, log,
checkpoint and evaluate on schedule. The parts are two interfaces:

* stages, as `StagePools` (`mmrag.training.streaming`): `InlinePools(LocalPipeline)` in one
  process, or `mmrag.actors.stage_pools.ActorPools` over Ray actor pools;
* the learner (`mmrag.training.learner.Learner`): `LocalLearner` in one process, or
  `mmrag.actors.learner.LearnerGroup` of DeepSpeed ranks.

`--mode local-reference` is this loop with the in-process parts and no lag; `distributed` is
this loop with the Ray parts. If any learner call fails (update, publishing, save, export,
rebuild), the learner is restored from the latest checkpoint and the driver rolls back to
its rollback point (just before the oldest batch not yet trained), so the redone steps train
the very rollouts the lost ones did; when that checkpoint is of the step just completed (no
step to redo), nothing is rolled back: the failed update's batch is trained again and the
rollouts queued ahead stay; `learner.max_restores` restores in a row without a
completed step stop the run. Every weights id carries the run's restore generation.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from mmrag import storage
from mmrag.config import Config
from mmrag.data.dataset import Question, load_questions
from mmrag.training.accounting import RolloutLedger
from mmrag.training.checkpoint import (DriverState, checkpoint_to_resume, latest_checkpoint, learner_dir,
                                       load_driver_state, save_checkpoint)
from mmrag.training.evaluate import evaluate, held_out_sample
from mmrag.training.export_choice import best_validation_step
from mmrag.training.learner import Learner, LearnerFailed, LearnerUpdate, Weights
from mmrag.training.metrics_log import MetricsLog, read_metrics
from mmrag.training.model_card import write_model_card
from mmrag.training.reward_guard import RewardGuard
from mmrag.training.rollouts import Experience, Rollouts
from mmrag.training.run import RUN_FILES, QuestionCursor, prepare_run_dir, rollout_metrics
from mmrag.training.seeding import seed_everything
from mmrag.training.streaming import RolloutStream, StagePools
from mmrag.training.sync_probe import build_sync_probe
from mmrag.training.trackers import open_trackers, rollout_sample

log = logging.getLogger(__name__)


class LearnerGaveUp(RuntimeError):
    """The learner failed `learner.max_restores` + 1 times in a row without completing a step."""


@dataclass
class TrainingRun:
    """The driver's state between steps; `DriverState` is its checkpointed form."""

    cfg: Config
    rollouts: Rollouts
    ledger: RolloutLedger
    step: int = 0
    evaluations: dict[int, dict] = field(default_factory=dict)
    learned: list[int] = field(default_factory=list)
    """The rollout numbers the learner reported training on, one step after another (the ledger's truth)."""
    generation: int = 0
    """Restores and resumes so far: stamped on every weights id the replicas install."""
    restores_in_a_row: int = 0
    initial: DriverState | None = None
    """The state before the first step: what a learner with no checkpoint yet is restored to."""
    in_update: Experience | None = None
    """The batch the learner is training on now (between `start_update` and its result)."""
    retry: Experience | None = None
    """A batch to hand the learner again, before any other: the one its failed update had, when the restore needed
    no step redone (the checkpoint is of the step just completed), so the queue ahead of it stays as it is."""
    exported_step: int | None = None
    """The step whose weights RUN_DIR/export holds (`train.export`), once one is written."""
    faults_logged: dict[str, int] = field(default_factory=dict)
    """Faults so far by kind as of the latest step record (`fault_counts`), which logs the ones since."""

    def fault_counts(self, pools: StagePools) -> dict[str, int]:
        """Faults so far by kind: the stage pools' (outages, kills, re-sent calls...), learner restores, stale
        rollout batches dropped and rollout batches failed."""
        ledger = self.ledger.as_dict()
        restores = sum(n for cause, n in ledger["restores"].items() if cause != "resume")
        return {**pools.fault_counts(), "learner_restore": restores, "stale_batch_dropped": ledger["dropped_stale"],
                "failed_batch": ledger["failed_attempts"]}

    def faults_since_last_record(self, pools: StagePools) -> dict[str, int]:
        """Faults by kind since the previous call (a rollback re-labels the stale batches it redoes abandoned:
        never below 0)."""
        now = self.fault_counts(pools)
        kinds = sorted(now.keys() | self.faults_logged.keys())
        since = {kind: max(0, now.get(kind, 0) - self.faults_logged.get(kind, 0)) for kind in kinds}
        self.faults_logged = now
        return since

    def driver_state(self, learner_version: int) -> DriverState:
        started, epoch, position = self.rollouts.rollback_point()
        return DriverState(self.step, learner_version, started, epoch, position,
                           self.rollouts.shuffle_rng.getstate(), self.ledger.state(), list(self.learned),
                           self.generation)

    def restore(self, state: DriverState) -> None:
        """Put step, rollback point, trained rollouts and RNGs back where `state` was captured (the ledger and the
        generation are not rolled back: they keep the run's history)."""
        self.step = state.step
        self.rollouts.started = state.rollouts_started
        cursor = self.rollouts.cursor
        self.rollouts.cursor = QuestionCursor(cursor.questions, cursor.seed, state.cursor_epoch,
                                              state.cursor_position)
        self.rollouts.shuffle_rng.setstate(state.reward_shuffle_rng)
        self.learned = list(state.learned)
        state.restore_global_rngs()

    def check_ledger(self) -> None:
        self.ledger.check(self.rollouts.started, self.rollouts.in_flight(), self.rollouts.buffered(), self.learned)

    def stamped(self, weights: Weights) -> Weights:
        """`weights` under this run's restore generation: an id no earlier weights of the run had."""
        return replace(weights, generation=self.generation)


def train(cfg: Config, pools: StagePools, learner: Learner, resume: bool = False, progress: bool = True,
          stop: threading.Event | None = None) -> dict:
    """Train translator and reranker on these parts; returns the first and last held-out evaluations.

    `stop` (set on SIGTERM or SIGINT by `mmrag train`): checkpoint at the next step boundary and return early, with
    `preempted_at` the step saved; `--resume` continues from there.
    """
    seed_everything(cfg.train.seed)
    run_dir = prepare_run_dir(cfg)
    held_out = held_out_sample(load_questions(cfg.data.dir, "val"), cfg.train.eval_questions)
    stream = RolloutStream(pools, cfg.translator.num_samples, cfg.reranker.num_samples,
                           cfg.train.micro_batch_size, cfg.train.seed, guard=RewardGuard(cfg.reward))
    ledger = RolloutLedger()
    train_questions = load_questions(cfg.data.dir, "train")
    cursor = QuestionCursor(train_questions, cfg.train.seed)
    run = TrainingRun(cfg, Rollouts(cfg, stream, cursor, ledger), ledger)
    checkpoint = checkpoint_to_resume(cfg.train.run_dir, "required" if resume else cfg.train.resume)
    if checkpoint is not None:
        _resume(run, learner, checkpoint, run_dir)
    else:
        run.initial = run.driver_state(learner.version)
    pools.stages.install(run.stamped(learner.weights()))
    if cfg.learner.sync_check_every and cfg.train.mode == "distributed":  # in process, nothing is synced
        learner.use_sync_probe(build_sync_probe(pools.stages, train_questions, cfg.train.seed))
    run.faults_logged = run.fault_counts(pools)  # a resumed run's records count its own faults
    metrics = MetricsLog(run_dir, open_trackers(cfg, run_dir), resumed_at=None if checkpoint is None else run.step)
    try:
        preempted = _loop(run, pools, learner, stream, metrics, held_out, run_dir, progress, stop)
    finally:
        metrics.close()
        storage.mirror_up(run_dir, cfg.train.run_dir, RUN_FILES)
    faults = {kind: n for kind, n in run.fault_counts(pools).items() if n}
    if faults:
        log.warning("faults absorbed in this run: %s (per step: RUN_DIR/metrics.jsonl, faults)",
                    ", ".join(f"{n} {kind}" for kind, n in faults.items()))
    first, last = run.evaluations[min(run.evaluations)], run.evaluations[max(run.evaluations)]
    return {"initial": first, "final": last, "evaluations": run.evaluations, "run_dir": str(run_dir),
            "ledger": run.ledger.as_dict(), "trained_rollouts": list(run.learned),
            "preempted_at": run.step if preempted else None, "exported_step": run.exported_step, "faults": faults,
            "exported": run.evaluations.get(run.exported_step, last)}


def _loop(run: TrainingRun, pools: StagePools, learner: Learner, stream: RolloutStream, metrics: MetricsLog,
          held_out: list[Question], run_dir: Path, progress: bool, stop: threading.Event | None) -> bool:
    """The initial evaluation, steps, then the export; a learner failure in any of its calls (update, publishing,
    save, export, the rebuild itself) restores it and goes on from the restored step, exporting that step first if
    its export was cut short. Whether `stop` ended it early."""
    cfg = run.cfg
    bar = tqdm(total=cfg.train.steps, initial=run.step, desc=f"train ({cfg.train.mode})", disable=not progress)
    last_end = time.perf_counter()
    while True:
        try:
            if 0 not in run.evaluations:
                run.evaluations[0] = _evaluate(pools, held_out, metrics, 0, cfg.trackers.rollout_samples)
            if run.step in run.evaluations and run.exported_step != run.step:
                _export_if_best(run, learner)
            if run.step == cfg.train.steps:
                if cfg.train.export == "last":
                    _export(run, learner)
                break
            if stop is not None and stop.is_set():
                _checkpoint_once(run, learner, run_dir)
                log.info("stopped at step %d on request: checkpointed; --resume continues", run.step)
                bar.close()
                return True
            last_end = _step(run, pools, learner, stream, metrics, held_out, run_dir, bar, last_end)
        except LearnerFailed as exc:
            _recover_learner(run, learner, pools, run_dir, exc)
            bar.n = run.step
            last_end = time.perf_counter()
    bar.close()
    return False


def _checkpoint(run: TrainingRun, learner: Learner, run_dir: Path) -> None:
    """Save this step (into the run's storage, `train.run_dir`) and mirror the run's files there."""
    save_checkpoint(run.cfg.train.run_dir, learner, run.driver_state(learner.version))
    storage.mirror_up(run_dir, run.cfg.train.run_dir, RUN_FILES)


def _checkpoint_once(run: TrainingRun, learner: Learner, run_dir: Path) -> None:
    """Save this step unless it is saved already (the latest checkpoint is the step's)."""
    latest = latest_checkpoint(run.cfg.train.run_dir)
    if latest is None or load_driver_state(latest).step != run.step:
        _checkpoint(run, learner, run_dir)


def _step(run: TrainingRun, pools: StagePools, learner: Learner, stream: RolloutStream, metrics: MetricsLog,
          held_out: list[Question], run_dir: Path, bar: tqdm, last_end: float) -> float:
    """One optimiser step, its record, checkpoint and evaluation; when its record was taken (the next step's
    seconds count from there, the previous step's checkpoint and evaluation included)."""
    cfg = run.cfg
    experience = run.retry or run.rollouts.next_experience(learner.version, steps_left=cfg.train.steps - run.step)
    run.retry, run.in_update = None, experience
    learner_version = learner.version
    pending = learner.start_update(experience.roots)
    run.rollouts.overlap(pending, steps_after=cfg.train.steps - run.step - 1)
    update = pending.result()
    run.in_update = None
    run.learned.extend(update.rollouts)
    weights = run.stamped(update.weights)
    pools.stages.install(weights)
    run.step += 1
    now = time.perf_counter()
    record = _step_record(run, experience, update, weights, learner_version, stream, now - last_end)
    record["faults"] = run.faults_since_last_record(pools)
    pools.export_faults(record["faults"])
    metrics.log(run.step, record)
    bar.update(1)
    bar.set_postfix(reward=f"{record['reward_mean']:.3f}", lag=record["policy_lag"])
    final = run.step == cfg.train.steps
    if (cfg.train.checkpoint_every and run.step % cfg.train.checkpoint_every == 0) or final:
        _checkpoint(run, learner, run_dir)
    run.restores_in_a_row = 0
    if run.step % cfg.train.eval_every == 0 or final:
        run.evaluations[run.step] = _evaluate(pools, held_out, metrics, run.step, cfg.trackers.rollout_samples)
        _export_if_best(run, learner)
    return now


def _export(run: TrainingRun, learner: Learner) -> None:
    """Write this step's weights as RUN_DIR/export, with a model card of the evaluations up to this step."""
    export = storage.join(run.cfg.train.run_dir, "export")
    learner.export(export)
    write_model_card(export, run.cfg, {step: result for step, result in run.evaluations.items() if step <= run.step})
    run.exported_step = run.step
    log.info("exported step %d (train.export: %s)", run.step, run.cfg.train.export)


def _export_if_best(run: TrainingRun, learner: Learner) -> None:
    """`train.export: best_val`: export this step when its evaluation beats every earlier one."""
    if run.cfg.train.export == "best_val" and best_validation_step(run.evaluations) == run.step:
        _export(run, learner)


def _step_record(run: TrainingRun, experience: Experience, update: LearnerUpdate, weights: Weights,
                 learner_version: int, stream: RolloutStream, seconds: float) -> dict:
    run.check_ledger()
    record = rollout_metrics(experience.roots)
    record.update(update.losses)
    record.update(
        policy_version=update.version, experience_version=experience.oldest_version,
        policy_lag=learner_version - experience.oldest_version, sampled_versions=experience.versions,
        rollout=experience.number, weights_id=weights.id, weights_generation=weights.generation,
        ledger=run.ledger.as_dict(),
        leaves_per_s=record["leaves"] / seconds, updates_per_s=1.0 / seconds, step_seconds=seconds,
        stage_seconds={**stream.take_stage_seconds(), "learn": update.seconds})
    sync = stream.take_sync_differences()
    if sync:
        record["sync"] = sync
    return record


def _resume(run: TrainingRun, learner: Learner, checkpoint: str, run_dir: Path) -> None:
    state = load_driver_state(checkpoint)
    learner.load(learner_dir(checkpoint))
    run.restore(state)
    run.ledger = run.rollouts.ledger = RolloutLedger(**state.ledger)
    run.ledger.rolled_back(state.rollouts_started, 0, "resume")
    records = read_metrics(run_dir)
    # A generation above every one the interrupted run used (it may have restored after its last checkpoint).
    run.generation = max([state.generation, *(r.get("weights_generation", 0) for r in records)]) + 1
    # Evaluations this run logged up to the checkpoint (later ones belong to steps about to be redone).
    run.evaluations = {r["step"]: r["eval"] for r in records if "eval" in r and r["step"] <= run.step}
    if run.cfg.train.export == "best_val" and run.evaluations:
        run.exported_step = best_validation_step(run.evaluations)


def _recover_learner(run: TrainingRun, learner: Learner, pools: StagePools, run_dir: Path,
                     error: LearnerFailed) -> None:
    """Restore the learner from the latest checkpoint (or its initial weights), roll the driver back to match;
    after `learner.max_restores` restores in a row without a completed step, stop naming the last failure."""
    cause = "rank_lost" if error.lost else "rank_error"
    while True:
        run.restores_in_a_row += 1
        if run.restores_in_a_row > run.cfg.learner.max_restores:
            raise LearnerGaveUp(f"the learner failed {run.restores_in_a_row} times in a row without completing a "
                                f"step (learner.max_restores = {run.cfg.learner.max_restores}); the last "
                                f"failure: {error}") from error
        checkpoint = latest_checkpoint(run.cfg.train.run_dir)
        log.warning("learner %s at step %d (%s); restore %d of at most %d, from %s",
                    "lost a rank" if error.lost else "code raised", run.step + 1, error, run.restores_in_a_row,
                    run.cfg.learner.max_restores, checkpoint or "its initial weights")
        try:
            learner.restart(learner_dir(checkpoint) if checkpoint is not None else None)
            break
        except LearnerFailed as exc:
            error = exc
    state = load_driver_state(checkpoint) if checkpoint is not None else run.initial
    if state.step == run.step and run.in_update is not None:
        # Restored to the step just completed: the rollouts queued ahead were drawn by the very weights it has,
        # so they stay, and the failed update's batch goes to the learner again.
        run.retry = run.in_update
        run.ledger.rolled_back(run.rollouts.started, 0, cause)
    else:
        run.retry = None
        run.rollouts.discard()
        run.ledger.rolled_back(state.rollouts_started, run.step - state.step, cause)
        run.restore(state)
    run.in_update = None
    run.generation += 1
    run.evaluations = {step: result for step, result in run.evaluations.items() if step <= run.step}
    pools.stages.install(run.stamped(learner.weights()))


def _evaluate(pools: StagePools, questions: list[Question], metrics: MetricsLog, step: int,
              rollout_samples: int) -> dict:
    result, predictions = evaluate(pools.stages, questions)
    metrics.log(step, {"eval": result})
    metrics.log_rollouts(step, rollout_sample(predictions, rollout_samples))
    return result