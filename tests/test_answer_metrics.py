"""Answer metrics against examples worked out by hand (the arithmetic is in each test)."""

from __future__ import annotations

import pytest

from mmrag.metrics.answers import (
    METRICS,
    exact_match,
    normalize_answer,
    relaxed_accuracy,
    token_f1,
    vqa_accuracy,
)


def test_normalize_answer_strips_case_punctuation_articles_and_maps_number_words():
    assert normalize_answer("  The Eiffel-Tower,  built by AN engineer! ") == "eiffel tower built by engineer"
    assert normalize_answer("Two") == "2"
    assert normalize_answer("1,200.5 m") == "1200.5 m"


def test_exact_match_ignores_articles_and_punctuation():
    assert exact_match("The Louvre.", ["louvre"]) == 1.0
    assert exact_match("a louvre museum", ["Louvre"]) == 0.0
    assert exact_match("two", ["Paris", "2"]) == 1.0
    assert exact_match("anything", []) == 0.0


def test_token_f1_squad_arithmetic():
    # prediction "big red house" (3 tokens after dropping "the"), reference "red house on hill" (4):
    # shared 2, P = 2/3, R = 2/4, F1 = 2 * (2/3)(1/2) / (2/3 + 1/2) = (2/3) / (7/6) = 4/7.
    assert token_f1("the big red house", ["red house on hill"]) == pytest.approx(4 / 7)
    # max over references: the second reference matches exactly.
    assert token_f1("red house", ["blue car", "Red house"]) == 1.0
    assert token_f1("cat", ["dog"]) == 0.0
    # multiset intersection: "red red" vs "red" shares one token: P = 1/2, R = 1, F1 = 2/3.
    assert token_f1("red red", ["red"]) == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    "matching, expected",
    [
        # 2 of 10 match. Leaving out one of the 2: 1 match left -> 1/3 (2 such subsets);
        # leaving out one of the 8: 2 matches -> 2/3 (8 subsets). (2/3 + 16/3) / 10 = 0.6.
        (2, 0.6),
        # 3 match: leaving out a match -> 2/3 (3 subsets), else 3 -> 1 (7). (2 + 7) / 10 = 0.9.
        (3, 0.9),
        # 4 match: every subset keeps at least 3 matches -> 1.0.
        (4, 1.0),
        (0, 0.0),
    ],
)
def test_vqa_accuracy_official_leave_one_out(matching, expected):
    annotators = ["two"] * matching + ["three"] * (10 - matching)
    assert vqa_accuracy("2", annotators) == pytest.approx(expected)


def test_vqa_accuracy_with_fewer_than_ten_answers_needs_min_three_n_matches():
    # n = 1: min(3, 1) = 1 match for full credit, i.e. exact match.
    assert vqa_accuracy("Paris", ["paris"]) == 1.0
    assert vqa_accuracy("Lyon", ["paris"]) == 0.0
    # n = 2, one match: 1 / min(3, 2) = 0.5.
    assert vqa_accuracy("paris", ["paris", "lyon"]) == 0.5
    # n = 5, two matches: 2 / 3.
    assert vqa_accuracy("paris", ["paris", "Paris.", "lyon", "nice", "metz"]) == pytest.approx(2 / 3)
    assert vqa_accuracy("paris", []) == 0.0


@pytest.mark.parametrize(
    "prediction, references, expected",
    [
        # single number 110: accepted [99, 121]; first number of "120 metres" is 120 -> inside.
        ("120 metres", ["110"], 1.0),
        # reference 120: accepted [108, 132]; 135 is outside, 108 is on the boundary.
        ("135 m", ["120"], 0.0),
        ("It is 108 m tall", ["120 m"], 1.0),
        # year 1889: accepted [1700.1, 2077.9]; 10% of a year is wide, as in InfoSeek.
        ("built in 1920", ["1889"], 1.0),
        ("1,200", ["1100"], 1.0),
        ("three", ["3"], 1.0),
        ("no number here", ["3"], 0.0),
    ],
)
def test_relaxed_accuracy_single_number_within_ten_percent(prediction, references, expected):
    assert relaxed_accuracy(prediction, references) == expected


@pytest.mark.parametrize(
    "prediction, references, expected",
    [
        ("about 35", ["30 - 40"], 1.0),  # 35 in [30, 40]
        ("40", ["30 - 40"], 1.0),  # bound included
        ("41", ["30 - 40"], 0.0),
        ("45-50 m", ["30 - 40"], 0.0),  # [45, 50] misses [30, 40]
        ("38 to 50", ["30 - 40"], 1.0),  # [38, 50] overlaps [30, 40]
        ("40 to 50", [(30, 40)], 1.0),  # tuple reference, touching at 40
        ("25", [(40, 30)], 0.0),  # tuple bounds given in either order
        ("100 - 105", ["120"], 0.0),  # predicted range vs [108, 132]
        ("100 - 110", ["120"], 1.0),
    ],
)
def test_relaxed_accuracy_ranges_overlap(prediction, references, expected):
    assert relaxed_accuracy(prediction, references) == expected


def test_relaxed_accuracy_falls_back_to_normalized_exact_match_for_text():
    assert relaxed_accuracy("The Paris.", ["paris"]) == 1.0
    assert relaxed_accuracy("Lyon", ["paris"]) == 0.0
    # "Route 66" is text (a word before the number): a bare 66 does not match it.
    assert relaxed_accuracy("66", ["Route 66"]) == 0.0
    assert relaxed_accuracy("Lyon", ["paris", "1889", "Lyon"]) == 1.0


def test_metrics_registry_names_every_reward_metric():
    assert set(METRICS) == {"vqa_accuracy", "exact_match", "token_f1", "relaxed"}
    assert METRICS["relaxed"] is relaxed_accuracy
