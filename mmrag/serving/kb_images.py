"""The knowledge base's document images by doc id: what `GET /v1/kb/{doc_id}/image` serves.

An answer's evidence carries no images (the reranker drops them: bytes most clients never
show); a client that shows a passage beside its image, such as the demo page, fetches it here.
Read from the index's doc stores (one Arrow IPC file per shard, memory-mapped: only the
images asked for are paged in); the doc id -> (shard, row) table is built on the first request,
from the doc_id columns alone, so a replica that never serves an image never reads them.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pyarrow as pa
from PIL import Image

from mmrag.retrieval.manifest import Manifest

UNKNOWN_MEDIA_TYPE = "application/octet-stream"


class KbImages:
    """The encoded image of each document of the index at `index_dir`, looked up by doc id."""

    def __init__(self, index_dir: str | Path):
        self.index_dir = Path(index_dir)
        self._lock = threading.Lock()
        self._stores: list[pa.Table] | None = None
        self._rows: dict[str, tuple[int, int]] = {}

    def image(self, doc_id: str) -> bytes | None:
        """The document's encoded image as stored in the KB; None for a text-only document, KeyError for an
        unknown doc id."""
        self._open()
        shard, row = self._rows[doc_id]
        return self._stores[shard].column("image")[row].as_py()

    def _open(self) -> None:
        with self._lock:  # requests arrive in worker threads: the table is built once
            if self._stores is not None:
                return
            manifest = Manifest.read(self.index_dir)
            stores = [pa.ipc.open_file(pa.memory_map(str(self.index_dir / entry.docstore_file))).read_all()
                      for entry in manifest.shards]
            for shard, store in enumerate(stores):
                doc_ids = store.column("doc_id").to_pylist()
                self._rows.update((doc_id, (shard, row)) for row, doc_id in enumerate(doc_ids))
            self._stores = stores


def media_type(image: bytes) -> str:
    """The MIME type of encoded image bytes, from their header (PNG, JPEG, ...)."""
    try:
        with Image.open(io.BytesIO(image)) as probe:
            return Image.MIME.get(probe.format, UNKNOWN_MEDIA_TYPE)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return UNKNOWN_MEDIA_TYPE
