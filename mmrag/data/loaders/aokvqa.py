"""A-OKVQA questions (one JSON array per split) into internal `Question`s and official references.

Each record: split, image_id, question_id, question, choices (4 strings),
correct_choice_idx, direct_answers (10 strings), difficult_direct_answer, rationales.
Images are COCO 2017 files, {image_id:012d}.jpg. The direct answers become the internal
references (what the training reward reads); `AokvqaReference` keeps what the official
direct-answer and multiple-choice scores need (`mmrag.metrics.aokvqa`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import (ImageRoot, LoaderError, json_records, read_json, record_where, require, string_list,
                                with_extensions)
from mmrag.metrics.aokvqa import AokvqaReference


def load_aokvqa(path: str | Path, images: ImageRoot) -> tuple[list[Question], list[AokvqaReference]]:
    """The questions whose image was found, and their references, in file order."""
    questions, references = [], []
    for where, record, reference in _records(Path(path)):
        image = images.open(with_extensions(f"{require(record, 'image_id', int, where):012d}"), where)
        if image is None:
            continue
        questions.append(Question(id=reference.question_id, image_source=image,
                                  question=require(record, "question", str, where),
                                  answers=list(reference.direct_answers)))
        references.append(reference)
    return questions, references


def read_aokvqa_references(path: str | Path) -> dict[str, AokvqaReference]:
    """Question id -> reference, from a split file as distributed."""
    references: dict[str, AokvqaReference] = {}
    for where, _, reference in _records(Path(path)):
        if reference.question_id in references:
            raise LoaderError(f"{where}: question_id {reference.question_id!r} appears twice")
        references[reference.question_id] = reference
    return references


def _records(path: Path) -> Iterator[tuple[str, dict, AokvqaReference]]:
    for index, record in enumerate(json_records(read_json(path), path)):
        where = record_where(path, index, record, "question_id")
        question_id = require(record, "question_id", str, where)
        if "direct_answers" not in record:
            raise LoaderError(f"{where}: missing field 'direct_answers' (the A-OKVQA test split hides its answers; "
                              "use the train or val split)")
        choices = string_list(record, "choices", where)
        correct = require(record, "correct_choice_idx", int, where)
        if not 0 <= correct < len(choices):
            raise LoaderError(f"{where}: field 'correct_choice_idx': {correct} is not an index into "
                              f"{len(choices)} choices (0..{len(choices) - 1})")
        yield where, record, AokvqaReference(
            question_id=question_id,
            direct_answers=string_list(record, "direct_answers", where),
            choices=choices,
            correct_choice_idx=correct,
            difficult_direct_answer=require(record, "difficult_direct_answer", bool, where),
        )
