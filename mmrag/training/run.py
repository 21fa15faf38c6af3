"""What every training run shares, whichever parts it runs on: questions, reward backprop, records.

`QuestionCursor` walks the training questions in resumable shuffled passes; `score_trees` is
reward backpropagation on a rolled-out batch (optional shuffle control of reward and price, node values,
sibling advantages); `rollout_metrics` summarises a batch for the run's record;
`prepare_run_dir` writes the run's config beside its metrics (in the driver's working copy of
`train.run_dir`, which is uploaded with every checkpoint when the run directory is remote).
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

from mmrag import storage
from mmrag.config import Config, config_to_dict
from mmrag.data.dataset import Question
from mmrag.rl.rollout import (Node, backprop_values, compute_advantages, leaves, nodes_at, shared_reward_credit,
                              shuffle_leaf_rewards)


class QuestionCursor:
    """Endless shuffled passes over the training questions; `epoch` and `position` are its resumable state."""

    def __init__(self, questions: list[Question], seed: int, epoch: int = 0, position: int = 0):
        if not questions:
            raise ValueError("training questions: the train split is empty (check data.dir)")
        self.questions, self.seed = questions, seed
        self.epoch, self.position = epoch, position
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
    """Reward backprop: each selection's price (`train.doc_cost` per kept document), the optional shuffle of
    reward and price together (control), node values, sibling advantages (or, with `experimental.credit: shared`, the
    shared-reward ablation's values and batch-baseline advantages)."""
    for root in roots:
        for leaf in leaves(root):
            leaf.cost = cfg.train.doc_cost * len(leaf.output)
    if cfg.experimental.shuffle_rewards:
        shuffle_leaf_rewards(roots, rng)
    if cfg.experimental.credit == "shared":
        shared_reward_credit(roots)
        return
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


RUN_FILES = ("config.json", "metrics.jsonl", "tensorboard")
"""What the driver writes in its working copy of the run directory and uploads with every checkpoint."""


def prepare_run_dir(cfg: Config) -> Path:
    """The driver's working copy of the run directory (`train.run_dir` itself when local, `mmrag.storage`),
    holding what the run's storage has of `RUN_FILES`, with the config the run uses written into it."""
    run_dir = storage.local_mirror(cfg.train.run_dir)
    storage.mirror_down(cfg.train.run_dir, run_dir, RUN_FILES)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config_to_dict(cfg), indent=2))
    return run_dir
