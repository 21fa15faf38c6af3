"""OK-VQA's official score: VQA accuracy exactly as the VQA evaluation code (`vqaEval.py`) computes it.

Rules of the official code, kept here with their quirks:

* The prediction is normalised: newlines and tabs become spaces; `vqa_punctuation`;
  lower case, number words to digits ("two" -> "2"), articles dropped, contractions
  restored ("dont" -> "don't") by `vqa_words`.
* The ten annotator answers are compared as they are when all ten are identical;
  otherwise each gets `vqa_punctuation` only (no lower-casing, no number words).
* Accuracy: for each annotator, leave its answer record out and take
  min(1, matches among the others / 3); the score is the mean over the ten. A record is
  left out together with every record equal to it (the official code compares whole
  records), which matters only when two records are identical.
* Aggregates: mean x 100 rounded to 2 decimals, overall and per question type and
  answer type.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmrag.metrics.answers import ARTICLES, NUMBER_WORDS
from mmrag.metrics.contractions import CONTRACTIONS
from mmrag.metrics.scoring import Prediction, ScoringError, percent

PUNCTUATION = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?",
               "!")
"""The marks the official code removes; every other character (`$ % & : ' . *`, ...) is kept, periods aside."""
MATCHES_FOR_FULL_CREDIT = 3

_DIGIT_COMMA_DIGIT = re.compile(r"\d,\d")
# The official pattern is "(?!<=\d)(\.)(?!\d)": its first group is a look-ahead for the text
# "<=" followed by a digit, never a look-behind, so in effect every period not followed by a
# digit goes ("u.s.a." -> "usa", "3.5" stays).
_PERIOD = re.compile(r"\.(?!\d)")
# The official call passes re.UNICODE (= 32) where re.sub takes its count: at most 32 periods go.
_PERIODS_REMOVED_AT_MOST = 32


def vqa_punctuation(text: str) -> str:
    """The official `processPunctuation`.

    Each mark of PUNCTUATION is deleted when the text has it next to a space ("a , b") or
    holds a digit-comma-digit anywhere ("1,000"), and otherwise becomes a space
    ("red-striped" -> "red striped"); the conditions are tested on the original text.
    Then periods not followed by a digit are deleted.
    """
    delete_everywhere = _DIGIT_COMMA_DIGIT.search(text) is not None
    out = text
    for mark in PUNCTUATION:
        if delete_everywhere or mark + " " in text or " " + mark in text:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return _PERIOD.sub("", out, count=_PERIODS_REMOVED_AT_MOST)


def vqa_words(text: str) -> str:
    """The official `processDigitArticle`: lower-case words, number words to digits, articles dropped,
    contractions restored; joined by single spaces."""
    words = [NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in ARTICLES)


def normalize_prediction(prediction: str) -> str:
    return vqa_words(vqa_punctuation(prediction.replace("\n", " ").replace("\t", " ").strip()))


def vqa_accuracy(prediction: str, answers: Sequence[str], annotators: Sequence[str] | None = None) -> float:
    """Official VQA accuracy of one prediction against the annotator answers.

    `annotators[i]` is what else the i-th answer record holds (its id, confidence, ...):
    records equal in answer and annotator are left out together. Default: all distinct.
    """
    if not answers:
        raise ScoringError("VQA accuracy: no annotator answers")
    annotators = list(annotators) if annotators is not None else [str(i) for i in range(len(answers))]
    if len(annotators) != len(answers):
        raise ScoringError(f"VQA accuracy: {len(answers)} answers but {len(annotators)} annotator records")
    predicted = normalize_prediction(prediction)
    compared = list(answers) if len(set(answers)) == 1 else [vqa_punctuation(answer) for answer in answers]
    records = list(zip(compared, annotators))
    per_left_out = []
    for left_out in records:
        matches = sum(answer == predicted for answer, annotator in records if (answer, annotator) != left_out)
        per_left_out.append(min(1.0, matches / MATCHES_FOR_FULL_CREDIT))
    return sum(per_left_out) / len(per_left_out)


@dataclass(frozen=True)
class OkvqaReference:
    """What the official code reads of one question: its annotator answers and its two type labels."""

    question_id: str
    answers: list[str]
    annotators: list[str]
    """The rest of each answer record (JSON), which decides which records count as the same."""
    question_type: str
    answer_type: str


class OkvqaBenchmark:
    name = "okvqa"
    title = "OK-VQA: VQA accuracy (official vqaEval.py rules), %"
    reference_type = OkvqaReference
    prediction_fields = ("prediction",)

    def score(self, reference: OkvqaReference, prediction: Prediction) -> dict[str, Any]:
        return {"score": vqa_accuracy(prediction.text(), reference.answers, reference.annotators)}

    def aggregate(self, scored: list[tuple[OkvqaReference, dict[str, Any]]]) -> dict[str, float]:
        aggregates = {"overall": percent(row["score"] for _, row in scored)}
        for label in ("answer_type", "question_type"):
            groups: dict[str, list[float]] = {}
            for reference, row in scored:
                groups.setdefault(getattr(reference, label), []).append(row["score"])
            aggregates.update({f"{label}/{key}": percent(values) for key, values in sorted(groups.items())})
        return aggregates
