"""InfoSeek questions (JSON lines) into internal `Question`s and official references.

One record per line: data_id, image_id (an OVEN image, stored as IMAGE_ID.jpg somewhere
under the image root), question, answer (list of strings), answer_eval (the strings, or for
numerical questions the ranges `{"wikidata": 1.9, "range": [1.7, 2.1]}`, that count as
correct), data_split (val_unseen_question, val_unseen_entity, ...), and, in the "with KB"
release, entity_id. The question types (String, Numerical, Time) come in a separate file,
one {"data_id", "question_type"} per line (infoseek_val_qtype.jsonl), or as a question_type
field of each record.

The internal references are the answer_eval strings, numeric ranges written "low - high"
in plain decimals (what the lenient training reward reads); `InfoseekReference` keeps
answer_eval as distributed, the question type and the split label for the official score
(`mmrag.metrics.infoseek`).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from pathlib import Path
from typing import Any

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, read_jsonl, require, string_list, with_extensions
from mmrag.metrics.infoseek import InfoseekReference


def load_infoseek(path: str | Path, images: ImageRoot, source_split: str | None = None,
                  question_types_path: str | Path | None = None) -> tuple[list[Question], list[InfoseekReference]]:
    """Questions of an InfoSeek jsonl file (only those whose data_split is `source_split`, when given), and
    the references of those that have answer_eval."""
    path = Path(path)
    records = read_jsonl(path)
    splits = {require(record, "data_split", str, f"{path}:{line}") for line, record in records}
    if source_split is not None and source_split not in splits:
        raise LoaderError(f"{path}: source split {source_split!r} is not in this file; its data_split values are: "
                          f"{', '.join(sorted(splits))}")
    question_types = read_question_types(question_types_path) if question_types_path is not None else None
    questions, references = [], []
    for line, record in records:
        where = f"{path}:{line}"
        if source_split is not None and record["data_split"] != source_split:
            continue
        reference = _reference(record, question_types, where)
        image = images.open(with_extensions(require(record, "image_id", str, where)), where)
        if image is None:
            continue
        questions.append(Question(
            id=require(record, "data_id", str, where),
            image_source=image,
            question=require(record, "question", str, where),
            answers=_answer_strings(record, where),
            entity_id=record.get("entity_id") or "",
        ))
        if reference is not None:
            references.append(reference)
    return questions, references


def read_question_types(path: str | Path) -> dict[str, str]:
    """data_id -> question type, from a question-type file (infoseek_val_qtype.jsonl)."""
    path = Path(path)
    types = {}
    for line, record in read_jsonl(path):
        where = f"{path}:{line}"
        types[require(record, "data_id", str, where)] = require(record, "question_type", str, where)
    return types


def read_infoseek_references(paths: Iterable[str | Path]) -> dict[str, InfoseekReference]:
    """data_id -> reference, from the questions file and, unless its records carry question_type, the
    question-type file, as distributed (in any order)."""
    question_files, type_files = [], []
    for path in map(Path, paths):
        records = read_jsonl(path)
        is_questions = any(isinstance(r, dict) and ("answer_eval" in r or "question" in r) for _, r in records)
        (question_files if is_questions else type_files).append((path, records))
    if len(question_files) != 1 or len(type_files) > 1:
        raise LoaderError("infoseek: --annotations takes the questions file (infoseek_val.jsonl: data_id, question, "
                          "answer_eval, data_split) and the question-type file (infoseek_val_qtype.jsonl: data_id, "
                          f"question_type); got {len(question_files)} question file(s) and {len(type_files)} type "
                          "file(s)")
    (path, records) = question_files[0]
    question_types = read_question_types(type_files[0][0]) if type_files else None
    references: dict[str, InfoseekReference] = {}
    for line, record in records:
        where = f"{path}:{line}"
        reference = _reference(record, question_types, where)
        if reference is None:
            raise LoaderError(f"{where}: missing field 'answer_eval' (the test split hides its answers)")
        if reference.question_type is None:
            raise LoaderError(f"{where}: data_id {reference.question_id!r} has no question type; pass the "
                              "question-type file (infoseek_val_qtype.jsonl) too")
        if reference.question_id in references:
            raise LoaderError(f"{where}: data_id {reference.question_id!r} appears twice")
        references[reference.question_id] = reference
    return references


def plain_number(value: float) -> str:
    """A number in plain decimals, as short as it reads back exactly: 1111111.0 -> "1111111", 0.5 -> "0.5"."""
    text = f"{Decimal(repr(float(value))):f}"
    return text[:-2] if text.endswith(".0") else text


def _answer_eval(record: dict, where: str) -> list[Any] | None:
    value = record.get("answer_eval")
    if value is None:
        return None
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items or not all(_is_answer_item(item) for item in items):
        raise LoaderError(f"{where}: field 'answer_eval': each item must be a non-empty string or "
                          f'{{"range": [low, high]}}, got {value!r}')
    return items


def _is_answer_item(item: Any) -> bool:
    if isinstance(item, str):
        return bool(item.strip())
    bounds = item.get("range") if isinstance(item, dict) else None
    return (isinstance(bounds, list) and len(bounds) == 2
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds))


def _reference(record: dict, question_types: dict[str, str] | None, where: str) -> InfoseekReference | None:
    data_id = require(record, "data_id", str, where)
    answer_eval = _answer_eval(record, where)
    if answer_eval is None:
        return None
    if question_types is None:
        question_type = record.get("question_type")
    elif data_id in question_types:
        question_type = question_types[data_id]
    else:
        raise LoaderError(f"{where}: data_id {data_id!r} has no entry in the question-type file")
    return InfoseekReference(question_id=data_id, answer_eval=answer_eval,
                             question_type=question_type if isinstance(question_type, str) else None,
                             data_split=require(record, "data_split", str, where))


def _answer_strings(record: dict, where: str) -> list[str]:
    """answer_eval when present (strings, and ranges as "low - high"), else answer; duplicates dropped."""
    answer_eval = _answer_eval(record, where)
    if answer_eval is None:
        return list(dict.fromkeys(string_list(record, "answer", where)))
    strings = [item if isinstance(item, str)
               else " - ".join(plain_number(bound) for bound in sorted(item["range"])) for item in answer_eval]
    return list(dict.fromkeys(strings))
