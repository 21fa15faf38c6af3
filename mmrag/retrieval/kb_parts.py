"""The KB Parquet file cut into parts: the unit of work, and of resuming, of the index build.

First step of `mmrag.retrieval.build`: `KBFile` checks the file's columns and groups its
row groups into parts of about `index.part_rows` rows (a row group is never split, so each
is read once). The embedding stage reads a part's rows with `rows_to_embed` (in-process, or
as a Ray Data read task in `mmrag.actors.index_build`); the doc-store writer reads them again
with `doc_rows`, holding one part at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from mmrag.data.dataset import KB_REQUIRED, DatasetError

KB_OPTIONAL = ("title", "image", "entity_id")


class KBRowError(DatasetError):
    """A KB row (or file) the index cannot use; the message names the file, row and column."""


@dataclass(frozen=True)
class KBPart:
    number: int
    start: int
    """First KB row of the part."""
    stop: int
    """One past its last row."""
    row_groups: tuple[int, ...]
    """The Parquet row groups that hold exactly these rows."""

    @property
    def num_rows(self) -> int:
        return self.stop - self.start


def plan_parts(row_group_sizes: list[int], part_rows: int) -> list[KBPart]:
    """Consecutive row groups packed into parts of at most `part_rows` rows (a bigger group is a part alone)."""
    if part_rows < 1:
        raise ValueError(f"index.part_rows: expected a positive integer, got {part_rows}")
    parts: list[KBPart] = []
    groups: list[int] = []
    start = rows = 0
    for group, size in enumerate(row_group_sizes):
        if groups and rows + size > part_rows:
            parts.append(KBPart(len(parts), start, start + rows, tuple(groups)))
            start, rows, groups = start + rows, 0, []
        if size:
            groups.append(group)
            rows += size
    if groups:
        parts.append(KBPart(len(parts), start, start + rows, tuple(groups)))
    return parts


class KBFile:
    """One KB Parquet file: its columns checked, its parts planned, a part's rows read on demand.

    Holds only paths and the plan, so it pickles cheaply into Ray workers.
    """

    def __init__(self, path: str | Path, part_rows: int) -> None:
        self.path = Path(path)
        try:
            parquet = pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as exc:
            raise KBRowError(f"{self.path}: not a readable Parquet file ({exc})") from None
        schema = parquet.schema_arrow
        missing = [name for name in KB_REQUIRED if name not in schema.names]
        if missing:
            raise KBRowError(f"{self.path}: missing required column {missing[0]!r} (required: "
                             f"{', '.join(KB_REQUIRED)}; optional: {', '.join(KB_OPTIONAL)}; "
                             f"found: {', '.join(schema.names)})")
        self.columns = tuple(name for name in (*KB_REQUIRED, *KB_OPTIONAL) if name in schema.names)
        image_type = schema.field("image").type if "image" in schema.names else pa.binary()
        self.images_are_paths = pa.types.is_string(image_type) or pa.types.is_large_string(image_type)
        sizes = [parquet.metadata.row_group(group).num_rows for group in range(parquet.metadata.num_row_groups)]
        self.num_rows = sum(sizes)
        self.parts = plan_parts(sizes, part_rows)

    def read(self, part: KBPart, columns: tuple[str, ...]) -> pa.Table:
        """The part's rows (those of `columns` the file has), plus `row`: each one's KB row number."""
        try:
            table = pq.ParquetFile(self.path).read_row_groups(list(part.row_groups),
                                                              columns=[c for c in columns if c in self.columns])
        except (pa.ArrowException, OSError) as exc:
            raise KBRowError(f"{self.path}: rows {part.start}-{part.stop - 1}: not a readable Parquet file "
                             f"({exc})") from None
        return table.append_column("row", pa.array(np.arange(part.start, part.stop, dtype=np.int64)))

    def rows_to_embed(self, part: KBPart, doc_id_problems: dict[int, str]) -> pa.Table:
        """Columns row, doc_id, text, image (if any), part, and `doc_id_problem` ("" or why the row is skipped)."""
        table = self.read(part, ("doc_id", "text", "image"))
        problems = [doc_id_problems.get(row, "") for row in range(part.start, part.stop)]
        return (table.append_column("part", pa.array(np.full(part.num_rows, part.number, dtype=np.int64)))
                .append_column("doc_id_problem", pa.array(problems, pa.string())))

    def image_bytes(self, value: bytes | str) -> bytes:
        """A row's encoded image: the cell itself, or the file it names (relative to the KB's folder)."""
        return (self.path.parent / value).read_bytes() if self.images_are_paths else value

    def doc_rows(self, part: KBPart, rows: np.ndarray) -> pa.Table:
        """The KB columns of `rows` (KB row numbers within `part`), image paths replaced by the images' bytes."""
        table = self.read(part, self.columns).take(pa.array(rows - part.start)).drop_columns(["row"])
        if "image" in table.column_names and self.images_are_paths:
            images = [None if value is None else self.image_bytes(value) for value in table.column("image").to_pylist()]
            table = table.set_column(table.schema.get_field_index("image"), "image", pa.array(images, pa.binary()))
        return table
