"""InfoSeek's official score (infoseek_eval.py rules) on hand-worked examples, one rule per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrag.data.loaders import LoaderError
from mmrag.data.loaders.infoseek import read_infoseek_references
from mmrag.metrics.answers import normalize_answer, relaxed_accuracy
from mmrag.metrics.infoseek import (InfoseekBenchmark, InfoseekReference, harmonic_mean, infoseek_correct,
                                    infoseek_normalize, numerical_correct, prediction_numbers)
from mmrag.metrics.scoring import Prediction, score_predictions

FIXTURES = Path(__file__).parent / "fixtures" / "infoseek"


def reference(answer_eval, question_type, data_split="val_unseen_question", question_id="q"):
    return InfoseekReference(question_id, answer_eval, question_type, data_split)


def test_time_questions_are_exact_match_not_within_ten_percent():
    year = reference(["1937"], "Time")
    assert infoseek_correct("1937", year) == 1.0
    assert infoseek_correct("1938", year) == 0.0
    assert infoseek_correct("in 1937", year) == 0.0
    assert relaxed_accuracy("1938", ["1937"]) == 1.0  # the lenient training metric accepts it


def test_question_types_come_from_the_question_type_file():
    references = read_infoseek_references([FIXTURES / "infoseek_val_qtype.jsonl", FIXTURES / "infoseek_val.jsonl"])
    assert [r.question_type for r in references.values()] == ["String", "Numerical", "Time", "Numerical"]
    with pytest.raises(LoaderError, match="has no question type; pass the question-type file"):
        read_infoseek_references([FIXTURES / "infoseek_val.jsonl"])


@pytest.mark.parametrize("prediction, numbers", [
    ("about 330 metres", 330.0),
    ("between 300 and 340 m", (300.0, 340.0)),  # the first two numbers form a range...
    ("340 to 300", 340.0),  # ...only when in order; else the first alone counts
    ("from 1 to 2 to 3", (1.0, 2.0)),  # a third number is ignored
    ("9-10", (9.0, 10.0)),  # a hyphen after a digit separates a range, not a sign
    ("-5 degrees", -5.0),
    ("1,250,000 people", 1250000.0),
    ("2.5e3", 2500.0),
    ("no idea", (0.0, 0.0)),  # no number reads as the range [0, 0]
])
def test_numeric_predictions_are_read_as_the_official_script_reads_them(prediction, numbers):
    assert prediction_numbers(prediction) == numbers


@pytest.mark.parametrize("predicted, expected", [
    (150.0, 1.0), (200.0, 1.0), (201.0, 0.0),  # a single number: inside the answer range, bounds included
    ((120.0, 180.0), 1.0),  # a range inside the answer range
    ((150.0, 250.0), 0.0),  # IoU 50 / 150 = 1/3
    ((100.0, 260.0), 1.0),  # IoU 100 / 160 = 0.625
    ((50.0, 150.0), 0.0),  # IoU 50 / 150
    ((90.0, 190.0), 1.0),  # IoU 90 / 110
])
def test_a_predicted_range_counts_inside_the_answer_range_or_with_iou_of_at_least_half(predicted, expected):
    assert numerical_correct(predicted, (100.0, 200.0)) == expected


def test_numerical_answers_are_the_first_range_of_answer_eval_with_no_tolerance_added():
    height = reference([{"wikidata": 150, "range": [100, 200]}, {"wikidata": 1000, "range": [900, 1100]}],
                       "Numerical")
    assert infoseek_correct("about 200 m", height) == 1.0
    assert infoseek_correct("210", height) == 0.0  # no +-10% on top of the official range
    assert infoseek_correct("1000", height) == 0.0  # only the first range counts
    big = reference([{"wikidata": 1234567, "range": [1111110.3, 1358023.7]}], "Numerical")
    assert infoseek_correct("1,250,000", big) == 1.0


def test_text_answers_delete_punctuation_instead_of_spacing_it():
    assert infoseek_normalize("The Saint-Denis Basilica!") == "saintdenis basilica"
    city = reference(["Saint-Denis"], "String")
    assert infoseek_correct("SaintDenis.", city) == 1.0
    assert infoseek_correct("Saint Denis", city) == 0.0
    assert normalize_answer("Saint-Denis") == normalize_answer("Saint Denis")  # the lenient metric spaces it


def test_the_final_score_is_the_harmonic_mean_of_the_two_split_scores():
    references = {f"q{i}": reference(["yes"], "String", split, f"q{i}")
                  for i, split in enumerate(["val_unseen_question"] * 2 + ["val_unseen_entity"] * 3)}
    answers = ["yes", "yes", "yes", "no", "no"]
    predictions = {qid: Prediction(qid, answer) for qid, answer in zip(references, answers)}
    aggregates = score_predictions(InfoseekBenchmark(), references, predictions).aggregates
    # unseen_question 2/2 = 100.00, unseen_entity 1/3 = 33.33 (rounded first); 2 / (1/100 + 1/33.33) = 49.996...
    assert aggregates["unseen_question/score"] == 100.0 and aggregates["unseen_entity/score"] == 33.33
    assert aggregates["final_score"] == 50.0  # not the mean, 66.67
    assert aggregates["unseen_entity/score_string"] == 33.33 and aggregates["unseen_entity/score_time"] == 0.0
    assert harmonic_mean(0.0, 80.0) == pytest.approx(2e-12)  # a zero split counts as 1e-12
