"""E-VQA's official score, exact-match stage (evaluation_utils.py rules), on hand-worked examples."""

from __future__ import annotations

import pytest

from mmrag.metrics.answers import exact_match
from mmrag.metrics.evqa import EvqaBenchmark, EvqaReference, evqa_normalize, evqa_score
from mmrag.metrics.scoring import Prediction, ScoringError, score_predictions


def reference(answer, question_type="templated", question="Which animals pull it?"):
    return EvqaReference("q", question, answer, question_type)


def test_multi_answer_questions_are_judged_by_list_overlap_of_at_least_half():
    animals = reference("oxen&&horses&&mules", "multi_answer")
    assert evqa_score("mules, horses and oxen", animals) == 1.0  # IoU 3/3
    assert evqa_score("oxen & horses", animals) == 1.0  # IoU 2/3
    assert evqa_score("oxen, donkeys", animals) == 0.0  # IoU 1/4
    assert evqa_score("oxen, horses AND mules", animals) == 0.0  # " and " splits only in lower case: IoU 1/4
    assert evqa_score("oxen&&horses&&mules", animals) == 0.0  # one string, not the list
    assert exact_match("oxen, horses, mules", ["oxen, horses, mules"]) == 1.0  # the lenient metric: one string


def test_normalization_deletes_punctuation_maps_true_to_yes_and_drops_the_answer_is():
    assert evqa_normalize("The answer is: 1.5 m.") == "15 m"  # punctuation deleted, not spaced
    assert evqa_score("1.5 m.", reference("1.5 m")) == 1.0
    assert evqa_score("15 m", reference("1.5 m")) == 1.0  # a quirk of deleting the period
    assert evqa_score("True", reference("yes")) == 1.0 and evqa_score("false", reference("no")) == 1.0
    assert evqa_score("‘Lisbon’", reference("Lisbon")) == 1.0  # curly quotes are punctuation too
    assert evqa_score("two dont", reference("2 don't")) == 1.0  # digits and contractions


def test_each_annotators_answer_is_a_separate_reference():
    assert evqa_score("150 cm", reference("1.5 m|150 cm")) == 1.0
    assert evqa_score("1.5 m|150 cm", reference("1.5 m|150 cm")) == 0.0
    with pytest.raises(ScoringError, match="question 'q': answer '1.5 m||150 cm' has an empty alternative"):
        evqa_score("150 cm", reference("1.5 m||150 cm"))


def test_a_question_type_outside_the_official_four_is_an_error():
    with pytest.raises(ScoringError, match="question_type 'list' is not one of templated, automatic"):
        evqa_score("oxen", reference("oxen", "list"))


def test_without_bem_the_score_is_labelled_as_the_exact_match_stage_everywhere():
    benchmark = EvqaBenchmark()
    references = {"a": EvqaReference("a", "Q?", "Lisbon", "automatic"),
                  "b": EvqaReference("b", "Q?", "oxen&&horses", "multi_answer")}
    predictions = {"a": Prediction("a", "Lisbon"), "b": Prediction("b", "cows")}
    report = score_predictions(benchmark, references, predictions)
    assert "EXACT-MATCH STAGE ONLY" in report.title and "lower bound" in report.title
    assert report.aggregates == {"exact_match_stage/overall": 50.0, "exact_match_stage/automatic": 100.0,
                                 "exact_match_stage/multi_answer": 0.0}
    assert report.per_example[0]["exact_match_stage"] == 1.0


def test_the_bem_stage_is_asked_only_about_references_that_exact_match_missed():
    asked = []

    def second_stage(question, reference_text, candidate, question_type):
        asked.append((reference_text, candidate, question_type))
        return 1.0 if reference_text == "horses,oxen" else 0.0

    animals = EvqaReference("q", "Which animals?", "cows&&goats|horses&&oxen", "multi_answer")
    assert evqa_score("two horses", animals, second_stage) == 1.0
    # Each missed reference goes to BEM with its list joined by commas, as the official BEM scorer does.
    assert asked == [("cows,goats", "two horses", "multi_answer"), ("horses,oxen", "two horses", "multi_answer")]
    asked.clear()
    assert evqa_score("goats, cows", animals, second_stage) == 1.0 and asked == []  # exact match: BEM not run
    assert "accuracy/overall" in EvqaBenchmark(second_stage).aggregate(
        [(animals, {"accuracy": 1.0})])
