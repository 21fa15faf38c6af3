"""OK-VQA questions (a questions JSON plus an annotations JSON) into internal `Question`s and official references.

The questions file holds {"data_subtype": "val2014", "questions": [{image_id, question,
question_id}]}; the annotations file {"annotations": [{question_id, question_type,
answer_type, answers: [{answer, answer_id, ...} x 10]}]}. Images are COCO files,
COCO_{data_subtype}_{image_id:012d}.jpg (or the bare {image_id:012d}.jpg of later COCO
releases). The ten annotator answers are the internal references; the official score
(`mmrag.metrics.okvqa`) also needs each answer record's other fields and the two type labels,
which `OkvqaReference` keeps.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, json_records, read_json, record_where, require, with_extensions
from mmrag.metrics.okvqa import OkvqaReference


def load_okvqa(questions_path: str | Path, annotations_path: str | Path,
               images: ImageRoot) -> tuple[list[Question], list[OkvqaReference]]:
    """The questions whose image was found, and their references, in the questions file's order."""
    questions_path, annotations_path = Path(questions_path), Path(annotations_path)
    references = read_okvqa_references(annotations_path)
    data = read_json(questions_path)
    subtype = _data_subtype(data, questions_path)
    questions, kept = [], []
    for index, record in enumerate(json_records(data, questions_path, key="questions")):
        where = record_where(questions_path, index, record, "question_id")
        question_id = str(require(record, "question_id", int, where))
        image_id = require(record, "image_id", int, where)
        if question_id not in references:
            raise LoaderError(f"{where}: question_id {question_id} has no entry in {annotations_path}")
        names = with_extensions(f"COCO_{subtype}_{image_id:012d}") + with_extensions(f"{image_id:012d}")
        image = images.open(names, where)
        if image is None:
            continue
        reference = references[question_id]
        questions.append(Question(id=question_id, image_source=image, question=require(record, "question", str, where),
                                  answers=list(reference.answers)))
        kept.append(reference)
    return questions, kept


def read_okvqa_references(path: str | Path) -> dict[str, OkvqaReference]:
    """Question id -> reference, from an annotations file as distributed."""
    path = Path(path)
    references: dict[str, OkvqaReference] = {}
    for index, record in enumerate(json_records(read_json(path), path, key="annotations")):
        where = record_where(path, index, record, "question_id")
        question_id = str(require(record, "question_id", int, where))
        if question_id in references:
            raise LoaderError(f"{where}: question_id {question_id} is annotated twice")
        items = require(record, "answers", list, where)
        if not all(isinstance(item, dict) and isinstance(item.get("answer"), str) for item in items):
            raise LoaderError(f"{where}: field 'answers': expected objects with a string 'answer', got {items!r}")
        references[question_id] = OkvqaReference(
            question_id=question_id,
            answers=[item["answer"] for item in items],
            annotators=[json.dumps({k: v for k, v in item.items() if k != "answer"}, sort_keys=True)
                        for item in items],
            question_type=require(record, "question_type", str, where),
            answer_type=require(record, "answer_type", str, where),
        )
    return references


def _data_subtype(data, path: Path) -> str:
    """The COCO image folder name the questions refer to ("val2014"), part of each image's file name."""
    subtype = data.get("data_subtype") if isinstance(data, dict) else None
    if not isinstance(subtype, str) or not subtype:
        raise LoaderError(f"{path}: top-level 'data_subtype' must be a string like 'val2014', got {subtype!r}")
    return subtype
