"""Doc stores: one Arrow IPC file per shard holding each indexed document's payload, in index order.

Written by `write_docstores` in the FAISS stage of the build (one streaming pass over the
embedded parts, one part in memory); read memory-mapped by `ShardSearcher`, which turns a
FAISS row into a `Hit`.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pyarrow as pa

from mmrag.atomic import atomic_file
from mmrag.retrieval.embedded_parts import EmbeddedParts, offsets

DOCSTORE_SCHEMA = pa.schema([
    ("index_id", pa.int64()),
    ("doc_id", pa.string()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("image", pa.binary()),
    ("entity_id", pa.string()),
])


def docstore_rows(docs: pa.Table, index_ids: np.ndarray) -> pa.Table:
    """`docs` in the doc store's schema; absent or null title and entity_id become "" (image: null)."""
    columns = {"index_id": pa.array(index_ids, pa.int64())}
    for field in DOCSTORE_SCHEMA.remove(0):
        if field.name in docs.column_names:
            column = docs.column(field.name).cast(field.type)
            columns[field.name] = column.fill_null("") if field.name in ("title", "entity_id") else column
        elif field.name in ("doc_id", "text"):
            raise ValueError(f"doc rows lack required column {field.name!r} (found: {', '.join(docs.column_names)})")
        else:
            columns[field.name] = pa.nulls(docs.num_rows, field.type) if field.name == "image" else [""] * docs.num_rows
    return pa.table(columns, schema=DOCSTORE_SCHEMA)


def write_docstores(parts: EmbeddedParts, index_dir: Path, names: list[str]) -> list[int]:
    """`NAME.arrow` for each shard name (vector g goes to shard g % S); returns the documents per shard."""
    num_shards = len(names)
    counts = [0] * num_shards
    with ExitStack() as files:
        temporaries = [files.enter_context(atomic_file(index_dir / f"{name}.arrow")) for name in names]
        writers = [files.enter_context(pa.ipc.new_file(str(path), DOCSTORE_SCHEMA)) for path in temporaries]
        for part, first_id in enumerate(offsets(parts)):
            if not parts.sizes[part]:
                continue
            ids = first_id + np.arange(parts.sizes[part], dtype=np.int64)
            rows = docstore_rows(parts.docs(part), ids)
            for shard, writer in enumerate(writers):
                mine = np.flatnonzero(ids % num_shards == shard)
                writer.write_table(rows.take(pa.array(mine)))
                counts[shard] += len(mine)
    return counts
