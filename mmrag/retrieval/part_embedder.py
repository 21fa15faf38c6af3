"""The embedding stage's worker: one KB part in, its vectors persisted, one summary row out.

`PartEmbedder` loads the frozen CLIP encoder once, then for each part (a pyarrow table from
`KBFile.rows_to_embed`) keeps the usable rows (`kb_rows`), embeds them
(`ClipEncoder.encode_documents`, fused by `index.fusion`) and writes them as a staged piece
(`staging`). The same class runs in-process (`mmrag index --local`) and as the Ray Data
actor pool of `mmrag.actors.index_build`, so both paths embed identically. A bad row in `error`
mode comes back as the summary's `error` instead of an exception, so the driver can stop
the build with the row's own message.
"""

from __future__ import annotations

import json

import pyarrow as pa

from mmrag.config import EncoderConfig
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.retrieval.build_report import peak_rss_mb
from mmrag.retrieval.kb_parts import KBFile, KBRowError
from mmrag.retrieval.kb_rows import usable_rows
from mmrag.retrieval.staging import Staging

SUMMARY_SCHEMA = pa.schema([
    ("part", pa.int64()),
    ("rows", pa.int64()),
    ("embedded", pa.int64()),
    ("skipped", pa.string()),
    ("error", pa.string()),
    ("peak_rss_mb", pa.float64()),
])


class PartEmbedder:
    """Embeds and persists KB parts, one call per part (or per piece of one)."""

    def __init__(self, kb: KBFile, index_dir: str, encoder: EncoderConfig, cache_dir: str, fusion: str,
                 on_bad_row: str, device: str = "cpu") -> None:
        self.kb, self.staging, self.fusion, self.on_bad_row = kb, Staging(index_dir), fusion, on_bad_row
        self.encoder = ClipEncoder(encoder.model_name, encoder.pretrained, cache_dir, device, encoder.batch_size)

    def __call__(self, batch: pa.Table) -> pa.Table:
        """One summary row (SUMMARY_SCHEMA) for the rows of `batch`, which all belong to one part."""
        part = int(batch.column("part")[0].as_py())
        rows = batch.column("row").to_numpy()
        try:
            usable = usable_rows(self.kb, batch, self.on_bad_row)
        except KBRowError as exc:
            return self._summary(part, len(rows), 0, {}, str(exc))
        vectors = self.encoder.encode_documents(usable.texts, usable.images, self.fusion)
        self.staging.write(part, int(rows[0]), int(rows[-1]) + 1, usable.rows, vectors, dict(usable.skipped))
        return self._summary(part, len(rows), len(usable.rows), dict(usable.skipped), "")

    @staticmethod
    def _summary(part: int, rows: int, embedded: int, skipped: dict[str, int], error: str) -> pa.Table:
        return pa.table({"part": [part], "rows": [rows], "embedded": [embedded], "skipped": [json.dumps(skipped)],
                         "error": [error], "peak_rss_mb": [peak_rss_mb()]}, schema=SUMMARY_SCHEMA)
