"""InfoSeek questions (JSON lines) into internal `Question`s.

One record per line: data_id, image_id (an OVEN image, stored as IMAGE_ID.jpg somewhere
under the image root), question, answer (list of strings), answer_eval (the strings or
numeric ranges `{"wikidata": 1.9, "range": [1.7, 2.1]}` that count as correct), data_split,
and, in the "with KB" release, entity_id. Numeric ranges become "low - high" references,
which `mmrag.metrics.answers.relaxed_accuracy` reads back as ranges.
"""

from __future__ import annotations

from pathlib import Path

from mmrag.data.dataset import Question
from mmrag.data.loaders import ImageRoot, LoaderError, read_jsonl, require, string_list, with_extensions


def load_infoseek(path: str | Path, images: ImageRoot, source_split: str | None = None) -> list[Question]:
    """Questions of an InfoSeek jsonl file; `source_split` keeps only records with that data_split."""
    path = Path(path)
    questions = []
    for line, record in read_jsonl(path):
        where = f"{path}:{line}"
        split = require(record, "data_split", str, where)
        if source_split is not None and split != source_split:
            continue
        image = images.open(with_extensions(require(record, "image_id", str, where)), where)
        if image is None:
            continue
        questions.append(Question(
            id=require(record, "data_id", str, where),
            image=image,
            question=require(record, "question", str, where),
            answers=_references(record, where),
            entity_id=record.get("entity_id") or "",
        ))
    return questions


def _references(record: dict, where: str) -> list[str]:
    """answer_eval when present (strings and ranges), else answer; duplicates dropped, order kept."""
    if record.get("answer_eval") is None:
        return list(dict.fromkeys(string_list(record, "answer", where)))
    references = [_eval_reference(item, where) for item in require(record, "answer_eval", list, where)]
    return list(dict.fromkeys(references))


def _eval_reference(item, where: str) -> str:
    if isinstance(item, str) and item.strip():
        return item
    if isinstance(item, dict) and "range" in item:
        bounds = item["range"]
        if (isinstance(bounds, list) and len(bounds) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)):
            low, high = sorted(bounds)
            return f"{low:g} - {high:g}"
    raise LoaderError(f"{where}: field 'answer_eval': each item must be a non-empty string or "
                      f'{{"range": [low, high]}}, got {item!r}')
