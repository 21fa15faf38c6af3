"""The distributed driver: `mmrag train` with `train.mode: distributed`, one loop over optimiser steps.

Places the stage actors (`actors.stages.ActorStages`) and the learner group
(`actors.learner.LearnerGroup`), then per step: take the oldest rolled-out experience
batch that is fresh enough (older ones are dropped and counted), hand it to the learner,
roll out the next `learner.queue_depth` batches while the learner trains (none when
`train.max_policy_lag` is 0: synchronous), collect the update, install the published
weights on the policy replicas, log one ledger record, checkpoint and evaluate on schedule.
Every rollout reseeds the replicas' samplers from (train.seed, rollout number), so a resumed
synchronous run draws exactly what an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import ray
from tqdm import tqdm

from cluster.connect import connect
from mmrag.config import Config, config_to_dict
from mmrag.data.dataset import load_questions
from mmrag.rl.rollout import Node
from mmrag.training.checkpoint import (DriverState, checkpoint_dir, latest_checkpoint, learner_dir, load_driver_state,
                                       save_driver_state)
from mmrag.training.evaluate import evaluate
from mmrag.training.ledger import MetricsLedger, read_metrics
from mmrag.training.reference import QuestionCursor, rollout_metrics, score_trees, seed_everything
from mmrag.training.rollout_batch import StageTimer, rollout_batch

log = logging.getLogger(__name__)

MAX_CONSECUTIVE_FAILED_ROLLOUTS = 3
"""A rollout failing this many times in a row means a broken actor, not a bad batch: stop the run."""


@dataclass
class Experience:
    """One rolled-out batch: scored trees (None if the rollout failed), the version that drew it, its size."""

    roots: list[Node] | None
    version: int
    questions: int
    sampled_versions: dict[str, int] = field(default_factory=dict)
    """The versions the translator and reranker replicas reported for their samples."""


class Driver:
    """The state one run's loop carries between steps."""

    def __init__(self, cfg: Config, stages, learner, cursor: QuestionCursor, state: DriverState | None):
        self.cfg, self.stages, self.learner, self.cursor = cfg, stages, learner, cursor
        self.shuffle_rng = random.Random(cfg.train.seed)
        self.step, self.rollouts, self.totals = 0, 0, Counter()
        self.consecutive_failures = 0
        if state is not None:
            state.restore(cursor, self.shuffle_rng)
            self.step, self.rollouts, self.totals = state.step, state.rollouts, Counter(state.totals)
        self.ahead: deque[Experience] = deque()
        self.timer = StageTimer()

    def rollout(self) -> Experience:
        """Roll out and score one batch with the replicas' current weights."""
        self.rollouts += 1
        questions = self.cursor.next_batch(self.cfg.train.questions_per_step)
        version = self.learner.version
        self.stages.reseed(self.cfg.train.seed * 1_000_003 + self.rollouts)
        try:
            roots = rollout_batch(self.stages, questions, self.cfg.translator.num_samples,
                                  self.cfg.reranker.num_samples, version, self.timer)
        except ray.exceptions.RayError as exc:
            self.consecutive_failures += 1
            if self.consecutive_failures >= MAX_CONSECUTIVE_FAILED_ROLLOUTS:
                raise
            log.warning("rollout %d failed, batch counted as failed: %s", self.rollouts, exc)
            return Experience(None, version, len(questions))
        self.consecutive_failures = 0
        score_trees(roots, self.cfg, self.shuffle_rng)
        return Experience(roots, version, len(roots), dict(self.stages.sampled_versions))

    def take_fresh(self, counts: Counter) -> Experience:
        """The oldest batch the learner may use now; stale and failed ones on the way are counted, not used."""
        while True:
            batch = self.ahead.popleft() if self.ahead else self.rollout()
            counts["produced"] += batch.questions
            if batch.roots is None:
                counts["failed"] += batch.questions
            elif self.learner.version - batch.version > self.cfg.train.max_policy_lag:
                counts["dropped_stale"] += batch.questions
            else:
                counts["trained"] += batch.questions
                return batch

    def train_step(self) -> dict:
        """One optimiser step: submit fresh experience, roll out ahead meanwhile, collect and sync weights."""
        self.step += 1
        self.timer, counts = StageTimer(), Counter()
        start = time.perf_counter()
        batch = self.take_fresh(counts)
        learner_version = self.learner.version
        pending = self.learner.start_update(batch.roots)
        depth = self.cfg.learner.queue_depth if self.cfg.train.max_policy_lag > 0 else 0
        while len(self.ahead) < depth and self.step + len(self.ahead) < self.cfg.train.steps:
            self.ahead.append(self.rollout())
        with self.timer.stage("learn_wait"):
            update = pending.result()
        weights = update.weights
        with self.timer.stage("weight_sync"):
            self.stages.set_weights(weights.version, weights.translator, weights.reranker)
        elapsed = time.perf_counter() - start
        self.totals.update(counts)
        record = rollout_metrics(batch.roots)
        record.update(update.losses)
        record.update(
            policy_version=weights.version, experience_version=batch.version,
            policy_lag=learner_version - batch.version, sampled_versions=batch.sampled_versions,
            produced=counts["produced"], trained=counts["trained"], dropped_stale=counts["dropped_stale"],
            failed=counts["failed"], buffered=sum(b.questions for b in self.ahead),
            leaves_per_s=record["leaves"] / elapsed, updates_per_s=1.0 / elapsed,
            stage_seconds={**self.timer.seconds, "learn": update.seconds})
        return record

    def state(self) -> DriverState:
        return DriverState.capture(self.step, self.learner.version, self.rollouts, self.cursor,
                                   self.shuffle_rng, self.totals)


def train_distributed(cfg: Config, resume: bool = False, progress: bool = True) -> dict:
    """Train on Ray; returns the first and last evaluations, like `train_reference`."""
    from actors.learner import LearnerGroup
    from actors.stages import ActorStages

    run_dir = Path(cfg.train.run_dir)
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if resume and checkpoint is None:
        raise FileNotFoundError(f"--resume: no checkpoint under {run_dir / 'checkpoints'} (train.run_dir)")
    seed_everything(cfg.train.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=2))
    cursor = QuestionCursor(load_questions(cfg.data.dir, "train"), cfg.train.seed)
    held_out = load_questions(cfg.data.dir, "val")[:cfg.train.eval_questions]
    with contextlib.ExitStack() as cleanup:
        if connect(cfg.ray.address, cfg.ray.num_cpus):
            cleanup.callback(ray.shutdown)
        stages = ActorStages.launch(cfg)
        cleanup.callback(stages.shutdown)
        learner = LearnerGroup(cfg, str(learner_dir(checkpoint)) if checkpoint else None)
        cleanup.callback(learner.shutdown)
        weights = learner.weights()
        stages.set_weights(weights.version, weights.translator, weights.reranker)
        driver = Driver(cfg, stages, learner, cursor, load_driver_state(checkpoint) if checkpoint else None)
        ledger = MetricsLedger(run_dir)
        cleanup.callback(ledger.close)
        evaluations = _past_evaluations(run_dir) if checkpoint else {}
        if driver.step == 0:
            evaluations[0] = _evaluate(stages, held_out, ledger, 0)
        evaluations.update(_run_steps(driver, ledger, held_out, run_dir, progress))
        learner.export(run_dir / "export")
        throughput = stages.generator_throughput()
    first, last = evaluations[min(evaluations)], evaluations[max(evaluations)]
    return {"initial": first, "final": last, "evaluations": evaluations, "run_dir": str(run_dir),
            "totals": dict(driver.totals), "generator_throughput": throughput}


def _run_steps(driver: Driver, ledger: MetricsLedger, held_out, run_dir: Path, progress: bool) -> dict[int, dict]:
    """The step loop: train, log, checkpoint and evaluate on schedule; returns the evaluations it ran."""
    cfg, evaluations = driver.cfg, {}
    bar = tqdm(total=cfg.train.steps, initial=driver.step, desc="train (distributed)", disable=not progress)
    while driver.step < cfg.train.steps:
        record = driver.train_step()
        ledger.log(driver.step, record)
        bar.update(1)
        bar.set_postfix(reward=f"{record['reward_mean']:.3f}", lag=record["policy_lag"],
                        dropped=driver.totals["dropped_stale"])
        last = driver.step == cfg.train.steps
        if (cfg.train.checkpoint_every and driver.step % cfg.train.checkpoint_every == 0) or last:
            _checkpoint(run_dir, driver)
        if driver.step % cfg.train.eval_every == 0 or last:
            evaluations[driver.step] = _evaluate(driver.stages, held_out, ledger, driver.step)
    bar.close()
    return evaluations


def _checkpoint(run_dir: Path, driver: Driver) -> None:
    target = checkpoint_dir(run_dir, driver.step)
    driver.learner.save(learner_dir(target))
    save_driver_state(target, driver.state())


def _evaluate(stages, questions, ledger: MetricsLedger, step: int) -> dict:
    metrics, _ = evaluate(stages, questions)
    ledger.log(step, {"eval": metrics})
    return metrics


def _past_evaluations(run_dir: Path) -> dict[int, dict]:
    """Evaluations an interrupted run already logged (so a resumed run still reports the untrained one)."""
    return {record["step"]: record["eval"] for record in read_metrics(run_dir) if "eval" in record}
