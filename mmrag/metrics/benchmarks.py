"""Evaluation summaries that every dataset gets: retrieval recall@k and the mean lenient answer metrics.

Used by `mmrag eval` (`mmrag.evaluation.compare`) on held-out predictions, synthetic or
converted. They are mmrag's own yardsticks (the metrics the `rule` training reward can
use); a benchmark's official score is computed by its module (`mmrag.metrics.okvqa`,
`aokvqa`, `infoseek`, `evqa`) and may differ.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mmrag.metrics.answers import METRICS


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
    """Mean of every lenient answer metric of `mmrag.metrics.answers.METRICS`."""
    if len(predictions) != len(references) or not predictions:
        raise ValueError(f"mean_answer_metrics: {len(predictions)} predictions for {len(references)} reference "
                         "lists; expected the same non-zero number")
    return {name: statistics.fmean(metric(p, refs) for p, refs in zip(predictions, references))
            for name, metric in METRICS.items()}
