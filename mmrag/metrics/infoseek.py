"""InfoSeek's official score, as the evaluation script its README points to (`infoseek_eval.py`) computes it.

Rules of the official script, kept here with their quirks:

* The question type comes from the separate question-type file (`infoseek_val_qtype.jsonl`):
  `Numerical` questions are judged on numbers, `Time` and `String` questions by exact match.
* Exact match (`infoseek_normalize`): lower case; punctuation *deleted* ("Saint-Denis"
  -> "saintdenis"); the words a, an, the removed; whitespace collapsed. Any of the
  question's `answer_eval` strings may match. A year is text here: "1920" never matches "1919".
* Numbers: the answer is the range of the first `answer_eval` item. The prediction's
  numbers are read by `prediction_numbers`: the first two form a range when the first is
  not larger, else only the first counts; no number reads as the range [0, 0]. A single
  predicted number is right inside the answer range (bounds included); a predicted range
  is right when it lies inside the answer range or its intersection over union with it is
  at least 0.5.
* A question belongs to the `unseen_question` split when its `data_split` ends so, else to
  `unseen_entity`. Each split's score is its accuracy x 100 rounded to 2 decimals; the final
  score is the harmonic mean of the two rounded split scores (a zero counted as 1e-12),
  rounded to 2 decimals.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmrag.metrics.scoring import Prediction, ScoringError, percent

SPLITS = ("unseen_question", "unseen_entity")
QUESTION_TYPES = ("String", "Numerical", "Time")
IOU_THRESHOLD = 0.5
_IOU_SLACK = 1e-12
_LENGTH_SLACK = 1e-12
_ZERO_SCORE_IN_HARMONIC_MEAN = 1e-12

_PUNCTUATION = set(string.punctuation)
_ARTICLE = re.compile(r"\b(a|an|the)\b")
# A number as the official script finds it: optional sign, optional leading period, digits
# with optional thousands groups, an optional decimal part, an optional exponent.
_NUMBER = re.compile(r"[-+]?\.?\d+(?:,\d{3})*\.?\d*(?:[eE][-+]?\d+)?")


def infoseek_normalize(text: str) -> str:
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLE.sub(" ", text).split())


def _spaced_ranges(text: str) -> str:
    """A hyphen right after a digit becomes " - " ("9-10" -> "9 - 10"), so "-10" is not read as negative."""
    return "".join(" - " if char == "-" and index >= 1 and text[index - 1].isdigit() else char
                   for index, char in enumerate(text))


def _number_value(token: str) -> float | None:
    token = token.replace(",", "").strip(".")
    if token.count(".") > 1:
        token = token.split(".")[0]
    try:
        return float(token)
    except ValueError:
        # Only a signed token like "-.5.5" gets here; the official script stops with an error on it.
        return None


def prediction_numbers(prediction: str) -> float | tuple[float, float]:
    """The number, or (low, high) range, that the official script reads from a prediction."""
    values = [value for value in map(_number_value, _NUMBER.findall(_spaced_ranges(prediction)))
              if value is not None][:2]
    if len(values) == 2:
        return (values[0], values[1]) if values[0] <= values[1] else values[0]
    if len(values) == 1:
        return values[0]
    return 0.0, 0.0


def range_iou(first: Sequence[float], second: Sequence[float]) -> float:
    """Intersection over union of two ranges; each length gets 1e-12 added, as in the official script."""
    low_1, high_1 = min(first), max(first)
    low_2, high_2 = min(second), max(second)
    overlap = max(0.0, min(high_1, high_2) - max(low_1, low_2))
    union = (high_1 - low_1 + _LENGTH_SLACK) + (high_2 - low_2 + _LENGTH_SLACK) - overlap
    return overlap / union if union != 0 else 0.0


def numerical_correct(predicted: float | tuple[float, float], answer: tuple[float, float]) -> float:
    low, high = answer
    if not isinstance(predicted, tuple):
        return float(low <= predicted <= high)
    if low <= predicted[0] <= high and low <= predicted[1] <= high:
        return 1.0
    return float(range_iou(predicted, answer) >= IOU_THRESHOLD - _IOU_SLACK)


@dataclass(frozen=True)
class InfoseekReference:
    question_id: str
    answer_eval: list[Any]
    """As distributed: strings, or for numerical questions `{"wikidata": v, "range": [low, high]}` items."""
    question_type: str | None
    """String, Numerical or Time (from the question-type file); None when converted without it."""
    data_split: str

    @property
    def numerical(self) -> bool:
        if self.question_type is not None:
            return self.question_type.lower() == "numerical"
        return any(isinstance(item, dict) for item in self.answer_eval)

    def answer_range(self) -> tuple[float, float]:
        """The official answer range: the first two bounds of the first item's range."""
        first = self.answer_eval[0] if self.answer_eval else None
        bounds = first.get("range") if isinstance(first, dict) else None
        if (not isinstance(bounds, list) or len(bounds) < 2
                or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds[:2])):
            raise ScoringError(f"question {self.question_id!r}: a Numerical question needs answer_eval "
                               f'[{{"range": [low, high]}}, ...], got {self.answer_eval!r}')
        return float(bounds[0]), float(bounds[1])

    def split_group(self) -> str:
        return SPLITS[0] if self.data_split.endswith(SPLITS[0]) else SPLITS[1]

    def type_group(self) -> str | None:
        """time, num or string (the official per-type scores); None when the type is unknown and not numerical."""
        if self.numerical:
            return "num"
        if self.question_type is None:
            return None
        return "time" if self.question_type.lower() == "time" else "string"


def infoseek_correct(prediction: str, reference: InfoseekReference) -> float:
    if reference.numerical:
        return numerical_correct(prediction_numbers(prediction), reference.answer_range())
    texts = [item for item in reference.answer_eval if isinstance(item, str)]
    if not texts or len(texts) != len(reference.answer_eval):
        raise ScoringError(f"question {reference.question_id!r}: a {reference.question_type or 'non-numerical'} "
                           f"question needs answer_eval strings, got {reference.answer_eval!r}")
    predicted = infoseek_normalize(prediction)
    return float(any(predicted == infoseek_normalize(text) for text in texts))


def harmonic_mean(*values: float) -> float:
    safe = [value if value != 0 else _ZERO_SCORE_IN_HARMONIC_MEAN for value in values]
    return len(safe) / sum(1.0 / value for value in safe)


class InfoseekBenchmark:
    name = "infoseek"
    title = "InfoSeek: accuracy (official infoseek_eval.py rules), %; final_score = harmonic mean of the splits"
    reference_type = InfoseekReference
    prediction_fields = ("prediction",)

    def score(self, reference: InfoseekReference, prediction: Prediction) -> dict[str, Any]:
        return {"score": infoseek_correct(prediction.text(), reference), "data_split": reference.data_split,
                "question_type": reference.question_type}

    def aggregate(self, scored: list[tuple[InfoseekReference, dict[str, Any]]]) -> dict[str, float]:
        aggregates: dict[str, float] = {}
        for split in SPLITS:
            rows = [(reference, row["score"]) for reference, row in scored if reference.split_group() == split]
            if not rows:
                continue
            aggregates[f"{split}/score"] = percent(score for _, score in rows)
            if all(reference.type_group() is not None for reference, _ in rows):
                for group in ("time", "num", "string"):
                    aggregates[f"{split}/score_{group}"] = percent(
                        score for reference, score in rows if reference.type_group() == group)
        if all(f"{split}/score" in aggregates for split in SPLITS):
            aggregates = {"final_score": round(harmonic_mean(*(aggregates[f"{s}/score"] for s in SPLITS)), 2),
                          **aggregates}
        return aggregates
