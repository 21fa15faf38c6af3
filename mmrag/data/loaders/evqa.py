"""Encyclopedic-VQA questions (one CSV per split) into internal `Question`s.

Columns used: question, answer, dataset_image_ids, question_type, wikipedia_url,
wikipedia_title, evidence, encyclopedic_vqa_split, and evidence_section_id where present.
In `answer`, `|` separates acceptable alternatives and `&&` the parts of a multi-answer
question; `dataset_image_ids`, `wikipedia_url` and `evidence_section_id` hold `|`-separated
lists. The first image id names the image (IMAGE_ID.jpg under the image root). The gold
documents are the evidence sections in the ids `mmrag.data.loaders.wiki_kb` gives them
(URL#SECTION).
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, with_extensions
from mmrag.data.loaders.wiki_kb import section_doc_id

REQUIRED_COLUMNS = ("question", "answer", "dataset_image_ids", "question_type", "wikipedia_url",
                    "wikipedia_title", "evidence", "encyclopedic_vqa_split")
MAX_REFERENCES = 16
"""A multi-answer question yields one reference per combination of alternatives; at most this many."""


def load_evqa(path: str | Path, images: ImageRoot, source_split: str | None = None) -> list[Question]:
    """Questions of an E-VQA csv; `source_split` keeps only rows with that encyclopedic_vqa_split."""
    path = Path(path)
    questions = []
    with _open(path) as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REQUIRED_COLUMNS if name not in (reader.fieldnames or [])]
        if missing:
            raise LoaderError(f"{path}:1: missing column {missing[0]!r} (required: {', '.join(REQUIRED_COLUMNS)})")
        for row_number, row in enumerate(reader):
            where = f"{path}:{reader.line_num}"
            if None in row or any(row[name] is None for name in REQUIRED_COLUMNS):
                raise LoaderError(f"{where}: expected {len(reader.fieldnames)} fields, got a row of a different width")
            if source_split is not None and row["encyclopedic_vqa_split"] != source_split:
                continue
            question = _question(row, row_number, images, where)
            if question is not None:
                questions.append(question)
    return questions


def split_answer(answer: str) -> list[str]:
    """References of an E-VQA answer: alternatives ("a|b"); for parts ("a&&b"), every combination "a, b"."""
    parts = [[alt.strip() for alt in part.split("|") if alt.strip()] for part in answer.split("&&")]
    if not all(parts):
        return []
    combinations = itertools.islice(itertools.product(*parts), MAX_REFERENCES)
    return list(dict.fromkeys(", ".join(combo) for combo in combinations))


def _question(row: dict, row_number: int, images: ImageRoot, where: str) -> Question | None:
    for name in ("question", "answer", "dataset_image_ids"):
        if not row[name].strip():
            raise LoaderError(f"{where}: column {name!r} is empty")
    answers = split_answer(row["answer"])
    if not answers:
        raise LoaderError(f"{where}: column 'answer': {row['answer']!r} has an empty alternative or part")
    image = images.open(with_extensions(row["dataset_image_ids"].split("|")[0].strip()), where)
    if image is None:
        return None
    urls = [url.strip() for url in row["wikipedia_url"].split("|") if url.strip()]
    return Question(id=f"evqa-{row['encyclopedic_vqa_split']}-{row_number}", image=image, question=row["question"],
                    answers=answers, entity_id=urls[0] if urls else "", gold_doc_ids=_gold_sections(row, urls, where))


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
