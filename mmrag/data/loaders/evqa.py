"""Encyclopedic-VQA questions (one CSV per split) into internal `Question`s and official references.

Columns used: question, answer, dataset_image_ids, question_type, wikipedia_url,
wikipedia_title, evidence, encyclopedic_vqa_split, and evidence_section_id where present.
In `answer`, `|` separates the answers of different annotators and `&&` the parts of a
multi_answer question's list; `dataset_image_ids` (up to five images of the question),
`wikipedia_url` and `evidence_section_id` hold `|`-separated lists. The gold documents are
the evidence sections in the ids `mmrag.data.loaders.wiki_kb` gives them (URL#SECTION).

Each (question, image) pair is one example, as in E-VQA's own count, with the question id
`evqa_question_id`: "evqa-SPLIT-ROW-IMAGE_ID", ROW the 0-based data row of the CSV (header
not counted). Its `EvqaReference` keeps the raw answer and the question type for the
official score (`mmrag.metrics.evqa`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, with_extensions
from mmrag.data.loaders.wiki_kb import section_doc_id
from mmrag.metrics.evqa import ALTERNATIVE_SEPARATOR, PART_SEPARATOR, EvqaReference

REQUIRED_COLUMNS = ("question", "answer", "dataset_image_ids", "question_type", "wikipedia_url",
                    "wikipedia_title", "evidence", "encyclopedic_vqa_split")


def load_evqa(path: str | Path, images: ImageRoot,
              source_split: str | None = None) -> tuple[list[Question], list[EvqaReference]]:
    """One question per (row, image) whose image was found (rows of `source_split` only, when given),
    and their references."""
    path = Path(path)
    rows = list(_rows(path))
    splits = {row["encyclopedic_vqa_split"] for _, _, row in rows}
    if source_split is not None and source_split not in splits:
        raise LoaderError(f"{path}: source split {source_split!r} is not in this file; its encyclopedic_vqa_split "
                          f"values are: {', '.join(sorted(splits))}")
    questions, references = [], []
    for row_index, where, row in rows:
        if source_split is not None and row["encyclopedic_vqa_split"] != source_split:
            continue
        answers = split_answer(row["answer"])
        urls = [url.strip() for url in row["wikipedia_url"].split("|") if url.strip()]
        gold = _gold_sections(row, urls, where)
        for image_id, reference in _examples(row_index, row):
            image = images.open(with_extensions(image_id), f"{where} (image {image_id})")
            if image is None:
                continue
            questions.append(Question(id=reference.question_id, image_source=image, question=row["question"],
                                      answers=answers, entity_id=urls[0] if urls else "", gold_doc_ids=gold))
            references.append(reference)
    return questions, references


def read_evqa_references(path: str | Path) -> dict[str, EvqaReference]:
    """Question id -> reference for every (row, image) of a CSV as distributed."""
    return {reference.question_id: reference
            for row_index, _, row in _rows(Path(path)) for _, reference in _examples(row_index, row)}


def evqa_question_id(split: str, row_index: int, image_id: str) -> str:
    return f"evqa-{split}-{row_index}-{image_id}"


def split_answer(answer: str) -> list[str]:
    """Internal references of an E-VQA answer: one per annotator's answer ("a|b"), a list's parts joined
    by ", " ("a&&b" -> "a, b")."""
    return [", ".join(part.strip() for part in alternative.split(PART_SEPARATOR) if part.strip())
            for alternative in answer.split(ALTERNATIVE_SEPARATOR)]


def _rows(path: Path) -> Iterator[tuple[int, str, dict]]:
    """(0-based data row, FILE:LINE, row) for every row, checked."""
    with _open(path) as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REQUIRED_COLUMNS if name not in (reader.fieldnames or [])]
        if missing:
            raise LoaderError(f"{path}:1: missing column {missing[0]!r} (required: {', '.join(REQUIRED_COLUMNS)})")
        for row_index, row in enumerate(reader):
            where = f"{path}:{reader.line_num}"
            if None in row or None in row.values():
                raise LoaderError(f"{where}: expected {len(reader.fieldnames)} fields, got a row of a different width")
            for name in ("question", "answer", "dataset_image_ids", "encyclopedic_vqa_split"):
                if not row[name].strip():
                    raise LoaderError(f"{where}: column {name!r} is empty")
            if any(not alternative.strip() for alternative in row["answer"].split(ALTERNATIVE_SEPARATOR)):
                raise LoaderError(f"{where}: column 'answer': {row['answer']!r} has an empty answer between '|'")
            yield row_index, where, row


def _examples(row_index: int, row: dict) -> Iterator[tuple[str, EvqaReference]]:
    """(image id, reference) of each image of the row."""
    image_ids = dict.fromkeys(i.strip() for i in row["dataset_image_ids"].split("|") if i.strip())
    for image_id in image_ids:
        yield image_id, EvqaReference(
            question_id=evqa_question_id(row["encyclopedic_vqa_split"], row_index, image_id),
            question=row["question"], answer=row["answer"], question_type=row["question_type"])


def _gold_sections(row: dict, urls: list[str], where: str) -> list[str]:
    sections = [s.strip() for s in (row.get("evidence_section_id") or "").split("|") if s.strip()]
    if not sections:
        return []
    if len(sections) != len(urls) or not all(s.isdigit() for s in sections):
        raise LoaderError(f"{where}: column 'evidence_section_id': expected one section number per wikipedia_url "
                          f"({len(urls)}), got {row['evidence_section_id']!r}")
    return [section_doc_id(url, int(section)) for url, section in zip(urls, sections)]


def _open(path: Path):
    try:
        return path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read ({exc.strerror})") from None
