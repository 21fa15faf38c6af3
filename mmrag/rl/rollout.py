"""The rollout tree of one question, and reward backpropagation up it.

One question's rollout: root -> N translator nodes (sampled queries) -> M reranker
nodes each (sampled selections) -> the answer, scored by the reward model, on each
reranker leaf. Nothing here knows those level names: any component is a level, so a
deeper pipeline is a deeper tree. The trainer builds the trees, optionally shuffles
leaf rewards (control experiment), calls `backprop_values` then `compute_advantages`,
and `mmrag.rl.losses` turns the scored nodes into local losses.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

AGGREGATES = {"mean": statistics.fmean, "max": max}


@dataclass
class Node:
    """One sampled output of one component (or the question itself, at the root)."""

    level: str
    """Component that produced this node: "root", "translator", "reranker", ..."""
    output: Any = None
    """What it produced: the query text, the selection of doc ids, ..."""
    logprob: float | None = None
    """Log-probability of `output` under the sampling policy."""
    ref_logprob: float | None = None
    """Log-probability under the frozen reference model (translator DPO)."""
    policy_version: int = 0
    """Version of the policy weights that sampled `output`."""
    reward: float | None = None
    """Reward-model score; set on leaves only."""
    cost: float = 0.0
    """What the leaf's output costs, subtracted from `reward` in its value (e.g. a price per kept document)."""
    children: list[Node] = field(default_factory=list)
    """Nodes sampled downstream of this one."""
    value: float | None = None
    """Filled by `backprop_values`: the reward, or the aggregate of the children's values."""
    advantage: float | None = None
    """Filled by `compute_advantages`: value minus the mean value of its siblings."""
    payload: dict = field(default_factory=dict)
    """Anything else the pipeline carries along (answers, candidate ids, prompts)."""

    def add(self, child: Node) -> Node:
        """Attach `child` below this node and return it."""
        self.children.append(child)
        return child


def walk(root: Node) -> Iterator[Node]:
    """Every node, parents before children, siblings in order."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))


def nodes_at(root: Node, level: str) -> list[Node]:
    """Nodes produced by the component `level`, in tree order."""
    return [node for node in walk(root) if node.level == level]


def leaves(root: Node) -> list[Node]:
    """Nodes without children (those that carry rewards), in tree order."""
    return [node for node in walk(root) if not node.children]


def _children_level(node: Node) -> str:
    levels = {child.level for child in node.children}
    if len(levels) != 1:
        raise ValueError(f"node at level {node.level!r}: children must share one level, got {sorted(levels)}")
    return levels.pop()


def _aggregate_rule(aggregate: dict[str, str] | str, children_level: str) -> str:
    """The rule for nodes whose children are at `children_level`; levels a dict omits use mean."""
    rule = aggregate if isinstance(aggregate, str) else aggregate.get(children_level, "mean")
    if rule not in AGGREGATES:
        raise ValueError(f"aggregate for children at level {children_level!r}: unknown rule {rule!r} "
                         f"(valid: {', '.join(AGGREGATES)})")
    return rule


def _net_reward(leaf: Node) -> float:
    """A scored leaf's reward less what its output costs: the value every credit rule starts from."""
    return float(leaf.reward) - leaf.cost


def backprop_values(root: Node, aggregate: dict[str, str] | str = "mean") -> float:
    """Fill `value` on every node and return the root's.

    Leaf: V = reward - cost. Inner node: V = aggregate over children of V(child), the rule
    chosen by the children's level, e.g. {"reranker": "mean"} makes a translator node's
    value the expected reward under the current reranker, "max" the best reachable one.
    """
    if not root.children:
        if root.reward is None:
            raise ValueError(f"leaf at level {root.level!r} (output {root.output!r}) has no reward; "
                             "score every leaf before backprop")
        root.value = _net_reward(root)
        return root.value
    rule = _aggregate_rule(aggregate, _children_level(root))
    root.value = float(AGGREGATES[rule]([backprop_values(child, aggregate) for child in root.children]))
    return root.value


def compute_advantages(root: Node) -> None:
    """Fill `advantage` on every node below the root: A = V - mean of its siblings' V (itself included).

    An only child, or siblings that all share one value, get exactly 0 (no signal).
    """
    for parent in walk(root):
        values = [child.value for child in parent.children]
        if any(v is None for v in values):
            raise ValueError(f"children of the {parent.level!r} node have no value; run backprop_values first")
        if not values:
            continue
        # Exact zeros for ties, so that float rounding of the mean never invents a signal.
        baseline = values[0] if min(values) == max(values) else statistics.fmean(values)
        for child in parent.children:
            child.advantage = child.value - baseline


def shared_reward_credit(roots: list[Node]) -> None:
    """Shared reward, no tree backprop: every node's value is the mean raw reward (less any cost) of the leaves
    below it (a leaf: its own) and its advantage that value minus the batch baseline, the mean net leaf reward
    of the whole batch. Fills `value` and `advantage` on every node (the roots' advantage stays None).

    A query drawn once and followed by M selections is M trajectories that each credit it with their
    own reward; a policy gradient sums them, which is the mean of its leaves. Without a retrieval gate that
    is tree backprop's value with `aggregate: mean`. With one, tree backprop averages the gate's two arms
    (the skip arm's single leaf weighs 1/2, against 1/M here); but the skip arm reads no evidence and scores
    alike for every query of a question, so both values rise with the retrieve arm's, and the translator's
    preference pairs and the gate's gaps are the same. What differs is the ranking's credit: the whole
    batch as its baseline instead of the draws for the same query, so draws that tie with their siblings,
    which tree backprop leaves alone, move by their query's offset from the batch.
    """
    batch_leaves = [leaf for root in roots for leaf in leaves(root)]
    unscored = [leaf for leaf in batch_leaves if leaf.reward is None]
    if unscored:
        raise ValueError(f"leaf at level {unscored[0].level!r} (output {unscored[0].output!r}) has no reward; "
                         "score every leaf before assigning credit")
    baseline = statistics.fmean(_net_reward(leaf) for leaf in batch_leaves)
    for root in roots:
        for node in walk(root):
            node.value = statistics.fmean(_net_reward(leaf) for leaf in leaves(node))
            if node is not root:
                node.advantage = node.value - baseline


def shuffle_leaf_rewards(roots: list[Node], rng: random.Random) -> None:
    """Control experiment: permute each leaf's whole signal, reward and cost together, across the batch, before
    backprop.

    Keeps the signal's distribution and destroys its link to what was sampled, the price of what a leaf kept
    included (a cost left in place would still teach "keep fewer"); a learner that still improves would be
    learning from something other than its signal.
    """
    batch_leaves = [leaf for root in roots for leaf in leaves(root)]
    signals = [(leaf.reward, leaf.cost) for leaf in batch_leaves]
    rng.shuffle(signals)
    for leaf, (reward, cost) in zip(batch_leaves, signals):
        leaf.reward, leaf.cost = reward, cost
