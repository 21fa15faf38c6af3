"""The behaviour log-prob a rollout stores is the learner's log-prob of the same selection under the same weights.

The off-policy correction's ratio pi_now / mu is only a measure of policy change if mu (stored on the
node when the selection is sampled, `AdaptiveReranker.sample`) and pi_now (recomputed by the learner,
`mmrag.training.updates.reranker_loss`) agree when the weights have not moved. The two see different
batches: the rollout's micro-batch holds every row, the learner's only the rows with a non-zero
advantage, padded to their own longest candidate list. A mismatch would show as ratio spread at any lag.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from mmrag.config import RerankerConfig, TrainConfig
from mmrag.data.dataset import Question
from mmrag.models.reranker import AdaptiveReranker, candidates_of
from mmrag.retrieval.hit import Hit
from mmrag.rl.rollout import Node, backprop_values, compute_advantages
from mmrag.training.updates import reranker_loss

QUESTIONS = [Question("q0", Image.new("RGB", (64, 64), (200, 30, 30)), "When was this built?", ["1901"]),
             Question("q1", Image.new("RGB", (64, 64), (30, 30, 200)), "Who designed this?", ["Ada Lind"])]
QUERIES = ["red striped circle year built", "blue square architect"]
HITS = [[Hit(f"d{i}", "", text, None, f"e{i}", score, i) for i, (text, score) in enumerate(
            [("red striped circle was built in 1901", 0.30), ("blue square was built in 1850", 0.25),
             ("green triangle is 45 metres tall", 0.20), ("red square was built in 1777", 0.18)])],
        [Hit("d9", "", "blue square was designed by Ada Lind", None, "e9", 0.22, 0)]]
TEMPERATURE = 0.7
M = 6


@pytest.fixture(scope="module")
def trained_reranker(zoo_dir) -> AdaptiveReranker:
    """The default head with every trainable weight moved off its (partly zero) initial value; no visual reader,
    whose sight prior through the random tiny CLIP would make one selection of the test's rows near-certain."""
    torch.manual_seed(0)
    cfg = RerankerConfig(backbone_pretrained="zoo:tiny-clip-init", visual_reader="", gate=False)
    reranker = AdaptiveReranker.from_config(cfg, zoo_dir)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in reranker.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3)
    return reranker


def test_a_stale_selection_of_unchanged_weights_has_importance_ratio_one(trained_reranker):
    batch = trained_reranker.featurize([q.image for q in QUESTIONS], [q.question for q in QUESTIONS], QUERIES,
                                       candidates_of(HITS))
    selections, logprobs = trained_reranker.sample(batch, M, TEMPERATURE, torch.Generator().manual_seed(2))
    assert len(set(selections[0])) > 1, "the test needs distinct selections of the 4-candidate row"
    # Only the 4-candidate row gets rewards that differ, so the learner's batch is that row alone.
    roots = []
    for row, question in enumerate(QUESTIONS):
        root = Node("root", output=question.id, policy_version=3, payload={"question": question})
        query = root.add(Node("translator", output=QUERIES[row], policy_version=3, payload={"hits": HITS[row]}))
        for selection, logprob in zip(selections[row], logprobs[row]):
            reward = float(selection == selections[0][0]) if row == 0 else 1.0
            query.add(Node("reranker", output=selection, logprob=logprob, policy_version=3, reward=reward))
        backprop_values(root)
        compute_advantages(root)
        roots.append(root)
    assert any(child.advantage for child in roots[0].children[0].children)
    local = reranker_loss(trained_reranker, roots, TrainConfig(), TEMPERATURE, policy_version=5)
    assert local.examples > 0
    assert local.stats["importance_ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert local.stats["importance_ratio_std"] == pytest.approx(0.0, abs=1e-5)
    assert local.stats["importance_ratio_truncated"] == 0.0
