"""The weight-sync probe: one fixed batch that the learner and a policy replica both score with a published version,
so that the replica knows the weights it installed compute what the learner's compute.

The driver draws the batch once at the start of a run (`build_sync_probe`): a few train questions in the run's
seeded order, one query the translator samples for each (seeded) and the documents retrieval returns for it. The
learner's rank 0 scores it with every `learner.sync_check_every`-th version it publishes, a replica with the version
once installed (`mmrag.actors.policy.check_installed`): the translator's sequence log-probabilities of the fixed
queries (`translator_probe_scores`), the reranker's Plackett-Luce logits of the fixed candidates
(`reranker_probe_scores`). The check's figure is the largest absolute difference (`largest_score_difference`), as
NeMo-RL compares replica and learner log-probabilities after a refit.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from mmrag.data.dataset import Question
from mmrag.retrieval.hit import Hit
from mmrag.training.stages import QuestionTable, Stages

if TYPE_CHECKING:
    from mmrag.models.reranker import AdaptiveReranker
    from mmrag.models.translator import QueryTranslator

PROBE_QUESTIONS = 4
"""Questions in the probe batch: enough that every trainable tensor shapes some score, few enough to cost little."""


@dataclass(frozen=True)
class SyncProbe:
    """The fixed inputs both sides score: questions, one sampled query each, that query's retrieved documents."""

    table: QuestionTable
    queries: list[str]
    hits: list[list[Hit]]


def build_sync_probe(stages: Stages, questions: list[Question], seed: int) -> SyncProbe:
    """Draw the probe batch from `questions` (the train split) with `seed`, sampling and retrieving on `stages`."""
    if not questions:
        raise ValueError("the weight-sync probe needs at least one train question (learner.sync_check_every: 0 "
                         "turns the check off)")
    chosen = random.Random(seed).sample(range(len(questions)), min(PROBE_QUESTIONS, len(questions)))
    table = QuestionTable.of([questions[i] for i in chosen])
    queries = [samples[0].text for samples in stages.translate(table, 1, seed).queries]
    return SyncProbe(table, queries, stages.retrieve(queries))


@contextlib.contextmanager
def _evaluating(module: torch.nn.Module) -> Iterator[None]:
    """`module` in eval mode (no dropout: the same weights give the same scores), its mode restored after."""
    training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(training)


@torch.no_grad()
def translator_probe_scores(translator: QueryTranslator, probe: SyncProbe) -> torch.Tensor:
    """[questions] the translator's sequence log-probability of each fixed query, on the CPU."""
    table = probe.table
    with _evaluating(translator.model):
        return translator.policy_logprobs(table.images, table.questions, probe.queries).float().cpu()


@torch.no_grad()
def reranker_probe_scores(reranker: AdaptiveReranker, probe: SyncProbe) -> torch.Tensor:
    """[questions, documents + 1] the reranker's Plackett-Luce logits of the fixed candidates (STOP last; -inf at
    padding), on the CPU."""
    table, rows = probe.table, list(range(len(probe.table)))
    with _evaluating(reranker):
        return reranker.hit_logits(table.images_of(rows), table.questions, probe.queries, probe.hits).float().cpu()


def probe_scores(translator: QueryTranslator, reranker: AdaptiveReranker, probe: SyncProbe) -> dict:
    """Component -> its scores of the probe batch, as the learner publishes them (`Weights.probe_scores`)."""
    return {"translator": translator_probe_scores(translator, probe),
            "reranker": reranker_probe_scores(reranker, probe)}


def largest_score_difference(expected: torch.Tensor, scored: torch.Tensor) -> float:
    """The largest absolute difference of two scorings of the probe; inf if their shapes or their -inf (padding)
    entries differ, or a score is NaN."""
    if expected.shape != scored.shape or not torch.equal(torch.isneginf(expected), torch.isneginf(scored)):
        return float("inf")
    finite = ~torch.isneginf(expected)
    if not finite.any():
        return 0.0
    gap = (expected[finite].double() - scored[finite].double()).abs().max()
    return float("inf") if gap.isnan() else float(gap)
