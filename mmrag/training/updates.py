"""Local updates: turn scored rollout trees into one optimiser step per trainable component.

Translator: DPO (or reference-free DPO) on preference pairs among the N sampled queries
of each question. Reranker: the listwise Plackett-Luce policy loss weighted by each
selection's advantage among its M siblings, or the pairwise preference variant. Both
recompute log-probs under the current weights, so the same functions serve the
single-process reference trainer and the distributed learners.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mmrag.config import TrainConfig
from mmrag.data.dataset import Question
from mmrag.models.reranker import AdaptiveReranker, candidates_of
from mmrag.models.translator import QueryTranslator
from mmrag.rl.losses import (dpo_loss, pairwise_preference_loss, pl_policy_loss, reference_free_dpo_loss,
                             reranker_preference_pairs, translator_preference_pairs)
from mmrag.rl.rollout import Node, nodes_at


@dataclass
class LocalLoss:
    """One component's local loss over a batch of scored trees, what it averages over, and what to log."""

    loss: torch.Tensor
    """Differentiable scalar: the mean over `examples` (a zero with a grad path when there are none)."""
    examples: int
    """Translator preference pairs, or reranker selections (pairs with `pairwise`), the loss averages over."""
    stats: dict[str, float] = field(default_factory=dict)
    """Per-example means worth logging beside the loss (e.g. DPO reward margin and pair accuracy); the same keys
    whenever `examples` > 0, since learner ranks combine them key by key."""


def _step(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def translator_pairs(roots: list[Node], cfg: TrainConfig) -> list[tuple[Question, Node, Node]]:
    """(question, chosen query node, rejected query node): the translator's training examples."""
    return [(root.payload["question"], chosen, rejected) for root in roots
            for chosen, rejected in translator_preference_pairs(root, cfg.pair_margin, cfg.max_pairs_per_question)]


def translator_loss(translator: QueryTranslator, roots: list[Node], cfg: TrainConfig,
                    policy_version: int = 0) -> LocalLoss:
    """The translator's local loss over a batch of scored trees, under the weights of `policy_version`.

    Nodes drawn by an older version (`Node.policy_version`) are off-policy experience.
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
        return LocalLoss(reference_free_dpo_loss(chosen, rejected, cfg.dpo_beta), len(pairs))
    reference = translator.reference_logprobs(images, questions, queries)
    loss = dpo_loss(chosen, rejected, reference[:len(pairs)], reference[len(pairs):], cfg.dpo_beta)
    return LocalLoss(loss, len(pairs))


def reranker_rows(roots: list[Node], cfg: TrainConfig) -> list[tuple[Question, Node, list]]:
    """(question, translator node, examples) where the node's reranker children carry signal.

    Examples are the children with a non-zero advantage (`pl_policy`) or preference pairs
    among them (`pairwise`).
    """
    rows = []
    for root in roots:
        for t_node in nodes_at(root, "translator"):
            if cfg.reranker_loss == "pl_policy":
                examples = [child for child in t_node.children if child.advantage]
            else:
                examples = reranker_preference_pairs(t_node, cfg.pair_margin)
            if examples:
                rows.append((root.payload["question"], t_node, examples))
    return rows


def reranker_loss(reranker: AdaptiveReranker, roots: list[Node], cfg: TrainConfig, temperature: float,
                  policy_version: int = 0) -> LocalLoss:
    """The reranker's local loss over a batch of scored trees, under the weights of `policy_version`.

    Nodes drawn by an older version (`Node.policy_version`) are off-policy experience.
    """
    rows = reranker_rows(roots, cfg)
    if not rows:
        return LocalLoss(torch.zeros((), requires_grad=True), 0)
    batch = reranker.featurize([q.image for q, _, _ in rows], [q.question for q, _, _ in rows],
                               [t_node.output for _, t_node, _ in rows],
                               candidates_of([t_node.payload["hits"] for _, t_node, _ in rows]))
    if cfg.reranker_loss == "pl_policy":
        flat = [(row, node) for row, (_, _, examples) in enumerate(rows) for node in examples]
        logprobs = reranker.logprob(batch, [node.output for _, node in flat], [row for row, _ in flat], temperature)
        advantages = torch.tensor([node.advantage for _, node in flat], dtype=logprobs.dtype, device=logprobs.device)
        return LocalLoss(pl_policy_loss(logprobs, advantages), len(flat))
    flat = [(row, pair) for row, (_, _, pairs) in enumerate(rows) for pair in pairs]
    selections = [c.output for _, (c, _) in flat] + [r.output for _, (_, r) in flat]
    logprobs = reranker.logprob(batch, selections, [row for row, _ in flat] * 2, temperature)
    return LocalLoss(pairwise_preference_loss(logprobs[:len(flat)], logprobs[len(flat):], cfg.dpo_beta), len(flat))


def example_count(component: str, roots: list[Node], cfg: TrainConfig) -> int:
    """How many examples (translator pairs, reranker selections or pairs) the component's loss averages over."""
    if component == "translator":
        return len(translator_pairs(roots, cfg))
    if component == "reranker":
        return sum(len(examples) for _, _, examples in reranker_rows(roots, cfg))
    raise ValueError(f"example_count: component {component!r}: expected 'translator' or 'reranker'")


def _update(optimizer: torch.optim.Optimizer, local: LocalLoss) -> dict:
    """One optimiser step on a local loss (none without examples, as a batch without signal asks); its record."""
    if local.examples:
        _step(optimizer, local.loss)
    return {"loss": float(local.loss.detach()), "examples": local.examples, **local.stats}


def update_translator(translator, optimizer, roots, cfg: TrainConfig) -> dict:
    return _update(optimizer, translator_loss(translator, roots, cfg))


def update_reranker(reranker, optimizer, roots, cfg: TrainConfig, temperature: float) -> dict:
    return _update(optimizer, reranker_loss(reranker, roots, cfg, temperature))
