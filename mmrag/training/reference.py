"""The single-process reference trainer: the whole algorithm in one loop, no Ray.

Each step: sample a batch of training questions, roll out N queries x M selections
per question, score the answers, backpropagate the rewards up each tree, and take one
optimiser step per trainable component on its local loss. Held-out greedy evaluation
every `train.eval_every` steps. Writes the same metrics.jsonl as the distributed
trainer; it is the yardstick that trainer is checked against, and the debugging fallback.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from mmrag.config import Config, config_to_dict
from mmrag.data.dataset import Question, load_questions
from mmrag.rl.rollout import Node, backprop_values, compute_advantages, leaves, nodes_at, shuffle_leaf_rewards
from mmrag.training.evaluate import evaluate
from mmrag.training.export import save_export
from mmrag.training.ledger import MetricsLedger
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.rollout_batch import StageTimer, rollout_batch
from mmrag.training.updates import update_reranker, update_translator


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class QuestionCursor:
    """Endless shuffled passes over the training questions; its position is resumable state."""

    def __init__(self, questions: list[Question], seed: int):
        self.questions, self.seed, self.epoch, self.position = questions, seed, 0, 0
        self._order = self._shuffled()

    def _shuffled(self) -> list[int]:
        order = list(range(len(self.questions)))
        random.Random(self.seed * 100_003 + self.epoch).shuffle(order)
        return order

    def next_batch(self, size: int) -> list[Question]:
        batch = []
        while len(batch) < size:
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._shuffled()
            batch.append(self.questions[self._order[self.position]])
            self.position += 1
        return batch


def score_trees(roots: list[Node], cfg: Config, rng: random.Random) -> None:
    """Reward backprop: optional reward shuffle (control), node values, sibling advantages."""
    if cfg.train.shuffle_rewards:
        shuffle_leaf_rewards(roots, rng)
    for root in roots:
        backprop_values(root, {"reranker": cfg.train.aggregate, "translator": "mean"})
        compute_advantages(root)


def rollout_metrics(roots: list[Node]) -> dict[str, float]:
    """Reward per level plus what the components produced, over a batch of scored trees."""
    batch_leaves = [leaf for root in roots for leaf in leaves(root)]
    queries = [node for root in roots for node in nodes_at(root, "translator")]
    return {
        "reward_mean": statistics.fmean(leaf.reward for leaf in batch_leaves),
        "value_translator_mean": statistics.fmean(node.value for node in queries),
        "value_translator_best": statistics.fmean(max(n.value for n in root.children) for root in roots),
        "docs_kept_mean": statistics.fmean(len(leaf.output) for leaf in batch_leaves),
        "query_words_mean": statistics.fmean(len(node.output.split()) for node in queries),
        "leaves": len(batch_leaves),
    }


def train_reference(cfg: Config, progress: bool = True, device: str = "cpu") -> dict:
    """Train translator and reranker in this process (on `device`); returns the first and last evaluations."""
    seed_everything(cfg.train.seed)
    run_dir = Path(cfg.train.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=2))
    pipeline = LocalPipeline.from_config(cfg, device)
    cursor = QuestionCursor(load_questions(cfg.data.dir, "train"), cfg.train.seed)
    held_out = load_questions(cfg.data.dir, "val")[:cfg.train.eval_questions]
    translator_opt = torch.optim.AdamW(pipeline.translator.trainable_parameters(), lr=cfg.translator.lr)
    reranker_opt = torch.optim.AdamW(pipeline.reranker.trainable_modules().parameters(), lr=cfg.reranker.lr)
    rng = random.Random(cfg.train.seed)
    ledger = MetricsLedger(run_dir)
    evaluations = {0: _evaluate(pipeline, held_out, ledger, 0)}
    bar = tqdm(range(1, cfg.train.steps + 1), desc="train (reference)", disable=not progress)
    for step in bar:
        timer = StageTimer()
        start = time.perf_counter()
        roots = rollout_batch(pipeline, cursor.next_batch(cfg.train.questions_per_step),
                              cfg.translator.num_samples, cfg.reranker.num_samples, step - 1, timer)
        score_trees(roots, cfg, rng)
        record = rollout_metrics(roots)
        with timer.stage("learn"):
            if cfg.train.train_translator:
                record["translator"] = update_translator(pipeline.translator, translator_opt, roots, cfg.train)
            if cfg.train.train_reranker:
                record["reranker"] = update_reranker(pipeline.reranker, reranker_opt, roots, cfg.train,
                                                     cfg.reranker.temperature)
        elapsed = time.perf_counter() - start
        record.update(policy_version=step, produced=len(roots), trained=len(roots), dropped_stale=0, failed=0,
                      leaves_per_s=record["leaves"] / elapsed, stage_seconds=timer.seconds)
        ledger.log(step, record)
        bar.set_postfix(reward=f"{record['reward_mean']:.3f}")
        if step % cfg.train.eval_every == 0 or step == cfg.train.steps:
            evaluations[step] = _evaluate(pipeline, held_out, ledger, step)
    ledger.close()
    save_export(run_dir / "export", pipeline.translator, pipeline.reranker, cfg.train.steps, cfg)
    first, last = evaluations[0], evaluations[max(evaluations)]
    return {"initial": first, "final": last, "evaluations": evaluations, "run_dir": str(run_dir)}


def _evaluate(pipeline: LocalPipeline, questions: list[Question], ledger: MetricsLedger, step: int) -> dict:
    metrics, _ = evaluate(pipeline, questions)
    ledger.log(step, {"eval": metrics})
    return metrics
