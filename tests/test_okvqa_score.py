"""OK-VQA's official VQA accuracy (vqaEval.py rules) on hand-worked examples, one rule per test."""

from __future__ import annotations

import pytest

from mmrag.metrics.answers import normalize_answer
from mmrag.metrics.okvqa import OkvqaBenchmark, OkvqaReference, vqa_accuracy, vqa_punctuation
from mmrag.metrics.scoring import Prediction, ScoringError, score_predictions


def test_ten_identical_answers_are_compared_as_they_are_prediction_included():
    # Current vqaEval.py: all ten agree, so neither side is normalised.
    assert vqa_accuracy("an apple", ["an apple"] * 10) == 1.0
    assert vqa_accuracy("tshirt.", ["tshirt"] * 10) == 0.0  # the period stays on the prediction
    assert vqa_accuracy("Yes", ["yes"] * 10) == 0.0  # nor is it lower-cased
    assert vqa_accuracy(" tshirt\n", ["tshirt\t"] * 10) == 1.0  # but both are stripped


def test_differing_answers_get_the_full_normalisation_like_the_prediction():
    assert vqa_accuracy("Race", ["Race"] * 6 + ["ride"] * 4) == 1.0  # both lower-cased
    assert vqa_accuracy("2", ["two"] * 3 + ["three"] * 7) == pytest.approx(0.9)  # number words in the answers
    assert vqa_accuracy("don't know", ["dont know"] * 4 + ["unknown"] * 6) == 1.0  # contractions in the answers
    assert vqa_accuracy("an apple", ["an apple"] * 9 + ["a pear"]) == 1.0  # articles dropped on both sides


def test_pre_2021_rules_normalise_the_prediction_always_and_differing_answers_by_punctuation_only():
    # The code before 2021-03-11: the prediction is normalised even against ten identical answers...
    assert vqa_accuracy("an apple", ["an apple"] * 10, rules="pre-2021") == 0.0  # "apple" != "an apple"
    assert vqa_accuracy("tshirt.", ["tshirt"] * 10, rules="pre-2021") == 1.0
    assert vqa_accuracy("Yes", ["yes"] * 10, rules="pre-2021") == 1.0
    assert vqa_accuracy("tshirt", [" tshirt"] * 10, rules="pre-2021") == 0.0  # answers are not stripped
    # ...and differing answers get punctuation only: no lower case, number words or contractions.
    assert vqa_accuracy("t-shirt", ["t-shirt"] * 9 + ["shirt"], rules="pre-2021") == 1.0  # "t shirt" both
    assert vqa_accuracy("Race", ["Race"] * 6 + ["ride"] * 4, rules="pre-2021") == 0.0
    assert vqa_accuracy("2", ["two"] * 3 + ["three"] * 7, rules="pre-2021") == 0.0
    assert vqa_accuracy("don't know", ["dont know"] * 4 + ["unknown"] * 6, rules="pre-2021") == 0.0


def test_unknown_rules_are_refused_naming_the_valid_ones():
    with pytest.raises(ScoringError, match="'2019'.*current, pre-2021"):
        vqa_accuracy("a", ["a"] * 10, rules="2019")
    with pytest.raises(ScoringError, match="current, pre-2021"):
        OkvqaBenchmark("2019")


def test_dollar_percent_ampersand_and_colon_are_kept_and_other_marks_follow_the_official_rules():
    assert vqa_punctuation("$5, 20% & 10:30") == "$5 20% & 10:30"  # "," next to a space: deleted
    assert vqa_punctuation("red-striped") == "red striped"  # not next to a space: a space
    assert vqa_punctuation("red - striped") == "red  striped"  # next to a space: deleted
    assert vqa_punctuation("1,000-ish (approx)") == "1000ish approx"  # a digit,digit anywhere: all deleted
    assert vqa_accuracy("$5", ["$5"] * 5 + ["5 dollars"] * 5) == 1.0
    assert normalize_answer("$5") == "5"  # the lenient training metric drops it


def test_periods_inside_abbreviations_are_deleted_not_turned_into_spaces():
    assert vqa_punctuation("u.s.a.") == "usa" and vqa_punctuation("3.5 m.") == "3.5 m"
    assert vqa_accuracy("U.S.A.", ["usa"] * 4 + ["america"] * 6) == 1.0
    assert vqa_accuracy("Washington D.C.", ["washington dc"] * 3 + ["dc"] * 7) == pytest.approx(0.9)
    assert normalize_answer("d.c.") == "d c"  # the lenient training metric spaces them
    # The official call caps the deletions at 32 (it passes re.UNICODE where re.sub takes a count).
    assert vqa_punctuation("." * 40) == "." * 8


def test_contractions_are_restored_and_apostrophes_kept():
    answers = ["don't know"] * 3 + ["unknown"] * 7
    # "dont know" -> "don't know": 3 matches -> (3 x 2/3 + 7 x 1) / 10 = 0.9.
    assert vqa_accuracy("Dont know", answers) == pytest.approx(0.9)
    assert vqa_accuracy("it's red", ["it's red"] * 4 + ["red"] * 6) == 1.0


@pytest.mark.parametrize("matching, expected", [
    (1, 0.3),  # leaving out the match: 0 (1 subset); else 1/3 (9 subsets): 3/10
    (2, 0.6),  # (2 x 1/3 + 8 x 2/3) / 10
    (3, 0.9),  # (3 x 2/3 + 7 x 1) / 10
    (4, 1.0),
])
def test_accuracy_averages_min_matches_over_three_across_the_ten_leave_one_out_subsets(matching, expected):
    assert vqa_accuracy("two", ["2"] * matching + ["3"] * (10 - matching)) == pytest.approx(expected)


def test_identical_annotator_records_are_left_out_together():
    answers = ["2"] * 3 + ["3"] * 7
    distinct = [f'{{"answer_id": {i}}}' for i in range(10)]
    assert vqa_accuracy("2", answers, distinct) == pytest.approx(0.9)
    # Records 0 and 1 are identical: leaving out either removes both (1 match left, 1/3 each time);
    # leaving out record 2 leaves 2 (2/3); the other seven leave 3 (1): (1/3 + 1/3 + 2/3 + 7) / 10.
    duplicated = [distinct[0], *distinct[:-1]]
    assert vqa_accuracy("2", answers, duplicated) == pytest.approx((4 / 3 + 7) / 10)


def test_aggregates_are_percent_rounded_to_two_decimals_overall_and_per_type():
    references = {
        "1": OkvqaReference("1", ["2"] * 2 + ["3"] * 8, [str(i) for i in range(10)], "eight", "other"),
        "2": OkvqaReference("2", ["yes"] * 10, [str(i) for i in range(10)], "four", "yes/no"),
        "3": OkvqaReference("3", ["red"] * 10, [str(i) for i in range(10)], "four", "other"),
    }
    predictions = {qid: Prediction(qid, text) for qid, text in (("1", "2"), ("2", "yes"), ("3", "blue"))}
    report = score_predictions(OkvqaBenchmark(), references, predictions)
    assert [row["score"] for row in report.per_example] == pytest.approx([0.6, 1.0, 0.0])
    # overall (0.6 + 1 + 0) / 3 = 53.333 -> 53.33; other: (0.6 + 0) / 2 = 30.0; four: (1 + 0) / 2 = 50.0
    assert report.aggregates == {"overall": 53.33, "answer_type/other": 30.0, "answer_type/yes/no": 100.0,
                                 "question_type/eight": 60.0, "question_type/four": 50.0}
