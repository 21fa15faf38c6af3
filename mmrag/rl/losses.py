"""Local losses: scored rollout trees -> one ordinary differentiable loss per component.

After `backprop_values` and `compute_advantages`, the learner picks training signal
here (preference pairs, policy examples), recomputes the log-probabilities of those
samples under the current weights, and minimises:

* translator: DPO on preference pairs among the N queries of one question
  (`translator_loss: dpo`), or its reference-free variant (`dpo_reference_free`);
* reranker: the Plackett-Luce policy loss weighted by advantage (`pl_policy`), or a
  pairwise preference loss among the M selections of one query (`pairwise`).

Every loss returns a zero that backward() accepts when the batch has no signal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mmrag.rl.rollout import Node, nodes_at


def preference_pairs(siblings: list[Node], margin: float, max_pairs: int | None = None) -> list[tuple[Node, Node]]:
    """(chosen, rejected) among siblings with chosen.value - rejected.value > margin.

    Equal values and identical outputs never pair. Beyond `max_pairs`, the largest value
    gaps are kept; equal gaps keep the order of (chosen, rejected) positions among siblings.
    """
    if margin < 0:
        raise ValueError(f"margin (train.pair_margin): expected >= 0, got {margin!r}")
    if max_pairs is not None and max_pairs < 0:
        raise ValueError(f"max_pairs (train.max_pairs_per_question): expected >= 0, got {max_pairs!r}")
    for position, node in enumerate(siblings):
        if node.value is None:
            raise ValueError(f"siblings[{position}] at level {node.level!r} has no value; run backprop_values first")
    ranked = []
    for i, first in enumerate(siblings):
        for j in range(i + 1, len(siblings)):
            second = siblings[j]
            if first.output == second.output or first.value == second.value:
                continue
            (c, chosen), (r, rejected) = sorted([(i, first), (j, second)], key=lambda item: -item[1].value)
            gap = chosen.value - rejected.value
            if gap > margin:
                ranked.append((-gap, c, r, chosen, rejected))
    ranked.sort(key=lambda item: item[:3])
    pairs = [(chosen, rejected) for *_, chosen, rejected in ranked]
    return pairs if max_pairs is None else pairs[:max_pairs]


def translator_preference_pairs(root: Node, margin: float, max_pairs: int) -> list[tuple[Node, Node]]:
    """Preference pairs among the translator children (sampled queries) of one question."""
    return preference_pairs([child for child in root.children if child.level == "translator"], margin, max_pairs)


def reranker_preference_pairs(translator_node: Node, margin: float) -> list[tuple[Node, Node]]:
    """Preference pairs among the reranker children (sampled selections) of one query."""
    return preference_pairs([child for child in translator_node.children if child.level == "reranker"], margin)


def reranker_policy_examples(root: Node) -> list[Node]:
    """Reranker nodes of one question that carry signal (advantage != 0)."""
    return [node for node in nodes_at(root, "reranker") if node.advantage]


def _zero_loss(like: torch.Tensor) -> torch.Tensor:
    """0 for an empty batch, keeping the inputs' grad path so every replica can backward()."""
    if like.requires_grad:
        return like.sum() * 0.0
    return torch.zeros((), dtype=like.dtype, device=like.device, requires_grad=True)


def _check_beta(beta: float) -> None:
    if not beta > 0:
        raise ValueError(f"beta (train.dpo_beta): expected > 0, got {beta!r}")


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) != 1 or len(next(iter(shapes.values()))) != 1:
        raise ValueError(f"expected 1-D tensors of one length (one entry per pair), got shapes {shapes}")


def pairwise_preference_loss(chosen_logprob: torch.Tensor, rejected_logprob: torch.Tensor,
                             beta: float) -> torch.Tensor:
    """mean over pairs of -log sigmoid(beta * (l_chosen - l_rejected))."""
    _check_beta(beta)
    _check_same_shape(chosen_logprob=chosen_logprob, rejected_logprob=rejected_logprob)
    if chosen_logprob.numel() == 0:
        return _zero_loss(chosen_logprob)
    return -F.logsigmoid(beta * (chosen_logprob - rejected_logprob)).mean()


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO: mean over pairs of -log sigmoid(beta * ((pc - rc) - (pr - rr))).

    p*: log-probs of the chosen/rejected query under the translator being trained;
    r*: under the frozen reference copy of the initial translator (constants).
    """
    _check_same_shape(policy_chosen=policy_chosen, policy_rejected=policy_rejected,
                      ref_chosen=ref_chosen, ref_rejected=ref_rejected)
    return pairwise_preference_loss(policy_chosen - ref_chosen.detach(), policy_rejected - ref_rejected.detach(), beta)


def reference_free_dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO without a reference model: mean over pairs of -log sigmoid(beta * (pc - pr))."""
    return pairwise_preference_loss(policy_chosen, policy_rejected, beta)


def pl_policy_loss(logprobs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """Listwise Plackett-Luce policy loss: -mean(A * log P(selection)), advantages held constant.

    Descending it raises the probability of selections that beat their siblings' mean
    (A > 0) and lowers it for those that fell short (A < 0).
    """
    _check_same_shape(logprobs=logprobs, advantages=advantages)
    if logprobs.numel() == 0:
        return _zero_loss(logprobs)
    return -(advantages.detach().to(logprobs.dtype) * logprobs).mean()
