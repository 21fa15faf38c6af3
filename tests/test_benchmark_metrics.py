"""Evaluation summaries every dataset gets (recall@k, mean lenient answer metrics), against examples worked by hand."""

from __future__ import annotations

import pytest

from mmrag.metrics.benchmarks import mean_answer_metrics, mean_recall_at_k, recall_at_k


def test_recall_at_k_against_gold_documents():
    retrieved = ["d3", "d7", "d1", "d9"]
    assert recall_at_k(retrieved, ["d7"], 1) == 0.0
    assert recall_at_k(retrieved, ["d7"], 2) == 1.0
    assert recall_at_k(retrieved, ["d0", "d9"], 4) == 1.0
    with pytest.raises(ValueError, match="no gold documents"):
        recall_at_k(retrieved, [], 1)
    records = [{"retrieved": retrieved, "gold": ["d3"]}, {"retrieved": retrieved, "gold": ["d1"]},
               {"retrieved": retrieved, "gold": []}]
    # The question without gold documents is left out: recall@1 = 1/2, recall@3 = 2/2.
    assert mean_recall_at_k(records, [1, 3]) == {"recall@1": 0.5, "recall@3": 1.0}
    assert mean_recall_at_k(records[2:], [1]) == {}


def test_mean_answer_metrics_by_hand():
    metrics = mean_answer_metrics(["red house", "1,200 m"], [["the red house"], ["1150"]])
    assert set(metrics) == {"exact_match", "relaxed", "token_f1", "vqa_accuracy"}
    assert metrics["exact_match"] == 0.5  # first matches after article removal; second does not
    assert metrics["relaxed"] == 1.0  # 1200 lies within 1150 +- 115
    assert metrics["token_f1"] == pytest.approx(0.5)  # 1.0 and 0.0
    assert metrics["vqa_accuracy"] == 0.5
    with pytest.raises(ValueError, match="2 predictions for 1 reference lists"):
        mean_answer_metrics(["a", "b"], [["a"]])
