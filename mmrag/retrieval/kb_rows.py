"""Which rows of a KB part can be embedded: text present, image (if any) decodable, doc_id sound.

Called by `PartEmbedder` on each part before encoding. A bad row fails naming the file,
row and column (`index.on_bad_row: error`) or is skipped and counted by reason (`skip`);
doc_id problems were found KB-wide beforehand (`mmrag.retrieval.doc_ids`) and arrive with
the rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa
from PIL import Image

from mmrag.data.dataset import decode_image
from mmrag.retrieval.doc_ids import bad_row_error
from mmrag.retrieval.kb_parts import KBFile


@dataclass
class UsableRows:
    rows: list[int] = field(default_factory=list)
    """KB row numbers of the usable rows, in order."""
    texts: list[str] = field(default_factory=list)
    images: list[Image.Image | None] = field(default_factory=list)
    """Decoded image of each usable row, None for a text-only one."""
    skipped: Counter[str] = field(default_factory=Counter)
    """The other rows, counted by reason ("column: problem")."""


def _problem(kb: KBFile, record: dict) -> tuple[str, str, Image.Image | None]:
    """(count key, detail) of what is wrong with the row ("", "" when nothing is), and its decoded image."""
    if record["doc_id_problem"]:
        return record["doc_id_problem"], "", None
    text = record["text"]
    if text is None or not text.strip():
        return "text: null or empty", "", None
    if record.get("image") is None:
        return "", "", None
    try:
        return "", "", decode_image(kb.image_bytes(record["image"]))
    except (OSError, ValueError) as exc:
        return "image: undecodable", f" ({exc})", None


def usable_rows(kb: KBFile, batch: pa.Table, on_bad_row: str) -> UsableRows:
    """The rows of `batch` (from `KBFile.rows_to_embed`) that can be embedded; KBRowError in `error` mode."""
    usable = UsableRows()
    for record in batch.to_pylist():
        key, detail, image = _problem(kb, record)
        if not key:
            usable.rows.append(record["row"])
            usable.texts.append(record["text"])
            usable.images.append(image)
        elif on_bad_row == "error":
            column, kind = key.split(": ", 1)
            raise bad_row_error(kb, record["row"], record["doc_id"], f"column {column!r} {kind}{detail}")
        else:
            usable.skipped[key] += 1
    return usable
