"""Encyclopedic-VQA's official score, exact-match stage: as E-VQA's `evaluation_utils.py` computes it.

The official score of one (question, image) example is the best over the reference
answers (the `answer` column split at "|"): 1 when the candidate matches the reference
exactly, else BEM (a BERT answer-equivalence model) thresholded at 0.5. BEM needs a model
that is not available offline, so without a `BemScorer` this module computes the
**exact-match stage only**: a lower bound of the official score, labelled as such.

Exact match, with the official quirks:

* `evqa_normalize`: lower case; newlines and tabs to spaces; a leading "<extra_id_0> "
  removed; punctuation (with ‘ ’ ´ ` _) *deleted*; "the answer is", a, an, the removed;
  number words to digits and true / entailment -> yes, false / contradiction -> no;
  contractions restored; whitespace collapsed.
* `multi_answer` questions: the reference "a&&b" is a list; the candidate is split at
  commas, " and " and " & " (case-sensitive, before lower-casing); the example is right
  when the two lists, as sets, have intersection over union >= 0.5.
* Accuracy is the mean over all examples (x 100 here), overall and per question type.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from typing import Any, Protocol

from mmrag.metrics.answers import NUMBER_WORDS
from mmrag.metrics.contractions import CONTRACTIONS
from mmrag.metrics.scoring import Prediction, ScoringError, percent

QUESTION_TYPES = ("templated", "automatic", "multi_answer", "2_hop")
MULTI_ANSWER = "multi_answer"
ALTERNATIVE_SEPARATOR = "|"
PART_SEPARATOR = "&&"
LIST_IOU_THRESHOLD = 0.5
WORD_MAP = {**NUMBER_WORDS, "entailment": "yes", "true": "yes", "contradiction": "no", "false": "no"}

_PUNCTUATION = set(string.punctuation + "‘’´`_")
_PREFIXES_AND_ARTICLES = re.compile(r"\b(the answer is|a|an|the)\b")
_SPAN_PREFIX = "<extra_id_0> "


def evqa_normalize(answer: str) -> str:
    text = answer.lower().replace("\n", " ").replace("\t", " ").strip()
    if text.startswith(_SPAN_PREFIX):
        text = text.replace(_SPAN_PREFIX, "")
    text = "".join(char for char in text if char not in _PUNCTUATION)
    words = [WORD_MAP.get(word, word) for word in _PREFIXES_AND_ARTICLES.sub(" ", text).split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words)


def single_answer_match(reference: str, candidate: str) -> bool:
    expected = evqa_normalize(reference)
    if not expected:
        raise ScoringError(f"E-VQA reference {reference!r} is empty after normalisation")
    return expected == evqa_normalize(candidate)


def multi_answer_match(reference: str, candidate: str) -> bool:
    expected = {part for part in map(evqa_normalize, reference.split(PART_SEPARATOR)) if part}
    if not expected:
        raise ScoringError(f"E-VQA reference {reference!r} has no part left after normalisation")
    given = {part for part in map(evqa_normalize, candidate.replace(" and ", ",").replace(" & ", ",").split(","))
             if part}
    return len(expected & given) / len(expected | given) >= LIST_IOU_THRESHOLD


class BemScorer(Protocol):
    """The official second stage: BEM's thresholded answer-equivalence score (0.0 or 1.0) of one example.

    Called only for a reference the candidate does not match exactly. For multi_answer
    questions the reference arrives with "&&" already replaced by ",", as the official BEM
    scorer does before tokenising.
    """

    def __call__(self, question: str, reference: str, candidate: str, question_type: str) -> float: ...


@dataclass(frozen=True)
class EvqaReference:
    question_id: str
    question: str
    answer: str
    """The `answer` column as distributed: alternatives separated by "|", list parts by "&&"."""
    question_type: str

    def references(self) -> list[str]:
        alternatives = self.answer.split(ALTERNATIVE_SEPARATOR)
        if not self.answer or any(not alternative for alternative in alternatives):
            raise ScoringError(f"question {self.question_id!r}: answer {self.answer!r} has an empty alternative")
        return alternatives


def evqa_score(candidate: str, reference: EvqaReference, bem: BemScorer | None = None) -> float:
    """Exact match against the best reference; with `bem`, BEM for each reference exact match misses."""
    if reference.question_type not in QUESTION_TYPES:
        raise ScoringError(f"question {reference.question_id!r}: question_type {reference.question_type!r} is not "
                           f"one of {', '.join(QUESTION_TYPES)}")
    match = multi_answer_match if reference.question_type == MULTI_ANSWER else single_answer_match
    best = 0.0
    for alternative in reference.references():
        try:
            if match(alternative, candidate):
                return 1.0
        except ScoringError as exc:
            raise ScoringError(f"question {reference.question_id!r}: {exc}") from None
        if bem is not None:
            bem_reference = (alternative.replace(PART_SEPARATOR, ",") if reference.question_type == MULTI_ANSWER
                             else alternative)
            best = max(best, float(bem(reference.question, bem_reference, candidate, reference.question_type)))
    return best


class EvqaBenchmark:
    """With `bem`, the official E-VQA accuracy; without, its exact-match stage (a lower bound), so named."""

    name = "evqa"
    reference_type = EvqaReference
    prediction_fields = ("prediction",)

    def __init__(self, bem: BemScorer | None = None) -> None:
        self.bem = bem
        self.score_name = "accuracy" if bem is not None else "exact_match_stage"
        self.title = ("E-VQA: accuracy (official evaluation_utils.py: exact match, then BEM), %" if bem is not None
                      else "E-VQA: EXACT-MATCH STAGE ONLY (official evaluation_utils.py rules; BEM not run), %: "
                           "a lower bound of the official E-VQA accuracy")

    def score(self, reference: EvqaReference, prediction: Prediction) -> dict[str, Any]:
        return {self.score_name: evqa_score(prediction.text(), reference, self.bem),
                "question_type": reference.question_type}

    def aggregate(self, scored: list[tuple[EvqaReference, dict[str, Any]]]) -> dict[str, float]:
        aggregates = {f"{self.score_name}/overall": percent((row[self.score_name] for _, row in scored), digits=None)}
        for question_type in QUESTION_TYPES:
            values = [row[self.score_name] for reference, row in scored if reference.question_type == question_type]
            if values:
                aggregates[f"{self.score_name}/{question_type}"] = percent(values, digits=None)
        return aggregates
