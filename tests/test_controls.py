"""Controls that can fail: the shuffled run shuffles its whole training signal, price included, and the learning
benchmark exports its trained weights, not the untrained step 0 its val curve may prefer."""

from __future__ import annotations

import random
from pathlib import Path

from mmrag.config import load_config
from mmrag.rl.rollout import Node, leaves
from mmrag.training.run import score_trees

ROOT = Path(__file__).resolve().parents[1]


def tree(kept_per_leaf: list[int]) -> Node:
    """root -> one query -> one leaf per entry, each keeping that many documents and scoring reward 0."""
    root = Node("root")
    query = root.add(Node("translator", output="q"))
    for kept in kept_per_leaf:
        query.add(Node("reranker", output=tuple(range(kept)), reward=0.0))
    return root


def test_the_shuffled_control_does_not_keep_an_intact_price_per_kept_document():
    cfg = load_config(None, ["experimental.shuffle_rewards=true", "train.doc_cost=0.5"])
    roots = [tree([0, 1, 2, 3]), tree([4, 5, 6, 7])]
    score_trees(roots, cfg, random.Random(0))
    batch = [leaf for root in roots for leaf in leaves(root)]
    priced = [-0.5 * len(leaf.output) for leaf in batch]
    values = [leaf.value for leaf in batch]
    assert sorted(values) == sorted(priced), "the signal's distribution is kept"
    assert values != priced, "each leaf's own price survived the shuffle: 'keep fewer documents' is still taught"


def test_without_the_control_each_leaf_pays_its_own_price():
    cfg = load_config(None, ["train.doc_cost=0.5"])
    roots = [tree([0, 3])]
    score_trees(roots, cfg, random.Random(0))
    assert [leaf.value for leaf in leaves(roots[0])] == [0.0, -1.5]


def test_the_learning_benchmarks_shuffled_run_exports_its_last_step_not_its_best_val_one():
    from benchmarks.learning import runs_for

    sets, _ = runs_for("mean")
    shuffled = load_config(ROOT / "mmrag/configs/local.yaml", sets["shuffled"])
    assert shuffled.experimental.shuffle_rewards
    assert shuffled.train.export == "last", "best_val may export step 0, the untrained weights: a pass by construction"
    reference = load_config(ROOT / "mmrag/configs/local.yaml", sets["local-reference"]).train
    assert reference.export == "best_val", "only the control gives up the val choice"
