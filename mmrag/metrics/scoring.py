"""Scoring predictions as each benchmark's official evaluation code does: the part all benchmarks share.

`mmrag score` (a user's predictions against the annotation files as distributed) and
`mmrag eval` (the pipeline's answers on converted benchmark data) both end here. Each
benchmark module (`okvqa`, `aokvqa`, `infoseek`, `evqa`) provides a `Benchmark`: the
reference it keeps per question (what its official code reads from the annotations), the
official per-example score, and the official aggregates. `score_predictions` matches
predictions to references by question id and runs them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class ScoringError(ValueError):
    """Predictions or references that cannot be scored; the message names the file and line, or the question id."""


@dataclass(frozen=True)
class Prediction:
    """One question's prediction: the answer text and, for multiple choice, the chosen option (index or text)."""

    question_id: str
    prediction: str | None = None
    choice: int | str | None = None
    where: str = ""
    """Where it was read (FILE:LINE), for error messages."""

    def text(self) -> str:
        if self.prediction is None:
            raise ScoringError(f"{self.where or self.question_id}: missing field 'prediction' (the answer text)")
        return self.prediction


class Benchmark(Protocol):
    """The official scoring of one benchmark."""

    name: str
    title: str
    """What the aggregates are, as printed above them."""
    reference_type: type
    prediction_fields: tuple[str, ...]
    """The Prediction fields it reads ("prediction", and "choice" for multiple choice)."""

    def score(self, reference: Any, prediction: Prediction) -> dict[str, Any]:
        """Per-example scores in [0, 1] (None where the question is not part of that score) and details."""

    def aggregate(self, scored: list[tuple[Any, dict[str, Any]]]) -> dict[str, float]:
        """The official aggregates of (reference, per-example score) pairs, in the official units."""


@dataclass
class ScoreReport:
    benchmark: str
    title: str
    aggregates: dict[str, float]
    per_example: list[dict[str, Any]]
    missing: list[str] = field(default_factory=list)
    """Annotated question ids without a prediction (scored only with `partial`)."""
    unknown: list[str] = field(default_factory=list)
    """Predicted question ids that no annotation has (skipped only with `partial`)."""


def score_predictions(benchmark: Benchmark, references: Mapping[str, Any], predictions: Mapping[str, Prediction],
                      partial: bool = False) -> ScoreReport:
    """Score every annotated question that has a prediction, in annotation order.

    Unless `partial`, every annotated question must have a prediction and every prediction
    an annotated question: an aggregate over a silent subset would not be the benchmark's score.
    """
    missing = [qid for qid in references if qid not in predictions]
    unknown = [qid for qid in predictions if qid not in references]
    if not partial and (missing or unknown):
        raise ScoringError(_coverage_message(missing, unknown, len(references)))
    if not partial and len(benchmark.prediction_fields) > 1:
        _check_same_fields(list(predictions.values()), benchmark.prediction_fields)
    scored = [(references[qid], {"question_id": qid, **_given(predictions[qid]),
                                 **benchmark.score(references[qid], predictions[qid])})
              for qid in references if qid in predictions]
    if not scored:
        raise ScoringError(f"no prediction has the question id of an annotated question "
                           f"(first annotated id: {next(iter(references), None)!r}, "
                           f"first predicted id: {next(iter(predictions), None)!r})")
    return ScoreReport(benchmark.name, benchmark.title, benchmark.aggregate(scored), [row for _, row in scored],
                       missing, unknown)


def percent(scores: Iterable[float], digits: int | None = 2) -> float:
    """100 x the mean (0.0 for no scores), rounded to `digits` decimals as the official code prints it."""
    values = list(scores)
    mean = 100 * statistics.fmean(values) if values else 0.0
    return mean if digits is None else round(mean, digits)


def _given(prediction: Prediction) -> dict[str, Any]:
    given = {"prediction": prediction.prediction}
    if prediction.choice is not None:
        given["choice"] = prediction.choice
    return given


def _check_same_fields(predictions: list[Prediction], fields: tuple[str, ...]) -> None:
    """Every prediction gives the same fields: one without 'choice' among others with it would leave the
    multiple-choice average over a silent subset."""
    first_with: dict[str, Prediction] = {}
    for prediction in predictions:
        for name in fields:
            if getattr(prediction, name) is not None:
                first_with.setdefault(name, prediction)
    for prediction in predictions:
        for name, example in first_with.items():
            if getattr(prediction, name) is None:
                raise ScoringError(f"{prediction.where}: no {name!r}, which {example.where} has; give it for "
                                   "every question, or pass --partial to score each setting over the questions "
                                   "that have it")


def _coverage_message(missing: list[str], unknown: list[str], annotated: int) -> str:
    parts = []
    if missing:
        parts.append(f"{len(missing)} of {annotated} annotated questions have no prediction (first: {missing[0]!r})")
    if unknown:
        parts.append(f"{len(unknown)} predictions name a question id the annotations do not have "
                     f"(first: {unknown[0]!r})")
    return "; ".join(parts) + ". Pass --partial to score only the questions that have both"
