"""OK-VQA's official score: VQA accuracy exactly as the VQA evaluation code (`vqaEval.py`) computes it.

Two rule sets, both from GT-Vision-Lab/VQA's `PythonEvaluationTools/vqaEvaluation/vqaEval.py`:

* `current` (the default): the code at its current head, commit a013f00 of 2021-03-11
  ("Fixed processing answers bug"). Prediction and the ten annotator answers have their
  newlines and tabs turned into spaces and are stripped. When the ten answers are all
  identical, prediction and answers are compared as they are (so "an apple" scores 1
  against ten "an apple", and "tshirt." 0 against ten "tshirt"). Otherwise both get
  `vqa_punctuation` and then `vqa_words` (lower case, number words to digits ("two" ->
  "2"), articles dropped, contractions restored ("dont" -> "don't")).
* `pre-2021`: the code before that commit, which papers evaluated with the original
  release used. The prediction always gets the full normalisation; the answers are
  compared as they are when identical, and otherwise get `vqa_punctuation` only (no
  lower-casing, no number words, not stripped).

Both then score alike:

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
RULES = ("current", "pre-2021")
"""`current`: vqaEval.py since 2021-03-11 (the default); `pre-2021`: before, for comparisons with papers that used it."""

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


def vqa_normalize(text: str) -> str:
    """Both steps of the official normalisation: `vqa_punctuation`, then `vqa_words`."""
    return vqa_words(vqa_punctuation(text))


def _one_line(text: str) -> str:
    return text.replace("\n", " ").replace("\t", " ").strip()


def compared_forms(prediction: str, answers: Sequence[str], rules: str = "current") -> tuple[str, list[str]]:
    """(prediction, answers) as the official code of `rules` compares them."""
    if rules == "current":
        answers = [_one_line(answer) for answer in answers]
        if len(set(answers)) == 1:
            return _one_line(prediction), answers
        return vqa_normalize(_one_line(prediction)), [vqa_normalize(answer) for answer in answers]
    if rules == "pre-2021":
        answers = list(answers) if len(set(answers)) == 1 else [vqa_punctuation(answer) for answer in answers]
        return vqa_normalize(_one_line(prediction)), answers
    raise _unknown_rules(rules)


def _unknown_rules(rules: str) -> ScoringError:
    return ScoringError(f"OK-VQA rules: unknown {rules!r} (valid: {', '.join(RULES)})")


def vqa_accuracy(prediction: str, answers: Sequence[str], annotators: Sequence[str] | None = None,
                 rules: str = "current") -> float:
    """Official VQA accuracy of one prediction against the annotator answers, by the rules of `rules`.

    `annotators[i]` is what else the i-th answer record holds (its id, confidence, ...):
    records equal in answer and annotator are left out together. Default: all distinct.
    """
    if not answers:
        raise ScoringError("VQA accuracy: no annotator answers")
    annotators = list(annotators) if annotators is not None else [str(i) for i in range(len(answers))]
    if len(annotators) != len(answers):
        raise ScoringError(f"VQA accuracy: {len(answers)} answers but {len(annotators)} annotator records")
    predicted, compared = compared_forms(prediction, answers, rules)
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
    reference_type = OkvqaReference
    prediction_fields = ("prediction",)

    def __init__(self, rules: str = "current"):
        if rules not in RULES:
            raise _unknown_rules(rules)
        self.rules = rules
        which = "current vqaEval.py" if rules == "current" else "vqaEval.py before its 2021-03-11 fix"
        self.title = f"OK-VQA: VQA accuracy ({which} rules), %"

    def score(self, reference: OkvqaReference, prediction: Prediction) -> dict[str, Any]:
        return {"score": vqa_accuracy(prediction.text(), reference.answers, reference.annotators, self.rules)}

    def aggregate(self, scored: list[tuple[OkvqaReference, dict[str, Any]]]) -> dict[str, float]:
        aggregates = {"overall": percent(row["score"] for _, row in scored)}
        for label in ("answer_type", "question_type"):
            groups: dict[str, list[float]] = {}
            for reference, row in scored:
                groups.setdefault(getattr(reference, label), []).append(row["score"])
            aggregates.update({f"{label}/{key}": percent(values) for key, values in sorted(groups.items())})
        return aggregates
