"""A-OKVQA's official scores: direct answer and multiple choice, as its evaluation script computes them.

* Direct answer: min(1, n / 3), n = direct answers *equal as strings* to the prediction
  (the official script normalises nothing: "Cab" and "cab." do not match "cab").
  Questions marked `difficult_direct_answer` are left out of the direct-answer average.
* Multiple choice: judged by the chosen option. A choice given as an index is right when
  it is `correct_choice_idx`, so two options that read alike are never confused; a choice
  given as text is right when it equals the correct option's text, as in the official
  script (text that is no option scores 0 there too). Every question counts.
* Aggregates: mean x 100 (not rounded), over the questions that have that kind of prediction.

`choice_for_answer` is not official: it is how `mmrag eval` turns a free-form answer into
an option, since the pipeline generates answers rather than picking options.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mmrag.metrics.answers import normalize_answer
from mmrag.metrics.scoring import Prediction, ScoringError, percent

MATCHES_FOR_FULL_CREDIT = 3


def direct_answer_accuracy(prediction: str, direct_answers: Sequence[str]) -> float:
    matches = sum(prediction == answer for answer in direct_answers)
    return min(1.0, matches / MATCHES_FOR_FULL_CREDIT)


@dataclass(frozen=True)
class AokvqaReference:
    question_id: str
    direct_answers: list[str]
    choices: list[str]
    correct_choice_idx: int
    difficult_direct_answer: bool


def multiple_choice_correct(choice: int | str, reference: AokvqaReference, where: str = "") -> float:
    """1.0 when the chosen option (index, or option text) is the correct one."""
    if isinstance(choice, bool) or not isinstance(choice, (int, str)):
        raise ScoringError(f"{where}: field 'choice': expected an option index or an option's text, got {choice!r}")
    if isinstance(choice, int):
        if not 0 <= choice < len(reference.choices):
            raise ScoringError(f"{where}: field 'choice': {choice} is not an option index of question "
                               f"{reference.question_id!r} (0..{len(reference.choices) - 1})")
        return float(choice == reference.correct_choice_idx)
    return float(choice == reference.choices[reference.correct_choice_idx])


def choice_for_answer(answer: str, choices: Sequence[str]) -> int | None:
    """The option a free-form answer names: the option equal to it; else the only option equal to it after
    `normalize_answer`; else None (no option, or several options that normalise alike)."""
    if answer in choices:
        return list(choices).index(answer)
    normalized = normalize_answer(answer)
    alike = [index for index, choice in enumerate(choices) if normalize_answer(choice) == normalized]
    return alike[0] if len(alike) == 1 else None


class AokvqaBenchmark:
    name = "aokvqa"
    title = "A-OKVQA: direct-answer and multiple-choice accuracy (official evaluation script rules), %"
    reference_type = AokvqaReference
    prediction_fields = ("prediction", "choice")

    def score(self, reference: AokvqaReference, prediction: Prediction) -> dict[str, Any]:
        if prediction.prediction is None and prediction.choice is None:
            raise ScoringError(f"{prediction.where}: needs 'prediction' (direct answer), 'choice' (multiple "
                               "choice: an option index or text), or both")
        direct = None
        if prediction.prediction is not None and not reference.difficult_direct_answer:
            direct = direct_answer_accuracy(prediction.prediction, reference.direct_answers)
        multiple = (None if prediction.choice is None
                    else multiple_choice_correct(prediction.choice, reference, prediction.where))
        return {"direct_answer": direct, "multiple_choice": multiple,
                "difficult_direct_answer": reference.difficult_direct_answer}

    def aggregate(self, scored: list[tuple[AokvqaReference, dict[str, Any]]]) -> dict[str, float]:
        aggregates = {}
        for setting in ("direct_answer", "multiple_choice"):
            values = [row[setting] for _, row in scored if row[setting] is not None]
            if values:
                aggregates[setting] = percent(values, digits=None)
                aggregates[f"{setting}/questions"] = float(len(values))
        return aggregates
