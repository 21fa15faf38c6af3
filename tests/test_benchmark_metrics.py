"""Benchmark metrics against examples worked by hand."""

from __future__ import annotations

import pytest

from mmrag.metrics.benchmarks import (aokvqa_direct_answer, choose_option, mean_answer_metrics, mean_recall_at_k,
                                      multiple_choice_accuracy, recall_at_k)

DIRECT = ["thirty", "30", "thirty", "30th", "30", "thirty", "thirty", "thirty", "thirty", "thirty"]


def test_aokvqa_direct_answer_is_min_one_n_over_three():
    assert aokvqa_direct_answer("Thirty.", DIRECT) == 1.0  # 7 matches -> min(1, 7/3)
    assert aokvqa_direct_answer("30", DIRECT) == pytest.approx(2 / 3)  # 2 matches, no leave-one-out
    assert aokvqa_direct_answer("30th", DIRECT) == pytest.approx(1 / 3)
    assert aokvqa_direct_answer("forty", DIRECT) == 0.0
    assert aokvqa_direct_answer("a cigarette", ["cigarette", "the cigarette", "pipe"]) == pytest.approx(2 / 3)


def test_multiple_choice_picks_exact_then_best_overlap():
    choices = ["toothpick", "food", "popsicle stick", "cigarette"]
    assert choose_option("The cigarette", choices) == 3
    assert choose_option("a wooden stick", choices) == 2  # shares "stick" only with choice 2
    assert choose_option("nothing at all", choices) is None
    assert multiple_choice_accuracy("cigarette", choices, 3) == 1.0
    assert multiple_choice_accuracy("popsicle stick", choices, 3) == 0.0
    assert multiple_choice_accuracy("unrelated words", choices, 3) == 0.0


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
    assert metrics["exact_match"] == 0.5  # first matches after article removal; second does not
    assert metrics["relaxed"] == 1.0  # 1200 lies within 1150 +- 115
    assert metrics["token_f1"] == pytest.approx(0.5)  # 1.0 and 0.0
    assert metrics["vqa_accuracy"] == 0.5
    assert metrics["aokvqa_direct_answer"] == pytest.approx((1 / 3 + 0) / 2)
    with pytest.raises(ValueError, match="2 predictions for 1 reference lists"):
        mean_answer_metrics(["a", "b"], [["a"]])
