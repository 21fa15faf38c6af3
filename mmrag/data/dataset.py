"""The internal dataset format: a knowledge base and question splits as Parquet, read and written here.

Every data source ends up in this format (the synthetic generator writes it; converters for
public KB-VQA sets would too), and every later stage (index build, training, evaluation,
serving tests) reads it only through `load_kb` and `load_questions`:

    kb.parquet               doc_id, title, text, image (PNG/JPEG bytes, or a path relative
                             to the data dir; null for text-only docs), entity_id
    questions_{split}.parquet  id, image, question, answers list<string>, entity_id, gold_doc_ids list<string>,
                             and optionally kind (visual, one-fact or two-fact: the knowledge the question
                             demands; world v2 writes it; files without it load as kind "unknown")

Readers validate as they go and name the file, row and column of anything they cannot use.
`load_questions` leaves every image in its file (a `StoredImage`: file and row): a question's
image is read and decoded where it is used (a stage actor, a learner rank), so the process that
loads a split (the driver) holds its texts only, whatever the images weigh.
"""

from __future__ import annotations

import bisect
import functools
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

VISUAL, ONE_FACT, TWO_FACT = "visual", "one-fact", "two-fact"
KINDS = (VISUAL, ONE_FACT, TWO_FACT)
"""A question's knowledge demand (`kind` column; how each is asked: `mmrag.data.question_kinds`)."""
UNKNOWN_KIND = "unknown"
"""The kind of a question whose data does not record one (v1 synthetic data, converted benchmarks)."""


SCHEMA_VERSION = 1
SPLITS = ("train", "val", "test")
KB_FILE = "kb.parquet"

KB_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("title", pa.string()),
    pa.field("text", pa.string(), nullable=False),
    pa.field("image", pa.binary()),
    pa.field("entity_id", pa.string()),
])
QUESTION_SCHEMA = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("image", pa.binary(), nullable=False),
    pa.field("question", pa.string(), nullable=False),
    pa.field("answers", pa.list_(pa.string()), nullable=False),
    pa.field("entity_id", pa.string()),
    pa.field("gold_doc_ids", pa.list_(pa.string())),
])
KIND_FIELD = pa.field("kind", pa.string())
"""Optional last column of a questions file (`KINDS`)."""
KB_REQUIRED = ("doc_id", "text")
QUESTION_REQUIRED = ("id", "image", "question", "answers")


class DatasetError(ValueError):
    """A dataset file that does not follow the internal format; the message names file, row and column."""


@dataclass
class Doc:
    """One knowledge-base entry: a text passage, optionally with an image."""

    doc_id: str
    title: str
    text: str
    image: Image.Image | None = None
    entity_id: str = ""


@dataclass(frozen=True, slots=True)
class StoredImage:
    """An image left in a questions file: row `row` of its `image` column (encoded bytes, or a path relative to
    the file's directory), read and decoded by `load` in the process that uses it."""

    file: str
    row: int

    def load(self) -> Image.Image:
        return _decoded_cell(Path(self.file), self.row, _image_cell(self.file, self.row))


ImageSource = Image.Image | StoredImage
"""A question's image: decoded already (built in memory), or left in its file."""


def resolve_image(source: ImageSource) -> Image.Image:
    return source.load() if isinstance(source, StoredImage) else source


@dataclass(slots=True)
class Question:
    """An image plus a question whose answer is in the knowledge base, not in the image."""

    id: str
    image_source: ImageSource
    """The image, or where it is stored (`image` decodes it)."""
    question: str
    answers: list[str]
    entity_id: str = ""
    gold_doc_ids: list[str] = field(default_factory=list)
    """Passages the answer needs (none for a visual question: the image suffices)."""
    kind: str = UNKNOWN_KIND
    """visual, one-fact, two-fact, or unknown where the data does not say (v1 data: all one-fact)."""

    @property
    def image(self) -> Image.Image:
        """The decoded image (read from its file each time when stored: decode where it is used)."""
        return resolve_image(self.image_source)


def questions_file(split: str) -> str:
    if split not in SPLITS:
        raise DatasetError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    return f"questions_{split}.parquet"


def encode_image(image: Image.Image) -> bytes:
    """PNG bytes (lossless and deterministic, so the same data writes the same file)."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def decode_image(data: bytes) -> Image.Image:
    """An RGB image from encoded bytes (any format PIL reads); ValueError if they are not an image."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f"not a decodable image ({len(data)} bytes: {exc})") from None


def write_kb(docs: list[Doc], data_dir: str | Path) -> Path:
    path = Path(data_dir) / KB_FILE
    columns = {
        "doc_id": [d.doc_id for d in docs],
        "title": [d.title for d in docs],
        "text": [d.text for d in docs],
        "image": [None if d.image is None else encode_image(d.image) for d in docs],
        "entity_id": [d.entity_id for d in docs],
    }
    pq.write_table(pa.table(columns, schema=KB_SCHEMA), path)
    return path


def write_questions(questions: list[Question], data_dir: str | Path, split: str) -> Path:
    path = Path(data_dir) / questions_file(split)
    columns = {
        "id": [q.id for q in questions],
        "image": [encode_image(q.image) for q in questions],
        "question": [q.question for q in questions],
        "answers": [list(q.answers) for q in questions],
        "entity_id": [q.entity_id for q in questions],
        "gold_doc_ids": [list(q.gold_doc_ids) for q in questions],
    }
    schema = QUESTION_SCHEMA
    # Data that records no kind (world v1) keeps the v1 schema, so v1 files stay byte-identical.
    if any(q.kind != UNKNOWN_KIND for q in questions):
        columns["kind"] = [q.kind for q in questions]
        schema = schema.append(KIND_FIELD)
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def load_kb(data_dir: str | Path) -> list[Doc]:
    """Every KB document, images decoded; doc ids must be unique."""
    path = Path(data_dir) / KB_FILE
    rows = _read_rows(path, KB_REQUIRED)
    docs, first_row = [], {}
    for index, row in enumerate(rows.records):
        doc_id = row["doc_id"]
        if doc_id in first_row:
            raise DatasetError(f"{path}: row {index} column 'doc_id': {doc_id!r} already used by row {first_row[doc_id]}")
        first_row[doc_id] = index
        image = None if row.get("image") is None else _decoded_cell(path, index, row["image"])
        docs.append(Doc(row["doc_id"], row.get("title") or "", row["text"], image, row.get("entity_id") or ""))
    return docs


def load_questions(data_dir: str | Path, split: str) -> list[Question]:
    """The questions of one split (train, val or test); each image left in the file (`StoredImage`), so loading
    costs the texts' memory only. A null image is an error here, an undecodable one where it is decoded."""
    path = Path(data_dir) / questions_file(split)
    rows = _read_rows(path, QUESTION_REQUIRED, leave_out="image")
    file = str(path.resolve())
    questions = []
    for index, row in enumerate(rows.records):
        answers = row["answers"]
        if not isinstance(answers, list) or not answers or any(not isinstance(a, str) for a in answers):
            raise DatasetError(
                f"{path}: row {index} column 'answers': expected a non-empty list of strings, got {answers!r}"
            )
        kind = row.get("kind") or UNKNOWN_KIND
        if kind not in (*KINDS, UNKNOWN_KIND):
            raise DatasetError(f"{path}: row {index} column 'kind': expected one of {', '.join(KINDS)} "
                               f"(or null), got {kind!r}")
        questions.append(Question(
            id=row["id"],
            image_source=StoredImage(file, index),
            question=row["question"],
            answers=answers,
            entity_id=row.get("entity_id") or "",
            gold_doc_ids=list(row.get("gold_doc_ids") or []),
            kind=kind,
        ))
    return questions


@dataclass
class _Rows:
    schema: pa.Schema
    records: list[dict[str, Any]]


def _read_rows(path: Path, required: tuple[str, ...], leave_out: str | None = None) -> _Rows:
    """The file's rows, required columns checked for presence and nulls; column `leave_out` is checked but not
    read (its nulls counted from the file's statistics, or one row group at a time where it has none)."""
    if not path.is_file():
        expected = ", ".join([KB_FILE] + [questions_file(split) for split in SPLITS])
        raise DatasetError(f"{path}: file not found (a dataset dir holds {expected})")
    try:
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        missing = [name for name in required if name not in names]
        if missing:
            raise DatasetError(f"{path}: missing column {missing[0]!r} "
                               f"(required: {', '.join(required)}; found: {', '.join(names)})")
        table = parquet.read(columns=[name for name in names if name != leave_out])
        if leave_out is not None:
            _check_no_nulls(path, parquet, leave_out)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from None
    records = table.to_pylist()
    for index, record in enumerate(records):
        for name in required:
            if name != leave_out and record[name] is None:
                raise DatasetError(f"{path}: row {index} column {name!r}: null, but this column is required")
    return _Rows(parquet.schema_arrow, records)


def _check_no_nulls(path: Path, parquet: pq.ParquetFile, name: str) -> None:
    column = parquet.schema_arrow.names.index(name)
    first = 0
    for group in range(parquet.metadata.num_row_groups):
        meta = parquet.metadata.row_group(group)
        stats = meta.column(column).statistics
        if stats is None or not stats.has_null_count or stats.null_count:
            values = parquet.read_row_group(group, columns=[name]).column(0)
            if values.null_count:
                row = first + values.is_null().to_pylist().index(True)
                raise DatasetError(f"{path}: row {row} column {name!r}: null, but this column is required")
        first += meta.num_rows


def _decoded_cell(path: Path, row: int, value: Any) -> Image.Image:
    """A cell of an `image` column decoded: encoded bytes, or a path relative to the file's directory."""
    try:
        return decode_image((path.parent / value).read_bytes() if isinstance(value, str) else value)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: row {row} column 'image': {exc}") from None


def read_table(path: str | Path, columns: list[str] | None = None) -> pa.Table:
    """A dataset Parquet file's table (`columns` only, if given); DatasetError naming the file if it is missing or
    not readable (truncated, corrupted)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from None


@functools.lru_cache(maxsize=8)
def _row_group_starts(file: str, version: int) -> list[int]:
    meta = pq.ParquetFile(file).metadata
    starts = [0]
    for group in range(meta.num_row_groups):
        starts.append(starts[-1] + meta.row_group(group).num_rows)
    return starts


@functools.lru_cache(maxsize=4)
def _image_group(file: str, version: int, group: int) -> pa.Array:
    """One row group's `image` column (the unit Parquet reads), kept for the next rows a process decodes."""
    return pq.ParquetFile(file).read_row_group(group, columns=["image"]).column(0).combine_chunks()


def _image_cell(file: str, row: int) -> Any:
    try:
        version = os.stat(file).st_mtime_ns  # a file rewritten in place is read anew
        starts = _row_group_starts(file, version)
        if not 0 <= row < starts[-1]:
            raise DatasetError(f"{file}: row {row} column 'image': no such row (the file has {starts[-1]})")
        group = bisect.bisect_right(starts, row) - 1
        return _image_group(file, version, group)[row - starts[group]].as_py()
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(f"{file}: row {row} column 'image': not readable ({exc})") from None
