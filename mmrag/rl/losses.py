"""Local losses: scored rollout trees -> one ordinary differentiable loss per component.

After `backprop_values` and `compute_advantages`, the learner picks training signal
here (preference pairs, policy examples), recomputes the log-probabilities of those
samples under the current weights, and minimises:

* translator: DPO on preference pairs among the N queries of one question
  (`translator_loss: dpo`), or its reference-free variant (`dpo_reference_free`);
* reranker: the Plackett-Luce policy loss weighted by advantage (`pl_policy`), or a
  pairwise preference loss among the M selections of one query (`pairwise`), each
  example weighted by its truncated importance weight when it was drawn by an older
  policy version (`truncated_importance_weights`), plus optionally a penalty on how far the
  policy moved from the one that drew them (`behaviour_kl_penalty`); with a retrieval gate,
  also the gate's classifier of its better arm (`gate_loss`).

Every loss returns a zero that backward() accepts when the batch has no signal.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

from mmrag.rl.rollout import Node, nodes_at


def distinct_outputs(siblings: list[Node]) -> list[tuple[Node, float]]:
    """One entry per distinct output among siblings: its first sibling and the mean value of all that share it.

    The same query (or selection) drawn twice is one candidate, valued by the average of its
    draws: siblings A=1.0, A=0.0, B=0.5 are A=0.5 and B=0.5, never both A>B and B>A.
    """
    groups: dict = {}
    for node in siblings:
        groups.setdefault(node.output, []).append(node)
    return [(nodes[0], statistics.fmean(node.value for node in nodes)) for nodes in groups.values()]


def preference_pairs(siblings: list[Node], margin: float, max_pairs: int | None = None) -> list[tuple[Node, Node]]:
    """(chosen, rejected) among the distinct outputs of siblings whose mean values differ by more than margin.

    Siblings with identical outputs are first merged (`distinct_outputs`); the first of them
    stands for the group in the returned pairs. Equal values never pair. Beyond `max_pairs`,
    the largest value gaps are kept; equal gaps keep the order of (chosen, rejected) first
    positions among siblings.
    """
    if margin < 0:
        raise ValueError(f"margin (train.pair_margin): expected >= 0, got {margin!r}")
    if max_pairs is not None and max_pairs < 0:
        raise ValueError(f"max_pairs (train.max_pairs_per_question): expected >= 0, got {max_pairs!r}")
    for position, node in enumerate(siblings):
        if node.value is None:
            raise ValueError(f"siblings[{position}] at level {node.level!r} has no value; run backprop_values first")
    candidates = distinct_outputs(siblings)
    ranked = []
    for i, (first, first_value) in enumerate(candidates):
        for j in range(i + 1, len(candidates)):
            second, second_value = candidates[j]
            if first_value == second_value:
                continue
            (c, chosen, chosen_value), (r, rejected, rejected_value) = sorted(
                [(i, first, first_value), (j, second, second_value)], key=lambda item: -item[2])
            gap = chosen_value - rejected_value
            if gap > margin:
                ranked.append((-gap, c, r, chosen, rejected))
    ranked.sort(key=lambda item: item[:3])
    pairs = [(chosen, rejected) for *_, chosen, rejected in ranked]
    return pairs if max_pairs is None else pairs[:max_pairs]


def translator_preference_pairs(root: Node, margin: float, max_pairs: int) -> list[tuple[Node, Node]]:
    """Preference pairs among the translator children (sampled queries) of one question."""
    return preference_pairs([child for child in root.children if child.level == "translator"], margin, max_pairs)


def ranking_draws(translator_node: Node) -> list[Node]:
    """The reranker selections the ranking drew for one query: its reranker children, or with a retrieval gate
    the children of its "retrieve" arm (the "skip" arm's empty selection is the gate's, not a draw)."""
    draws = []
    for child in translator_node.children:
        if child.level == "reranker":
            draws.append(child)
        elif child.level == "gate" and child.output == "retrieve":
            draws.extend(child.children)
    return draws


def gate_value_gap(translator_node: Node) -> float | None:
    """V(skip arm) - V(retrieve arm) below one query, or None without a retrieval gate there."""
    arms = {child.output: child.value for child in translator_node.children if child.level == "gate"}
    if not arms:
        return None
    if arms.keys() != {"skip", "retrieve"} or None in arms.values():
        raise ValueError(f"gate arms of query {translator_node.output!r}: expected valued 'skip' and 'retrieve' "
                         f"nodes, got {arms}; run backprop_values first")
    return arms["skip"] - arms["retrieve"]


def reranker_preference_pairs(translator_node: Node, margin: float) -> list[tuple[Node, Node]]:
    """Preference pairs among the ranking's draws (sampled selections) for one query."""
    return preference_pairs(ranking_draws(translator_node), margin)


def reranker_policy_examples(root: Node) -> list[Node]:
    """The ranking's draws of one question that carry signal (advantage != 0)."""
    return [node for t_node in nodes_at(root, "translator") for node in ranking_draws(t_node) if node.advantage]


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


def _check_cap(cap: float) -> None:
    if not cap >= 1:
        raise ValueError(f"cap (train.importance_ratio_cap): expected >= 1, so that on-policy examples keep "
                         f"weight 1, got {cap!r}")


def truncated_importance_weights(log_ratios: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, ratios) for log importance ratios log(pi_now / pi_behaviour): ratio = exp, weight = min(ratio, cap).

    Truncated importance sampling. Experience drawn by an older policy version mu estimates the
    gradient at the current policy pi when weighted by pi/mu; truncating that weight at `cap`
    bounds the variance (by cap^2) at the price of a bias only where pi/mu > cap. Both are
    constants (no gradient flows through the weight): the loss then has the gradient of the
    importance-weighted estimator, w * A * grad log pi. On-policy, log_ratios are exactly 0 and
    every weight exactly 1, so the corrected loss is the uncorrected one.
    """
    _check_cap(cap)
    ratios = log_ratios.detach().exp()
    return ratios.clamp(max=cap), ratios


def behaviour_kl_penalty(logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor) -> torch.Tensor:
    """mean over examples of (log pi - log mu)^2 / 2: the k2 estimate of KL(mu || pi) from samples drawn by mu.

    A trust region across optimiser steps. Truncating importance weights bounds the variance of a
    stale batch's gradient, not how far the policy walks away from the versions that draw its
    experience: under a lag of L versions every batch is L steps stale, and once the current policy
    gives the stale draws a fraction of their behaviour probability the batch's weights are near 0
    and its signal is gone (docs/LEARNING.md, "The ranking collapses follow the policy's drift").
    Added to the loss with a coefficient, this pulls log pi of each stale draw back towards log mu,
    in proportion to how far it moved. On-policy (log pi = log mu) its value and its gradient are
    exactly 0, so synchronous training is unchanged. The behaviour log-probs are constants.
    """
    _check_same_shape(logprobs=logprobs, behaviour_logprobs=behaviour_logprobs)
    if logprobs.numel() == 0:
        return _zero_loss(logprobs)
    return ((logprobs - behaviour_logprobs.detach().to(logprobs.dtype)) ** 2).mean() / 2


def _weighted_mean(per_example: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    if weights is None:
        return per_example.mean()
    _check_same_shape(per_example=per_example, weights=weights)
    return (weights.detach().to(per_example.dtype) * per_example).mean()


def pairwise_preference_loss(chosen_logprob: torch.Tensor, rejected_logprob: torch.Tensor,
                             beta: float, weights: torch.Tensor | None = None) -> torch.Tensor:
    """mean over pairs of -w * log sigmoid(beta * (l_chosen - l_rejected)); w = 1 without `weights`."""
    _check_beta(beta)
    _check_same_shape(chosen_logprob=chosen_logprob, rejected_logprob=rejected_logprob)
    if chosen_logprob.numel() == 0:
        return _zero_loss(chosen_logprob)
    return _weighted_mean(-F.logsigmoid(beta * (chosen_logprob - rejected_logprob)), weights)


def preference_stats(chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, beta: float) -> dict[str, float]:
    """DPO's implicit reward margin beta * (chosen - rejected) and pair accuracy (margin > 0), means over pairs.

    For DPO the log-ratios are log pi - log pi_ref of each query; for the reference-free losses,
    the log-probs themselves. A learning preference loss drives both up.
    """
    margins = beta * (chosen_logratio.detach() - rejected_logratio.detach())
    if not margins.numel():
        return {"reward_margin": 0.0, "pair_accuracy": 0.0}
    return {"reward_margin": float(margins.mean()), "pair_accuracy": float((margins > 0).float().mean())}


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


def pl_policy_loss(logprobs: torch.Tensor, advantages: torch.Tensor,
                   weights: torch.Tensor | None = None) -> torch.Tensor:
    """Listwise Plackett-Luce policy loss: -mean(w * A * log P(selection)), advantages and weights held constant.

    Descending it raises the probability of selections that beat their siblings' mean
    (A > 0) and lowers it for those that fell short (A < 0). `weights` (default 1) are the
    importance weights of off-policy selections (`truncated_importance_weights`).
    """
    _check_same_shape(logprobs=logprobs, advantages=advantages)
    if logprobs.numel() == 0:
        return _zero_loss(logprobs)
    return _weighted_mean(-(advantages.detach().to(logprobs.dtype) * logprobs), weights)


def gate_loss(skip_logits: torch.Tensor, value_gaps: torch.Tensor, gap_unit: float | None = None) -> torch.Tensor:
    """The retrieval gate's loss: mean over queries of w * BCE(skip logit, gap > 0), gap = V(skip) - V(retrieve),
    w = |gap|, or with a `gap_unit` u, min(|gap| / u, 1).

    Both arms are evaluated on every query, so this is a classifier of the better arm weighted by what choosing it
    is worth. With w = |gap| (the regret) its gradient on a query is the policy gradient sigma(1 - sigma) * gap
    divided by the probability of the better arm: it fades only once the gate prefers that arm, so the many
    queries where retrieval wins cannot push the gate past the point where it would learn from the few where
    skipping wins (a policy gradient stalls there, its sigma(1 - sigma) factor near 0), and a query's loss stays
    bounded (a forced empty selection weighted by its advantage pushes the skip logit without end;
    docs/LEARNING.md). A unit counts every gap of at least that much alike: at the price of one document, a visual
    question where skipping saves a document weighs as much as a fact question where retrieving gets the answer,
    where the regret weighs it 50 times less.
    """
    _check_same_shape(skip_logits=skip_logits, value_gaps=value_gaps)
    if gap_unit is not None and gap_unit <= 0:
        raise ValueError(f"gate_loss: gap_unit must be positive, got {gap_unit!r}")
    if skip_logits.numel() == 0:
        return _zero_loss(skip_logits)
    gaps = value_gaps.detach().to(skip_logits.dtype)
    weights = gaps.abs() if gap_unit is None else (gaps.abs() / gap_unit).clamp(max=1.0)
    return (weights * F.binary_cross_entropy_with_logits(skip_logits, (gaps > 0).to(skip_logits.dtype),
                                                         reduction="none")).mean()
