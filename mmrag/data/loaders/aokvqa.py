"""A-OKVQA questions (one JSON array per split) into internal `Question`s plus their choices.

Each record: split, image_id, question_id, question, choices (4 strings),
correct_choice_idx, direct_answers (10 strings), rationales. Images are COCO 2017 files,
{image_id:012d}.jpg. The direct answers become the references (scored by
`mmrag.metrics.benchmarks.aokvqa_direct_answer`); the choices, which the internal question
format has no column for, are returned separately and written beside the questions as
choices_{split}.jsonl for multiple-choice accuracy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, read_json_records, require, string_list, with_extensions


@dataclass(frozen=True)
class Choices:
    """The multiple-choice side of one A-OKVQA question."""

    question_id: str
    choices: list[str]
    correct_choice_idx: int


def load_aokvqa(path: str | Path, images: ImageRoot) -> tuple[list[Question], list[Choices]]:
    path = Path(path)
    questions, choices = [], []
    for line, _, record in read_json_records(path):
        where = f"{path}:{line}"
        question_id = require(record, "question_id", str, where)
        if "direct_answers" not in record:
            raise LoaderError(f"{where}: missing field 'direct_answers' (the A-OKVQA test split hides its answers; "
                              "convert the train or val split)")
        answers = string_list(record, "direct_answers", where)
        options = string_list(record, "choices", where)
        correct = require(record, "correct_choice_idx", int, where)
        if not 0 <= correct < len(options):
            raise LoaderError(f"{where}: field 'correct_choice_idx': {correct} is not an index into "
                              f"{len(options)} choices (0..{len(options) - 1})")
        image = images.open(with_extensions(f"{require(record, 'image_id', int, where):012d}"), where)
        if image is None:
            continue
        questions.append(Question(id=question_id, image=image, question=require(record, "question", str, where),
                                  answers=answers))
        choices.append(Choices(question_id, options, correct))
    return questions, choices


def choices_file(split: str) -> str:
    return f"choices_{split}.jsonl"


def write_choices(choices: list[Choices], data_dir: str | Path, split: str) -> Path:
    path = Path(data_dir) / choices_file(split)
    lines = [json.dumps({"id": c.question_id, "choices": c.choices, "correct_choice_idx": c.correct_choice_idx})
             for c in choices]
    path.write_text("".join(line + "\n" for line in lines))
    return path


def read_choices(data_dir: str | Path, split: str) -> dict[str, Choices]:
    """Question id -> choices, from a converted A-OKVQA dataset dir; empty when the dataset has none."""
    path = Path(data_dir) / choices_file(split)
    if not path.is_file():
        return {}
    out = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            record = json.loads(line)
            out[record["id"]] = Choices(record["id"], record["choices"], record["correct_choice_idx"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise LoaderError(f"{path}:{number}: expected {{id, choices, correct_choice_idx}} ({exc})") from None
    return out
