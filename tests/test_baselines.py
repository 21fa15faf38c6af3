"""Fixed baselines: k is chosen on val alone, and the test figure is read at that k."""

from __future__ import annotations

from mmrag.evaluation.baselines import FixedBaseline, best_fixed, choose_k


def test_k_is_chosen_on_val_and_test_is_read_at_that_k_even_when_test_prefers_another():
    # Val prefers k = 1; test would prefer k = 3 (0.9). A choice that looked at test would report 0.9.
    baseline = FixedBaseline("caption+question", val_by_k={0: 0.0, 1: 0.70, 2: 0.65, 3: 0.60},
                             test_by_k={0: 0.0, 1: 0.50, 2: 0.55, 3: 0.90})
    assert baseline.k == 1
    assert (baseline.val_reward, baseline.test_reward) == (0.70, 0.50)


def test_a_val_tie_goes_to_fewer_documents():
    assert choose_k({5: 0.6, 2: 0.6, 3: 0.4}) == 2


def test_the_best_fixed_baseline_is_the_best_on_val_not_on_test():
    on_val = FixedBaseline("question", {1: 0.30}, {1: 0.10})
    on_test = FixedBaseline("caption", {2: 0.20}, {2: 0.95})
    assert best_fixed([on_test, on_val]).name == "question"
