"""OK-VQA questions (a questions JSON plus an annotations JSON) into internal `Question`s.

The questions file holds {"data_subtype": "val2014", "questions": [{image_id, question,
question_id}]}; the annotations file {"annotations": [{question_id, answers: [{answer,
...} x 10]}]}. Images are COCO files, COCO_{data_subtype}_{image_id:012d}.jpg (or the bare
{image_id:012d}.jpg of later COCO releases). The ten annotator answers are kept as the
references, so `vqa_accuracy` gets its official 10-annotator form.
"""

from __future__ import annotations

from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, read_json_records, require, with_extensions


def load_okvqa(questions_path: str | Path, annotations_path: str | Path, images: ImageRoot) -> list[Question]:
    questions_path, annotations_path = Path(questions_path), Path(annotations_path)
    answers = _answers_by_question(annotations_path)
    subtype = _data_subtype(questions_path)
    questions = []
    for line, _, record in read_json_records(questions_path, key="questions"):
        where = f"{questions_path}:{line}"
        question_id = require(record, "question_id", int, where)
        image_id = require(record, "image_id", int, where)
        if question_id not in answers:
            raise LoaderError(f"{where}: question_id {question_id} has no entry in {annotations_path}")
        names = with_extensions(f"COCO_{subtype}_{image_id:012d}") + with_extensions(f"{image_id:012d}")
        image = images.open(names, where)
        if image is None:
            continue
        questions.append(Question(id=str(question_id), image=image, question=require(record, "question", str, where),
                                  answers=answers[question_id]))
    return questions


def _answers_by_question(path: Path) -> dict[int, list[str]]:
    answers = {}
    for line, _, record in read_json_records(path, key="annotations"):
        where = f"{path}:{line}"
        question_id = require(record, "question_id", int, where)
        items = require(record, "answers", list, where)
        texts = [item.get("answer") if isinstance(item, dict) else None for item in items]
        if any(not isinstance(text, str) or not text.strip() for text in texts):
            raise LoaderError(f"{where}: field 'answers': expected objects with a non-empty 'answer', got {items!r}")
        answers[question_id] = texts
    return answers


def _data_subtype(path: Path) -> str:
    """The COCO image folder name the questions refer to ("val2014"), part of each image's file name."""
    subtype = next((value for _, key, value in read_json_records(path) if key == "data_subtype"), None)
    if not isinstance(subtype, str) or not subtype:
        raise LoaderError(f"{path}: top-level 'data_subtype' must be a string like 'val2014', got {subtype!r}")
    return subtype
