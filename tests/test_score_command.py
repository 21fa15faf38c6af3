"""`mmrag score` end to end on annotation files in their distributed layouts, and `mmrag eval`'s official scores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrag.data.loaders.aokvqa import read_aokvqa_references
from mmrag.evaluation.compare import compare_settings
from mmrag.metrics.official import benchmark
from mmrag.pipelines.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
ANNOTATIONS = {
    "okvqa": ["okvqa/mscoco_val2014_annotations.json"],
    "aokvqa": ["aokvqa/aokvqa_v1p0_val.json"],
    "infoseek": ["infoseek/infoseek_val.jsonl", "infoseek/infoseek_val_qtype.jsonl"],
    "evqa": ["evqa/val.csv"],
}
# Worked by hand from tests/fixtures/*/predictions.jsonl:
EXPECTED = {
    # "motocross": 2 of 10 -> 0.6; "Madagascar!" against ten identical "madagascar", compared as is -> 0.
    "okvqa": ({"overall": 30.0, "answer_type/other": 30.0, "question_type/eight": 60.0, "question_type/four": 0.0},
              "score", [0.6, 0.0]),
    # DA: "Cigarette" matches no "cigarette" (0), "30" 1 of 10 (1/3), the third is difficult (left out).
    # MC: index 3 right, "thirty" right, index 0 ("a cab") wrong although "cab" is correct.
    "aokvqa": ({"direct_answer": 100 / 6, "direct_answer/questions": 2.0, "multiple_choice": 200 / 3,
                "multiple_choice/questions": 3.0}, "multiple_choice", [1.0, 1.0, 0.0]),
    # "Lyons." right, 330 in [291.6, 356.4] right | Time "1938" vs "1937" wrong, 1,250,000 in range right:
    # unseen_question 100, unseen_entity 50, final 2 / (1/100 + 1/50) = 66.67.
    "infoseek": ({"final_score": 66.67, "unseen_question/score": 100.0, "unseen_question/score_time": 0.0,
                  "unseen_question/score_num": 100.0, "unseen_question/score_string": 100.0,
                  "unseen_entity/score": 50.0, "unseen_entity/score_time": 0.0, "unseen_entity/score_num": 100.0,
                  "unseen_entity/score_string": 0.0}, "score", [1.0, 1.0, 0.0, 1.0]),
    # "1.5 m." right; "Horses and oxen" IoU 1; "oxen, cows, goats" IoU 1/4; "The answer is Lisbon" right.
    "evqa": ({"exact_match_stage/overall": 75.0, "exact_match_stage/templated": 100.0,
              "exact_match_stage/automatic": 100.0, "exact_match_stage/multi_answer": 50.0},
             "exact_match_stage", [1.0, 1.0, 0.0, 1.0]),
}


def score_args(name: str, predictions: Path | None = None) -> list[str]:
    return ["score", "--format", name, "--annotations", *(str(FIXTURES / p) for p in ANNOTATIONS[name]),
            "--predictions", str(predictions or FIXTURES / name / "predictions.jsonl")]


@pytest.mark.parametrize("name", sorted(ANNOTATIONS))
def test_score_prints_the_official_aggregates_and_writes_per_example_scores(name, tmp_path, capsys):
    aggregates, per_example_key, per_example = EXPECTED[name]
    out = tmp_path / "per_example.jsonl"
    assert main([*score_args(name), "--per-example", str(out)]) == 0
    printed = capsys.readouterr().out
    for metric, value in aggregates.items():
        number = f"{value:.0f}" if metric.endswith("/questions") else f"{value:.2f}"
        assert any(line.split() == [metric, number] for line in printed.splitlines()), (metric, printed)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row[per_example_key] for row in rows] == pytest.approx(per_example)
    assert f"scored {len(per_example)} of {len(per_example)} annotated questions" in printed


def test_evqa_scores_are_labelled_as_the_exact_match_stage(capsys):
    assert main(score_args("evqa")) == 0
    assert "EXACT-MATCH STAGE ONLY" in capsys.readouterr().out


def test_okvqa_pre_2021_rules_are_a_labelled_option(capsys):
    # The older code normalises the prediction always: "Madagascar!" -> "madagascar", all 10 match -> 1.0.
    assert main([*score_args("okvqa"), "--okvqa-rules", "pre-2021"]) == 0
    printed = capsys.readouterr().out
    assert "before its 2021-03-11 fix" in printed and ["overall", "80.00"] in [line.split() for line in printed.splitlines()]


def test_a_question_without_prediction_is_an_error_unless_partial(tmp_path, capsys):
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"question_id": 2971475, "prediction": "race"}\n{"question_id": 1, "prediction": "x"}\n')
    assert main(score_args("okvqa", predictions)) == 2
    assert ("1 of 2 annotated questions have no prediction (first: '3932255'); 1 predictions name a question id "
            "the annotations do not have (first: '1')") in capsys.readouterr().err
    assert main([*score_args("okvqa", predictions), "--partial"]) == 0
    printed = capsys.readouterr().out
    assert "overall" in printed and "100.00" in printed and "scored 1 of 2 annotated questions" in printed


def test_bad_prediction_lines_are_named_by_file_and_line(tmp_path, capsys):
    predictions = tmp_path / "p.jsonl"
    predictions.write_text('{"question_id": 2971475, "prediction": "race"}\n\n{"question_id": "2971475", '
                           '"prediction": "ride"}\n')
    assert main(score_args("okvqa", predictions)) == 2
    assert f"{predictions}:3: question_id '2971475' already predicted at {predictions}:1" in capsys.readouterr().err
    predictions.write_text('{"question_id": 2971475, "prediction": "race"}\n{"question_id": 3932255, "choice": 1}\n')
    assert main(score_args("okvqa", predictions)) == 2
    assert f"{predictions}:2: missing field 'prediction'" in capsys.readouterr().err
    predictions.write_text('{"question_id": 2971475, "prediction": "race"\n')
    assert main(score_args("okvqa", predictions)) == 2
    assert f"{predictions}:1: not a JSON record" in capsys.readouterr().err


def test_a_setting_given_for_only_some_questions_is_an_error_unless_partial(tmp_path, capsys):
    predictions = tmp_path / "p.jsonl"
    lines = FIXTURES.joinpath("aokvqa/predictions.jsonl").read_text().splitlines()
    predictions.write_text("\n".join([lines[0].replace(', "choice": 3', ""), *lines[1:]]) + "\n")
    assert main(score_args("aokvqa", predictions)) == 2
    assert f"{predictions}:1: no 'choice', which {predictions}:2 has" in capsys.readouterr().err
    assert main([*score_args("aokvqa", predictions), "--partial"]) == 0
    assert any(line.split() == ["multiple_choice/questions", "2"] for line in capsys.readouterr().out.splitlines())


def test_wrong_annotation_files_are_named(capsys):
    assert main(["score", "--format", "infoseek", "--annotations", str(FIXTURES / "infoseek/infoseek_val.jsonl"),
                 str(FIXTURES / "infoseek/infoseek_val.jsonl"), "--predictions",
                 str(FIXTURES / "infoseek/predictions.jsonl")]) == 2
    assert "got 2 question file(s) and 0 type file(s)" in capsys.readouterr().err
    assert main(["score", "--format", "okvqa", "--annotations", str(FIXTURES / "okvqa/predictions.jsonl"),
                 "--predictions", str(FIXTURES / "okvqa/predictions.jsonl")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_eval_reports_the_official_scores_of_converted_benchmark_data():
    references = read_aokvqa_references(FIXTURES / "aokvqa/aokvqa_v1p0_val.json")
    answers = {"22jbM6gDxdaMaunuzgrsBB": "cigarette", "2SdfXCaSgH5UrmeqpVxxa9": "30th", "22MexNkBPpdZGX6sxbxVBH": "Cab"}
    records = [{"setting": "trained", "id": qid, "answer": answer, "answers": references[qid].direct_answers,
                "reward": 0.0, "gold": [], "retrieved": [], "selected": [], "query": "q"}
               for qid, answer in answers.items()]
    metrics = compare_settings(records, (benchmark("aokvqa"), references))["trained"]
    # DA: 1.0 and 1/3 (the difficult third question left out): 66.67. MC: "cigarette" is option 3 (right);
    # "30th" names no option (wrong); "Cab" fits both "a cab" and "cab", so no option (wrong): 33.33.
    assert metrics["official/direct_answer"] == pytest.approx(200 / 3)
    assert metrics["official/multiple_choice"] == pytest.approx(100 / 3)
    assert "exact_match" in metrics  # the lenient metrics stay beside the official ones
