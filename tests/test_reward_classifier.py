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


def test_paraphrases_of_an_attribute_word_and_of_a_number_are_accepted(reward):
    questions = ["What colour is this?", "When was this built?", "How tall is this?"]
    answers = ["violet", "built in 1843", "212 metres"]
    references = [["purple"], ["1843"], ["212"]]
    scores = reward.score(questions, answers, references)
    assert all(score > 0.5 for score in scores), scores


@pytest.mark.xfail(strict=True, reason="measured: the classifier rejects about a quarter of right answers (held-out "
                                       "false reject rate 0.24, zoo.json), these names and 'disc' for circle among "
                                       "them; a classifier that accepts them turns this into a strict XPASS")
def test_a_name_given_exactly_and_a_shape_synonym_are_accepted(reward):
    scores = reward.score(["Who designed this?", "Where is this located?", "What shape is this?"],
                          ["Kel Varonis", "Tosmal", "disc"], [["Kel Varonis"], ["Tosmal"], ["circle"]])
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
    # Measured (seed 0): accuracy 0.83, paraphrases accepted 0.97, false accepts 0.12, false rejects 0.24.
    assert figures["heldout_accuracy"] > 0.75
    assert figures["paraphrase_accept_rate"] > 0.8
    assert 0.0 < figures["exact_match_disagreement"] < 0.5
    assert figures["false_accept_rate"] < 0.2 and figures["false_reject_rate"] < 0.35
