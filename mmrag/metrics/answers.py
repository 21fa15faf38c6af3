"""Answer metrics for knowledge-based VQA: one generated answer against its references.

They close the pipeline: the `rule` reward backend scores every rollout leaf with the
metric named by `reward.metric`, and evaluation reports them on held-out questions.
Every metric maps (prediction, references) to a float in [0, 1].

They are deliberately lenient learning signals with one shared normalisation, not benchmark
scores: each benchmark's official score, quirks included, is in `mmrag.metrics.okvqa`,
`aokvqa`, `infoseek` and `evqa` (the README's "Training reward vs official scores" lists
the differences).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Sequence

NUMBER_WORDS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}
ARTICLES = {"a", "an", "the"}
VQA_ANNOTATORS = 10
VQA_MATCHES_FOR_FULL_CREDIT = 3
RELAXED_TOLERANCE = 0.1

# A thousands separator ("1,200") is dropped and a decimal point ("3.5") kept, so that
# numbers survive the punctuation stripping that follows.
_THOUSANDS_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_DECIMAL_PLACEHOLDER = "\x00"
_PUNCTUATION = re.compile(f"[{re.escape(string.punctuation)}]")

_NUMBER = r"-?\d+(?:\.\d+)?"
_NUMBER_OR_RANGE = re.compile(rf"(?<![\d.])(?P<low>{_NUMBER})(?:\s*(?:-|–|—|to)\s*(?P<high>{_NUMBER}))?")
# A reference counts as numeric when it is a number or a range, optionally followed by one unit word.
_NUMERIC_REFERENCE = re.compile(rf"^\s*{_NUMBER_OR_RANGE.pattern}\s*(?:[^\W\d]+\.?|%)?\s*$")

Reference = str | tuple[float, float]


def normalize_answer(text: str) -> str:
    """Lower-case; number words ("two") to digits ("2"); punctuation and articles (a, an, the) removed;
    whitespace collapsed. Thousands separators are dropped and decimal points kept ("1,200.5" -> "1200.5");
    any other punctuation becomes a space ("red-striped" -> "red striped")."""
    text = _THOUSANDS_COMMA.sub("", text.lower())
    text = _DECIMAL_POINT.sub(_DECIMAL_PLACEHOLDER, text)
    text = _PUNCTUATION.sub(" ", text).replace(_DECIMAL_PLACEHOLDER, ".")
    words = [NUMBER_WORDS.get(word, word) for word in text.split() if word not in ARTICLES]
    return " ".join(words)


def exact_match(prediction: str, references: Sequence[str]) -> float:
    """1.0 when normalize_answer(prediction) equals normalize_answer of any reference, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(reference) for reference in references))


def _f1_against(predicted_tokens: list[str], reference_tokens: list[str]) -> float:
    if not predicted_tokens or not reference_tokens:
        return float(predicted_tokens == reference_tokens)
    shared = sum((Counter(predicted_tokens) & Counter(reference_tokens)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted_tokens)
    recall = shared / len(reference_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, references: Sequence[str]) -> float:
    """SQuAD token F1, maximised over references.

    Tokens are the words of the normalised strings; shared = size of the multiset
    intersection; precision = shared / |prediction|, recall = shared / |reference|,
    F1 = 2 P R / (P + R), and 0 when nothing is shared. When either side is empty the
    score is 1.0 if both are, else 0.0. No references gives 0.0.
    """
    predicted_tokens = normalize_answer(prediction).split()
    return max((_f1_against(predicted_tokens, normalize_answer(r).split()) for r in references), default=0.0)


def vqa_accuracy(prediction: str, annotator_answers: Sequence[str]) -> float:
    """VQA accuracy: how many annotators gave the (normalised) predicted answer.

    With 10 or more answers (the official VQA form): for each answer i, leave it out and
    take min(1, matches among the others / 3); the score is the mean over all i.
    With n < 10 answers (no leave-one-out is possible in the official sense, and our
    synthetic questions carry a single answer) the prediction needs min(3, n) matches
    for full credit: score = min(1, matches / min(3, n)). So one reference acts as
    exact match, and two references give 0.5 per match. No answers gives 0.0.
    """
    answers = [normalize_answer(answer) for answer in annotator_answers]
    if not answers:
        return 0.0
    predicted = normalize_answer(prediction)
    is_match = [answer == predicted for answer in answers]
    matches = sum(is_match)
    if len(answers) < VQA_ANNOTATORS:
        return min(1.0, matches / min(VQA_MATCHES_FOR_FULL_CREDIT, len(answers)))
    per_left_out = [min(1.0, (matches - left_out) / VQA_MATCHES_FOR_FULL_CREDIT) for left_out in is_match]
    return sum(per_left_out) / len(per_left_out)


def _interval(match: re.Match) -> tuple[float, float]:
    low = float(match["low"])
    high = float(match["high"]) if match["high"] is not None else low
    return min(low, high), max(low, high)


def _prepare_numbers(text: str) -> str:
    text = _THOUSANDS_COMMA.sub("", text.lower())
    return " ".join(NUMBER_WORDS.get(word, word) for word in text.split())


def _first_number_or_range(text: str) -> tuple[float, float] | None:
    """The first number ("120 metres" -> (120, 120)) or range ("30 - 40" -> (30, 40)) in free text."""
    match = _NUMBER_OR_RANGE.search(_prepare_numbers(text))
    return _interval(match) if match else None


def _reference_interval(reference: Reference) -> tuple[float, float] | None:
    """The interval a numeric reference accepts, or None for a textual one.

    A range accepts itself; a single number r accepts [r - 10% |r|, r + 10% |r|].
    """
    if isinstance(reference, tuple):
        low, high = sorted(float(value) for value in reference)
        return low, high
    match = _NUMERIC_REFERENCE.match(_prepare_numbers(reference))
    if match is None:
        return None
    low, high = _interval(match)
    if match["high"] is not None:
        return low, high
    margin = RELAXED_TOLERANCE * abs(low)
    return low - margin, low + margin


def _relaxed_single(prediction: str, reference: Reference) -> bool:
    accepted = _reference_interval(reference)
    if accepted is None:
        return normalize_answer(prediction) == normalize_answer(reference)
    predicted = _first_number_or_range(prediction)
    if predicted is None:
        return False
    return predicted[0] <= accepted[1] and accepted[0] <= predicted[1]


def relaxed_accuracy(prediction: str, references: Sequence[Reference]) -> float:
    """InfoSeek-style relaxed accuracy: 1.0 when the prediction is correct for any reference.

    * Numeric reference, a single number r (optionally with one unit word, "120 m"):
      correct when the first number in the prediction lies within r +- 10% |r|.
    * Numeric range, "a - b" / "a to b" or a (low, high) tuple: correct when the first
      number or range in the prediction overlaps [low, high] (bounds included).
      A predicted range against a single number must overlap r +- 10% |r|.
    * Any other reference: normalised exact match.
    The prediction's first number is extracted from free text ("120 metres" -> 120;
    number words count: "two" -> 2).
    """
    return float(any(_relaxed_single(prediction, reference) for reference in references))


Metric = Callable[[str, Sequence], float]
METRICS: dict[str, Metric] = {
    "vqa_accuracy": vqa_accuracy,
    "exact_match": exact_match,
    "token_f1": token_f1,
    "relaxed": relaxed_accuracy,
}
