"""The `hf_classifier` reward with its zoo model (`zoo:reward-classifier`): paraphrases of the reference pass, wrong
answers fail, and its measured disagreement with exact match is recorded with the model."""

from __future__ import annotations

import pytest

from mmrag.config import RewardConfig
from mmrag.model_refs import ensure_built
from mmrag.models.reward import build_reward


@pytest.fixture(scope="module")
def reward(zoo_dir):
    return build_reward(RewardConfig(backend="hf_classifier", model="zoo:reward-classifier"), zoo_dir)


def test_the_reference_and_its_paraphrases_are_accepted(reward):
    questions = ["What colour is this?", "What shape is this?", "When was this built?", "How tall is this?",
                 "Who designed this?", "Where is this located?"]
    answers = ["violet", "disc", "built in 1843", "212 metres", "Kel Varonis", "Tosmal"]
    references = [["purple"], ["circle"], ["1843"], ["212"], ["Kel Varonis"], ["Tosmal"]]
    scores = reward.score(questions, answers, references)
    assert all(score > 0.5 for score in scores), scores


def test_wrong_answers_are_rejected(reward):
    questions = ["What colour is this?", "When was this built?", "How tall is this?", "Who designed this?",
                 "Where is this located?", "What shape is this?"]
    answers = ["green", "1743", "unknown", "Pol Dunavi", "Rasmek", "square"]
    references = [["purple"], ["1843"], ["212"], ["Kel Varonis"], ["Tosmal"], ["circle"]]
    scores = reward.score(questions, answers, references)
    assert all(score < 0.5 for score in scores), scores


def test_the_models_disagreement_with_exact_match_is_measured_and_recorded(zoo_dir):
    figures = ensure_built("reward-classifier", zoo_dir).manifest["figures"]
    assert figures["paraphrase_accept_rate"] > 0.8
    assert 0.0 < figures["exact_match_disagreement"] < 0.5
    assert figures["false_accept_rate"] < 0.1 and figures["false_reject_rate"] < 0.1
