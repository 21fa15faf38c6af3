"""The bag-of-words question-kind classifier fitted on train questions."""

from __future__ import annotations

import pytest

from mmrag.data.dataset import Question
from mmrag.evaluation.kind_classifier import KindClassifier


def question(text: str, kind: str) -> Question:
    return Question(f"q-{text}", None, text, ["x"], kind=kind)


TRAIN = [question("What colour is this?", "visual"), question("What is the backdrop colour?", "visual"),
         question("When was this built?", "one-fact"), question("Who designed this?", "one-fact"),
         question("When was this built and who designed it?", "two-fact"),
         question("Where is this and when was it built?", "two-fact")]


def test_questions_worded_as_a_kinds_training_questions_get_that_kind():
    classifier = KindClassifier(TRAIN)
    assert classifier.predict(["What colour is the backdrop?", "Who designed this building?",
                               "Who designed this and when was it built?"]) == ["visual", "one-fact", "two-fact"]


def test_fitting_needs_questions_with_kinds():
    with pytest.raises(ValueError, match="no training question"):
        KindClassifier([])
