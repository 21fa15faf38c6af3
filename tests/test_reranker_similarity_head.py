"""The similarity head on hand-built features: its inputs, its zero start, a hand-set ordering and STOP, and that
what it learns of one set of entities carries over to unseen ones."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mmrag.data.wording import ATTRIBUTES
from mmrag.models.reranker_head import (CandidateFeatures, CrossAttentionScoringHead, MlpScoringHead, StopScorer,
                                        stop_anchor)
from mmrag.models.similarity_head import (FEATURE_NAMES, RANK_BINS, SIMILARITY_SCALE, SimilarityScoringHead,
                                          redundancy, relational_features)
from mmrag.training.component_level import gold_classifier_loss

DIM = 8
TEMPERATURE = 0.05


def unit(*coordinates: float) -> torch.Tensor:
    vector = torch.tensor(coordinates + (0.0,) * (DIM - len(coordinates)))
    return vector / vector.norm()


def features_of(question_image, question, query, doc_text, doc_image, scores, seen) -> CandidateFeatures:
    """One row (B = 1) of hand-built vectors."""
    return CandidateFeatures(torch.stack([question_image, question, query]).unsqueeze(0),
                             torch.stack(doc_text).unsqueeze(0), torch.stack(doc_image).unsqueeze(0),
                             torch.tensor([scores]), torch.ones(1, len(scores), dtype=torch.bool), seen.unsqueeze(0),
                             torch.zeros(1, len(scores), len(ATTRIBUTES)))


def column(name: str) -> int:
    return FEATURE_NAMES.index(name)


ZERO = torch.zeros(DIM)
ROW = features_of(unit(1), unit(0, 1), unit(1, 1), [unit(1), unit(1), unit(0, 1)], [unit(1), ZERO, ZERO],
                  [0.5, 0.4, 0.2], seen=unit(0, 0, 1))
"""Three candidates: a pictured passage matching the question image, its text-only twin, and an unrelated one;
what the visual reader sees is stated by none of them."""


def test_relational_inputs_are_the_hand_computed_similarities_gaps_ranks_and_redundancy():
    inputs = relational_features(ROW)[0]
    scale = SIMILARITY_SCALE
    assert inputs[:, column("question_image~text")].tolist() == pytest.approx([scale, scale, 0.0])
    assert inputs[:, column("question_image~image")].tolist() == pytest.approx([scale, 0.0, 0.0])
    assert inputs[:, column("query~text")].tolist() == pytest.approx([scale / math.sqrt(2)] * 3)
    assert inputs[:, column("seen~text")].tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert inputs[:, column("question~text-best")].tolist() == pytest.approx([-scale, -scale, 0.0])
    assert inputs[:, column("has_image")].tolist() == [1.0, 0.0, 0.0]
    assert inputs[:, column("score-top")].tolist() == pytest.approx([0.0, -1.0, -3.0])
    assert inputs[:, column("rank0"):column("rank0") + RANK_BINS].argmax(dim=1).tolist() == [0, 1, 2]
    # The twin repeats the first candidate's text; the third resembles neither.
    assert inputs[:, column("redundancy_text")].tolist() == pytest.approx([0.0, scale, 0.0])


def test_redundancy_ignores_padding_and_lower_ranked_candidates():
    vectors = torch.stack([unit(1), unit(0, 1), unit(0, 1), unit(1)]).unsqueeze(0)
    mask = torch.tensor([[True, True, True, False]])
    assert redundancy(vectors, mask)[0, :3].tolist() == pytest.approx([0.0, 0.0, 1.0])


@pytest.mark.parametrize("head_class", [SimilarityScoringHead, MlpScoringHead, CrossAttentionScoringHead])
def test_every_untrained_head_scores_zero_and_its_stop_sits_at_the_anchor(head_class):
    torch.manual_seed(0)
    head = head_class(DIM, 16)
    stop = StopScorer(head.stop_input_dim, head.stop_hidden_dim)
    generator = torch.Generator().manual_seed(1)
    batch = CandidateFeatures(F.normalize(torch.randn(4, 3, DIM, generator=generator), dim=-1),
                              F.normalize(torch.randn(4, 5, DIM, generator=generator), dim=-1),
                              torch.zeros(4, 5, DIM), torch.rand(4, 5, generator=generator),
                              torch.ones(4, 5, dtype=torch.bool),
                              F.normalize(torch.randn(4, DIM, generator=generator), dim=-1),
                              torch.rand(4, 5, len(ATTRIBUTES), generator=generator))
    correction = head(batch)
    assert correction.abs().max().item() == 0.0
    logits = batch.retrieval_scores / TEMPERATURE + correction
    assert torch.equal(stop(head.stop_inputs(batch), logits, batch.mask), stop_anchor(logits, batch.mask))


def set_by_hand(head: SimilarityScoringHead, feature: str, weight: float) -> None:
    """Score = weight * (feature + 10): unit 0 of both hidden layers carries the feature shifted to where GELU is
    the identity (to 1e-20), everything else is zero."""
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.zero_()
        head.mlp[0].weight[0, column(feature)] = 1.0
        head.mlp[0].bias[0] = 10.0
        head.mlp[2].weight[0, 0] = 1.0
        head.mlp[4].weight[0, 0] = weight


def test_a_head_set_to_the_question_image_match_ranks_by_it_over_retrieval_order():
    head = SimilarityScoringHead(DIM, 16)
    set_by_hand(head, "question_image~image", 1.0)
    # Logits 0.5/0.05 + (10 + 10) = 30, 0.4/0.05 + 10 = 18, 0.2/0.05 + 10 = 14: unchanged order at weight 1;
    # the pictured passage leads by 12. At weight -1 it falls to 10 - 20 = -10, below both others (-2, -6).
    logits = ROW.retrieval_scores / TEMPERATURE + head(ROW)
    assert logits[0].tolist() == pytest.approx([30.0, 18.0, 14.0], abs=1e-4)
    set_by_hand(head, "question_image~image", -1.0)
    logits = ROW.retrieval_scores / TEMPERATURE + head(ROW)
    assert logits[0].argsort(descending=True).tolist() == [1, 2, 0]


def test_a_stop_scorer_set_by_hand_keeps_nothing_for_one_question_kind_and_two_for_another():
    stop = StopScorer(DIM, 4)
    with torch.no_grad():
        for parameter in stop.parameters():
            parameter.zero_()
        stop.hidden[0].weight[0, 0] = 10.0  # unit 0 = GELU(10 * the question's first coordinate)
        stop.linear.weight[0, 0] = 10.0
    visual, fact = unit(1), unit(0, 1)
    logits = torch.tensor([[10.0, 8.0, 6.0, 4.0], [10.0, 8.0, 6.0, 4.0]])
    mask = torch.ones(2, 4, dtype=torch.bool)
    offsets = stop(torch.stack([visual, fact]), logits, mask) - stop_anchor(logits, mask)
    # GELU(10) = 10 to 1e-20, GELU(0) = 0: STOP at 7 + 100 beats every candidate; at 7 it keeps 10 and 8.
    assert offsets.tolist() == pytest.approx([100.0, 0.0], abs=1e-4)
    stop_logits = stop(torch.stack([visual, fact]), logits, mask)
    assert [int((logits[row] > stop_logits[row]).sum()) for row in range(2)] == [0, 2]


def entity_world(entities: torch.Tensor, relations: torch.Tensor, rows: int, seed: int) -> tuple:
    """Rows of 6 candidates (the pictured entity's 3 relation passages and a look-alike's), shuffled, with
    retrieval scores that ignore which is gold; gold = the pictured entity's passage of the asked relation."""
    generator = torch.Generator().manual_seed(seed)
    pictured = torch.randint(len(entities), (rows,), generator=generator)
    asked = torch.randint(len(relations), (rows,), generator=generator)
    look_alike = F.normalize(entities[pictured] + 0.6 * torch.randn(rows, DIM, generator=generator), dim=-1)
    owners = torch.stack([entities[pictured], look_alike], dim=1)  # [B, 2, D]
    doc_text = F.normalize(owners.unsqueeze(2) + relations.view(1, 1, -1, DIM), dim=-1).flatten(1, 2)  # [B, 6, D]
    gold = torch.zeros(rows, 6, dtype=torch.bool)
    gold[torch.arange(rows), asked] = True
    order = torch.rand(rows, 6, generator=generator).argsort(dim=1)
    doc_text, gold = doc_text.gather(1, order.unsqueeze(-1).expand(-1, -1, DIM)), gold.gather(1, order)
    image = F.normalize(entities[pictured] + 0.1 * torch.randn(rows, DIM, generator=generator), dim=-1)
    query = torch.stack([image, relations[asked], image], dim=1)
    scores = 0.3 + 0.01 * torch.rand(rows, 6, generator=generator)
    return CandidateFeatures(query, doc_text, torch.zeros_like(doc_text), scores,
                             torch.ones(rows, 6, dtype=torch.bool), torch.zeros(rows, DIM),
                             torch.zeros(rows, 6, len(ATTRIBUTES))), gold


def test_what_the_head_learns_from_gold_labels_carries_over_to_unseen_entities():
    torch.manual_seed(0)
    relations = F.normalize(torch.randn(3, DIM), dim=-1)
    seen, unseen = (F.normalize(torch.randn(40, DIM), dim=-1) for _ in range(2))
    train, train_gold = entity_world(seen, relations, 256, seed=1)
    test, test_gold = entity_world(unseen, relations, 256, seed=2)
    head = SimilarityScoringHead(DIM, 32)
    optimizer = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(150):
        optimizer.zero_grad()
        gold_classifier_loss(train.retrieval_scores / TEMPERATURE + head(train), train.mask, train_gold).backward()
        optimizer.step()
    with torch.no_grad():
        top1 = test_gold[torch.arange(256), head(test).argmax(dim=1)].float().mean().item()
    assert top1 > 0.9  # retrieval order is at chance: 1 in 6
