"""Rollout tree: value backprop (mean / max, any depth), advantages, reward shuffling, a price per document."""

from __future__ import annotations

import random

import pytest

from mmrag.config import load_config
from mmrag.rl.rollout import (Node, backprop_values, compute_advantages, leaves, nodes_at, shared_reward_credit,
                              shuffle_leaf_rewards)
from mmrag.training.run import score_trees


def two_by_two(rewards=((1.0, 0.0), (0.5, 0.5))) -> Node:
    """root -> queries "q0", "q1" -> two selections each, leaves scored by `rewards`."""
    root = Node("root")
    for i, query_rewards in enumerate(rewards):
        translator = root.add(Node("translator", output=f"q{i}"))
        for j, reward in enumerate(query_rewards):
            translator.add(Node("reranker", output=(j,), reward=reward))
    return root


def values(root: Node, level: str) -> list[float]:
    return [node.value for node in nodes_at(root, level)]


def advantages(root: Node, level: str) -> list[float]:
    return [node.advantage for node in nodes_at(root, level)]


def test_mean_aggregate_values_and_advantages():
    root = two_by_two()
    # q0: (1 + 0) / 2 = 0.5; q1: (0.5 + 0.5) / 2 = 0.5; root: 0.5.
    assert backprop_values(root, {"reranker": "mean"}) == 0.5
    assert values(root, "translator") == [0.5, 0.5]
    compute_advantages(root)
    # Translators tie (0.5 - 0.5 = 0); q0's selections: 1 - 0.5 = +0.5, 0 - 0.5 = -0.5; q1's tie.
    assert advantages(root, "translator") == [0.0, 0.0]
    assert advantages(root, "reranker") == [0.5, -0.5, 0.0, 0.0]
    assert root.advantage is None


def test_max_aggregate_values_and_advantages():
    root = two_by_two()
    # q0: max(1, 0) = 1; q1: max(0.5, 0.5) = 0.5; root by the same rule: max = 1.
    assert backprop_values(root, "max") == 1.0
    assert values(root, "translator") == [1.0, 0.5]
    compute_advantages(root)
    # Sibling mean (1 + 0.5) / 2 = 0.75: q0 +0.25, q1 -0.25.
    assert advantages(root, "translator") == [0.25, -0.25]
    assert advantages(root, "reranker") == [0.5, -0.5, 0.0, 0.0]


def test_depth_three_tree_with_a_rule_per_level():
    # root -> 2 queries -> 2 selections -> 2 sampled answers (leaves).
    leaf_rewards = [[(1.0, 0.0), (0.0, 0.0)], [(0.5, 0.5), (1.0, 1.0)]]
    root = Node("root")
    for query_rewards in leaf_rewards:
        translator = root.add(Node("translator"))
        for selection_rewards in query_rewards:
            reranker = translator.add(Node("reranker"))
            for reward in selection_rewards:
                reranker.add(Node("generator", reward=reward))
    # Selections by max: 1, 0, 0.5, 1. Queries by mean: 0.5, 0.75. Root (level unnamed -> mean): 0.625.
    assert backprop_values(root, {"generator": "max", "reranker": "mean"}) == pytest.approx(0.625)
    assert values(root, "reranker") == [1.0, 0.0, 0.5, 1.0]
    assert values(root, "translator") == [0.5, 0.75]
    compute_advantages(root)
    assert advantages(root, "translator") == pytest.approx([-0.125, 0.125])
    # Selections: 1 - 0.5, 0 - 0.5, 0.5 - 0.75, 1 - 0.75.
    assert advantages(root, "reranker") == pytest.approx([0.5, -0.5, -0.25, 0.25])
    assert advantages(root, "generator") == pytest.approx([0.5, -0.5, 0, 0, 0, 0, 0, 0])
    # All "mean": selections 0.5, 0, 0.5, 1; queries 0.25, 0.75; root 0.5.
    assert backprop_values(root, "mean") == pytest.approx(0.5)
    assert values(root, "translator") == [0.25, 0.75]


def test_equal_siblings_get_exact_zero_advantage():
    # fmean of three 0.1s is not exactly 0.1 in floating point; ties must still give 0.
    root = two_by_two(((0.1, 0.1, 0.1), (0.3,)))
    backprop_values(root)
    compute_advantages(root)
    assert advantages(root, "reranker") == [0.0, 0.0, 0.0, 0.0]


def test_walk_helpers_keep_tree_order():
    root = two_by_two()
    assert [node.output for node in nodes_at(root, "translator")] == ["q0", "q1"]
    assert [node.reward for node in leaves(root)] == [1.0, 0.0, 0.5, 0.5]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="unknown rule 'median' \\(valid: mean, max\\)"):
        backprop_values(two_by_two(), {"reranker": "median"})
    unscored = two_by_two()
    unscored.children[1].children[0].reward = None
    with pytest.raises(ValueError, match="has no reward"):
        backprop_values(unscored)
    with pytest.raises(ValueError, match="run backprop_values first"):
        compute_advantages(two_by_two())
    mixed = two_by_two()
    mixed.add(Node("reranker", reward=1.0))
    with pytest.raises(ValueError, match="children must share one level"):
        backprop_values(mixed)


def test_shuffle_permutes_rewards_across_the_batch():
    all_ones, all_zeros = two_by_two(((1.0, 1.0), (1.0, 1.0))), two_by_two(((0.0, 0.0), (0.0, 0.0)))
    shuffle_leaf_rewards([all_ones, all_zeros], random.Random(0))
    first, second = [leaf.reward for leaf in leaves(all_ones)], [leaf.reward for leaf in leaves(all_zeros)]
    # Same multiset (four 1s, four 0s), but rewards crossed from one question to the other.
    assert sorted(first + second) == [0.0] * 4 + [1.0] * 4
    assert 0.0 in first and 1.0 in second


def test_shared_reward_credits_every_node_with_its_leaves_raw_reward_minus_the_batch_mean():
    # Two questions; batch leaves 1, 0, .5, .5 | 0, 0, 0, 1: baseline 3 / 8 = 0.375.
    first, second = two_by_two(), two_by_two(((0.0, 0.0), (0.0, 1.0)))
    shared_reward_credit([first, second])
    assert values(first, "translator") == [0.5, 0.5] and values(second, "translator") == [0.0, 0.5]
    assert advantages(first, "translator") == [0.125, 0.125]
    assert advantages(second, "translator") == [-0.375, 0.125]
    # Tree backprop would give the second question's first selections 0 and 0 (they tie as siblings).
    assert advantages(first, "reranker") == [0.625, -0.375, 0.125, 0.125]
    assert advantages(second, "reranker") == [-0.375, -0.375, -0.375, 0.625]
    assert (first.value, second.value, first.advantage) == (0.5, 0.25, None)


def test_a_price_per_kept_document_breaks_ties_toward_keeping_less_and_leaves_the_reward_as_scored():
    """`train.doc_cost`: two selections that answer alike (1.0), one keeping nothing and one keeping two
    documents, tie without a price; at 0.05 a document the empty one wins, in tree and shared credit alike."""
    def question() -> Node:
        root = Node("root")
        translator = root.add(Node("translator", output="q"))
        translator.add(Node("reranker", output=(), reward=1.0))
        translator.add(Node("reranker", output=(3, 7), reward=1.0))
        return root

    free = question()
    score_trees([free], load_config(None, ["train.doc_cost=0"]), random.Random(0))
    assert advantages(free, "reranker") == [0.0, 0.0]
    for credit in ("tree", "shared"):
        priced = question()
        cfg = load_config(None, ["train.doc_cost=0.05", f"experimental.credit={credit}"])
        score_trees([priced], cfg, random.Random(0))
        assert values(priced, "reranker") == pytest.approx([1.0, 0.9])
        assert advantages(priced, "reranker") == pytest.approx([0.05, -0.05])
        assert [leaf.reward for leaf in leaves(priced)] == [1.0, 1.0], "what is reported stays the reward model's"
