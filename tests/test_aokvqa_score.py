"""A-OKVQA's official direct-answer and multiple-choice scores on hand-worked examples, one rule per test."""

from __future__ import annotations

import pytest

from mmrag.metrics.aokvqa import (AokvqaBenchmark, AokvqaReference, choice_for_answer, direct_answer_accuracy,
                                  multiple_choice_correct)
from mmrag.metrics.scoring import Prediction, ScoringError, score_predictions

DIRECT = ["thirty", "30", "thirty", "30th", "30", "thirty", "thirty", "thirty", "thirty", "thirty"]
CAB = AokvqaReference("q-cab", ["ride", "ride", "bus", "taxi", "cab", "cab", "cab", "taxi", "cab", "his ride"],
                      ["a cab", "train", "delivery", "cab"], 3, difficult_direct_answer=False)


def test_direct_answer_compares_strings_exactly_without_normalization():
    assert direct_answer_accuracy("thirty", DIRECT) == 1.0  # 7 matches -> min(1, 7/3)
    assert direct_answer_accuracy("30", DIRECT) == pytest.approx(2 / 3)  # 2 matches, no leave-one-out
    # No case folding, punctuation or article removal: none of these equals a direct answer.
    assert direct_answer_accuracy("Thirty", DIRECT) == 0.0
    assert direct_answer_accuracy("thirty.", DIRECT) == 0.0
    assert direct_answer_accuracy("the cab", CAB.direct_answers) == 0.0


def test_difficult_questions_are_left_out_of_the_direct_answer_average_but_not_of_multiple_choice():
    hard = AokvqaReference("q-hard", ["ride"] * 10, ["ride", "bus", "train", "cab"], 0, difficult_direct_answer=True)
    references = {"q-cab": CAB, "q-hard": hard}
    predictions = {"q-cab": Prediction("q-cab", "cab", 3), "q-hard": Prediction("q-hard", "walk", 1)}
    report = score_predictions(AokvqaBenchmark(), references, predictions)
    # Direct answer over q-cab only: "cab" 4 times -> 1.0 (q-hard's 0.0 would halve it). MC over both: 1 and 0.
    assert report.aggregates == {"direct_answer": 100.0, "direct_answer/questions": 1.0,
                                 "multiple_choice": 50.0, "multiple_choice/questions": 2.0}
    assert report.per_example[1]["direct_answer"] is None


def test_multiple_choice_is_judged_by_the_chosen_index_so_options_that_read_alike_are_not_confused():
    # "a cab" (0) and "cab" (3, correct) normalise alike; only the index, or the exact text, tells them apart.
    assert multiple_choice_correct(3, CAB) == 1.0 and multiple_choice_correct(0, CAB) == 0.0
    assert multiple_choice_correct("cab", CAB) == 1.0 and multiple_choice_correct("a cab", CAB) == 0.0
    assert multiple_choice_correct("Cab", CAB) == 0.0  # text that is no option is wrong, as officially
    with pytest.raises(ScoringError, match="P:3: field 'choice': 4 is not an option index of question 'q-cab'"):
        multiple_choice_correct(4, CAB, "P:3")


def test_eval_maps_a_free_form_answer_to_an_option_only_when_one_option_fits():
    assert choice_for_answer("cab", CAB.choices) == 3  # exact text first
    assert choice_for_answer("The train.", CAB.choices) == 1  # else the one option equal after normalising
    assert choice_for_answer("Cab", CAB.choices) is None  # "a cab" and "cab" both fit: no choice
    assert choice_for_answer("bus", CAB.choices) is None
