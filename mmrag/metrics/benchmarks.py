"""Benchmark-specific metrics beside the answer metrics of `mmrag.metrics.answers`.

Used by evaluation (`mmrag eval`, `mmrag.evaluation`) on held-out predictions:
A-OKVQA direct-answer accuracy, A-OKVQA multiple-choice accuracy, and retrieval
recall@k of the gold documents. Answer normalisation is `normalize_answer`'s, so every
metric agrees on when two answers are the same.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mmrag.metrics.answers import METRICS, normalize_answer, token_f1

AOKVQA_MATCHES_FOR_FULL_CREDIT = 3


def aokvqa_direct_answer(prediction: str, direct_answers: Sequence[str]) -> float:
    """A-OKVQA direct-answer accuracy: min(1, n / 3), n = direct answers equal to the prediction.

    Unlike official VQA accuracy there is no leave-one-out averaging: 2 of 10 annotators
    give 2/3, 3 or more give 1.0.
    """
    predicted = normalize_answer(prediction)
    matches = sum(normalize_answer(answer) == predicted for answer in direct_answers)
    return min(1.0, matches / AOKVQA_MATCHES_FOR_FULL_CREDIT)


def choose_option(prediction: str, choices: Sequence[str]) -> int | None:
    """The choice a free-form answer picks: its normalised exact match, else the choice of highest token F1
    (the first on ties); None when the answer shares no word with any choice."""
    predicted = normalize_answer(prediction)
    for index, choice in enumerate(choices):
        if normalize_answer(choice) == predicted:
            return index
    overlaps = [token_f1(prediction, [choice]) for choice in choices]
    best = max(range(len(choices)), key=lambda i: overlaps[i], default=None)
    return best if best is not None and overlaps[best] > 0 else None


def multiple_choice_accuracy(prediction: str, choices: Sequence[str], correct_choice_idx: int) -> float:
    """A-OKVQA multiple-choice accuracy: 1.0 when the answer picks (see `choose_option`) the correct choice."""
    return float(choose_option(prediction, choices) == correct_choice_idx)


def recall_at_k(retrieved: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 when any gold document id is among the first `k` retrieved ids, else 0.0."""
    if k < 1:
        raise ValueError(f"recall_at_k: k must be >= 1, got {k}")
    if not gold:
        raise ValueError("recall_at_k: this question has no gold documents; leave it out of retrieval metrics")
    return float(bool(set(retrieved[:k]) & set(gold)))


def mean_recall_at_k(records: Sequence[dict], ks: Sequence[int]) -> dict[str, float]:
    """{"recall@k": mean over the records that have gold documents} from records with "retrieved" and "gold";
    empty when no record has gold documents (e.g. OK-VQA, which ships none)."""
    with_gold = [r for r in records if r["gold"]]
    if not with_gold:
        return {}
    return {f"recall@{k}": statistics.fmean(recall_at_k(r["retrieved"], r["gold"], k) for r in with_gold)
            for k in ks}


def mean_answer_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    """Mean of every answer metric (those of `mmrag.metrics.answers.METRICS` plus A-OKVQA direct answer)."""
    if len(predictions) != len(references) or not predictions:
        raise ValueError(f"mean_answer_metrics: {len(predictions)} predictions for {len(references)} reference "
                         "lists; expected the same non-zero number")
    metrics = {**METRICS, "aokvqa_direct_answer": aokvqa_direct_answer}
    return {name: statistics.fmean(metric(p, refs) for p, refs in zip(predictions, references))
            for name, metric in metrics.items()}
