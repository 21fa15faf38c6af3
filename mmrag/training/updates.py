"""Local losses of a batch: scored rollout trees -> one differentiable loss per trainable component.

Translator: DPO (or reference-free DPO) on preference pairs among the N sampled queries
of each question. Reranker: the listwise Plackett-Luce policy loss weighted by each
selection's advantage among its M siblings, or the pairwise preference variant. Both
recompute log-probs under the current weights, so the same functions serve the in-process
learner and the DeepSpeed ranks (`mmrag.training.learner`, `mmrag.training.deepspeed_rank`),
which take the optimiser steps.

Asynchronous training hands the learner experience drawn by an older policy version.
The reranker's losses estimate the gradient at the policy that draws the samples, so a
stale selection is weighted by its truncated importance ratio min(pi_now / mu, C)
(`mmrag.rl.losses.truncated_importance_weights`), mu being the behaviour log-prob stored
on the node (under logits / temperature, as it was sampled). A pair of the pairwise
variant weighs the product of its two ratios, the probability of drawing that pair. This
is AReaL's decoupled objective at the one optimiser step this trainer takes per batch:
the proximal policy is then the current weights, its clipped ratio is exactly 1, and only
the behaviour weight remains. PPO-style clipping against the behaviour policy instead
would zero the gradient of every stale example whose ratio drifted past 1 +/- eps, throwing
away lagged batches rather than correcting them; AReaL's own cap masks such examples,
dropping exactly those the current policy now favours most.

Neither bounds how far the policy walks, step after step, from the versions drawing its
experience; at a lag of 4-8 versions the reranker's ratios can fall to 0.1-0.3 on whole
batches before its ranking collapses (docs/LEARNING.md). `train.behaviour_kl_coef` adds a
penalty on that distance (`mmrag.rl.losses.behaviour_kl_penalty`), zero on-policy.

The translator's DPO needs no ratio: DPO is an off-policy objective by construction. Its
minimiser pi_ref * exp(r / beta) is the same for any distribution of preference pairs that
covers the queries, and its log-ratios are taken against the fixed reference, not against
the sampling policy; a sequence-level ratio (a product over up to `max_new_tokens` token
ratios) would only add variance. What DPO does need is correct log-probs (a forced end of
turn scores nothing, `mmrag.models.lvlm`), pairs of distinct queries
(`mmrag.rl.losses.distinct_outputs`) and the right reference (`QueryTranslator`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mmrag.config import TrainConfig
from mmrag.data.dataset import Question
from mmrag.models.reranker import AdaptiveReranker, RerankBatch, candidates_of
from mmrag.models.translator import QueryTranslator
from mmrag.rl.losses import (behaviour_kl_penalty, dpo_loss, gate_loss, gate_value_gap, pairwise_preference_loss,
                             pl_policy_loss, preference_stats, ranking_draws, reference_free_dpo_loss,
                             reranker_preference_pairs, translator_preference_pairs, truncated_importance_weights)
from mmrag.rl.rollout import Node, leaves, nodes_at


@dataclass
class LocalLoss:
    """One component's local loss over a batch of scored trees, what it averages over, and what to log."""

    loss: torch.Tensor
    """Differentiable scalar: the mean over `examples` (a zero with a grad path when there are none)."""
    examples: int
    """Translator preference pairs, or reranker selections (pairs with `pairwise`), the loss averages over."""
    stats: dict[str, float] = field(default_factory=dict)
    """Per-example means worth logging beside the loss; the same keys whenever `examples` > 0, since learner ranks
    combine them key by key. Translator: `reward_margin`, `pair_accuracy` (DPO's implicit reward). Reranker:
    `importance_ratio_mean`, `importance_ratio_std` and `importance_ratio_truncated` (the fraction above the cap),
    reported whether or not the correction is on, and `behaviour_kl` (`behaviour_kl_penalty`) whatever its
    coefficient; `pairwise` adds `reward_margin` and `pair_accuracy`; a retrieval gate adds
    `gate_queries` (the fraction of examples that are the gate's) and `gate_skip_wins` (of those, where the skip
    arm was worth more)."""


def translator_pairs(roots: list[Node], cfg: TrainConfig) -> list[tuple[Question, Node, Node]]:
    """(question, chosen query node, rejected query node): the translator's training examples."""
    return [(root.payload["question"], chosen, rejected) for root in roots
            for chosen, rejected in translator_preference_pairs(root, cfg.pair_margin, cfg.max_pairs_per_question)]


def translator_loss(translator: QueryTranslator, roots: list[Node], cfg: TrainConfig,
                    policy_version: int = 0) -> LocalLoss:
    """The translator's local loss over a batch of scored trees, under the weights of `policy_version`.

    Nodes drawn by an older version (`Node.policy_version`) are off-policy experience, which DPO
    takes as it is (see the module docstring), so `policy_version` does not change the loss.
    """
    pairs = translator_pairs(roots, cfg)
    if not pairs:
        return LocalLoss(torch.zeros((), requires_grad=True), 0)
    images = [q.image for q, _, _ in pairs] * 2
    questions = [q.question for q, _, _ in pairs] * 2
    queries = [c.output for _, c, _ in pairs] + [r.output for _, _, r in pairs]
    policy = translator.logprobs(images, questions, queries)
    chosen, rejected = policy[:len(pairs)], policy[len(pairs):]
    if cfg.translator_loss == "dpo_reference_free":
        return LocalLoss(reference_free_dpo_loss(chosen, rejected, cfg.dpo_beta), len(pairs),
                         preference_stats(chosen, rejected, cfg.dpo_beta))
    reference = translator.reference_logprobs(images, questions, queries)
    ref_chosen, ref_rejected = reference[:len(pairs)], reference[len(pairs):]
    return LocalLoss(dpo_loss(chosen, rejected, ref_chosen, ref_rejected, cfg.dpo_beta), len(pairs),
                     preference_stats(chosen - ref_chosen, rejected - ref_rejected, cfg.dpo_beta))


def reranker_rows(roots: list[Node], cfg: TrainConfig) -> list[tuple[Question, Node, list, float | None]]:
    """(question, translator node, examples, gate gap) where the query's selections carry signal.

    Examples are the ranking's draws with a non-zero advantage (`pl_policy`) or preference pairs among them
    (`pairwise`); the gate gap is V(skip) - V(retrieve) with a retrieval gate (None without one, when the arms
    tie, or when no leaf earns reward: both arms failed, their gap is the documents' price alone, which says
    nothing of which arm answers).
    """
    rows = []
    for root in roots:
        for t_node in nodes_at(root, "translator"):
            if cfg.reranker_loss == "pl_policy":
                examples = [child for child in ranking_draws(t_node) if child.advantage]
            else:
                examples = reranker_preference_pairs(t_node, cfg.pair_margin)
            gap = gate_value_gap(t_node) or None
            if not any(leaf.reward for leaf in leaves(t_node)):
                gap = None
            if examples or gap is not None:
                rows.append((root.payload["question"], t_node, examples, gap))
    return rows


def behaviour_logprobs(nodes: list[Node], logprobs: torch.Tensor, policy_version: int) -> torch.Tensor:
    """log mu per node, the log-prob it was drawn with: `Node.logprob` for nodes drawn by an older version than
    `policy_version`, the current log-prob itself (detached) for the others, so that their ratio is exactly 1.

    `logprobs` are the current log-probs of the nodes' outputs, under the distribution they
    were sampled from (the reranker's logits / temperature).
    """
    behaviour = []
    for node in nodes:
        if node.policy_version != policy_version and node.logprob is None:
            raise ValueError(f"{node.level} node {node.output!r} drawn by policy version {node.policy_version} "
                             f"(learner at {policy_version}) has no behaviour log-prob (Node.logprob); "
                             "off-policy correction needs the log-prob it was sampled with")
        behaviour.append(float("nan") if node.policy_version == policy_version else node.logprob)
    on_policy = torch.tensor([node.policy_version == policy_version for node in nodes], dtype=torch.bool,
                             device=logprobs.device)
    current = logprobs.detach()
    return torch.where(on_policy, current, torch.tensor(behaviour, dtype=current.dtype, device=current.device))


def _importance(log_ratios: torch.Tensor, cfg: TrainConfig,
                correct: bool) -> tuple[torch.Tensor | None, dict[str, float]]:
    """(loss weights, or None with the correction off; the ratio statistics, logged either way)."""
    weights, ratios = truncated_importance_weights(log_ratios, cfg.importance_ratio_cap)
    if not ratios.numel():  # only the gate's queries carry signal
        return None, {"importance_ratio_mean": 1.0, "importance_ratio_std": 0.0, "importance_ratio_truncated": 0.0}
    stats = {"importance_ratio_mean": float(ratios.mean()),
             "importance_ratio_std": float(ratios.std(unbiased=False)),
             "importance_ratio_truncated": float((ratios > cfg.importance_ratio_cap).float().mean())}
    return (weights if correct else None), stats


def _with_behaviour_penalty(loss: torch.Tensor, logprobs: torch.Tensor, behaviour: torch.Tensor,
                            cfg: TrainConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """(the ranking's loss plus `train.behaviour_kl_coef` times `behaviour_kl_penalty`, {"behaviour_kl": its
    value}); the value is logged whatever the coefficient, as the ratios are."""
    penalty = behaviour_kl_penalty(logprobs, behaviour)
    if cfg.behaviour_kl_coef:
        loss = loss + cfg.behaviour_kl_coef * penalty
    return loss, {"behaviour_kl": float(penalty.detach())}


def reranker_loss(reranker: AdaptiveReranker, roots: list[Node], cfg: TrainConfig, temperature: float,
                  policy_version: int = 0, off_policy_correction: bool = True) -> LocalLoss:
    """The reranker's local loss over a batch of scored trees, under the weights of `policy_version`.

    Nodes drawn by an older version (`Node.policy_version`) are off-policy experience: with
    `off_policy_correction` (`experimental.off_policy_correction`) each is weighted by its truncated importance
    ratio. With a retrieval gate the loss averages the ranking's examples and the gate's queries (`gate_loss`)
    together; the gate's takes no ratio, since both of its arms are evaluated on every query whatever the gate's
    probabilities were.
    """
    rows = reranker_rows(roots, cfg)
    if not rows:
        return LocalLoss(torch.zeros((), requires_grad=True), 0)
    batch = reranker.featurize([q.image for q, *_ in rows], [q.question for q, *_ in rows],
                               [t_node.output for _, t_node, *_ in rows],
                               candidates_of([t_node.payload["hits"] for _, t_node, *_ in rows]))
    logits, gate_logits = reranker.policy(batch)
    ranking = _ranking_loss(reranker, batch, logits, [examples for _, _, examples, _ in rows], cfg, temperature,
                            policy_version, off_policy_correction)
    if gate_logits is None:
        return ranking
    gated = [(row, gap) for row, (*_, gap) in enumerate(rows) if gap is not None]
    skip_logits = gate_logits[[row for row, _ in gated]]
    gate = gate_loss(skip_logits, torch.tensor([gap for _, gap in gated], device=skip_logits.device),
                     cfg.gate_gap_unit)
    examples = ranking.examples + len(gated)
    loss = (ranking.loss * ranking.examples + gate * len(gated)) / examples
    skips = sum(gap > 0 for _, gap in gated)
    return LocalLoss(loss, examples, {**ranking.stats, "gate_queries": len(gated) / examples,
                                      "gate_skip_wins": skips / len(gated) if gated else 0.0})


def _ranking_loss(reranker: AdaptiveReranker, batch: RerankBatch, logits: torch.Tensor, examples: list[list],
                  cfg: TrainConfig, temperature: float, policy_version: int, off_policy_correction: bool) -> LocalLoss:
    """The ranking's loss over each row's examples (`reranker_rows`), from the batch's policy `logits`; its
    importance statistics are 1 and 0 when there are none, so that the stats keep their keys."""
    if cfg.reranker_loss == "pl_policy":
        flat = [(row, node) for row, nodes in enumerate(examples) for node in nodes]
        nodes = [node for _, node in flat]
        logprobs = reranker.logprob(batch, [node.output for node in nodes], [row for row, _ in flat], temperature,
                                    logits)
        behaviour = behaviour_logprobs(nodes, logprobs, policy_version)
        weights, stats = _importance(logprobs.detach() - behaviour, cfg, off_policy_correction)
        advantages = torch.tensor([node.advantage for node in nodes], dtype=logprobs.dtype, device=logprobs.device)
        loss, penalty = _with_behaviour_penalty(pl_policy_loss(logprobs, advantages, weights), logprobs, behaviour,
                                                cfg)
        return LocalLoss(loss, len(flat), {**stats, **penalty})
    flat = [(row, pair) for row, pairs in enumerate(examples) for pair in pairs]
    nodes = [c for _, (c, _) in flat] + [r for _, (_, r) in flat]
    logprobs = reranker.logprob(batch, [node.output for node in nodes], [row for row, _ in flat] * 2, temperature,
                                logits)
    chosen, rejected = logprobs[:len(flat)], logprobs[len(flat):]
    behaviour = behaviour_logprobs(nodes, logprobs, policy_version)
    log_ratios = logprobs.detach() - behaviour
    weights, stats = _importance(log_ratios[:len(flat)] + log_ratios[len(flat):], cfg, off_policy_correction)
    loss, penalty = _with_behaviour_penalty(pairwise_preference_loss(chosen, rejected, cfg.dpo_beta, weights),
                                            logprobs, behaviour, cfg)
    return LocalLoss(loss, len(flat), {**stats, **penalty, **preference_stats(chosen, rejected, cfg.dpo_beta)})


def example_count(component: str, roots: list[Node], cfg: TrainConfig) -> int:
    """How many examples (translator pairs, reranker selections or pairs) the component's loss averages over."""
    if component == "translator":
        return len(translator_pairs(roots, cfg))
    if component == "reranker":
        return sum(len(examples) + (gap is not None) for _, _, examples, gap in reranker_rows(roots, cfg))
    raise ValueError(f"example_count: component {component!r}: expected 'translator' or 'reranker'")
