"""Knowledge-base index build: kb.parquet -> CLIP vectors -> S FAISS shards + doc stores + manifest.

First stage of retrieval (`mmrag index` runs it; the trainer and the retrieval actors read
its output). The KB is streamed in batches of `index.batch_size` rows; each valid row's
text (and image, fused by `index.fusion`) is embedded by `ClipEncoder.encode_documents`
and handed to `ShardSetWriter`. Bad rows fail naming the row and column, or are skipped
and counted (`index.on_bad_row`). The manifest is written last; when its fingerprint (KB
content, encoder identity, build settings) is unchanged, the build is a no-op.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image
from tqdm import tqdm

from mmrag.config import EncoderConfig, IndexConfig
from mmrag.data.dataset import KB_REQUIRED, decode_image
from mmrag.models.clip_encoder import ClipEncoder, encoder_identity
from mmrag.retrieval.manifest import (
    MANIFEST_NAME,
    Manifest,
    ShardEntry,
    build_fingerprint,
    file_sha256,
    vector_identity,
)
from mmrag.retrieval.shard import ShardSetWriter

KB_OPTIONAL = ("title", "image", "entity_id")


class KBRowError(ValueError):
    """A KB row the index cannot use; the message names the file, row and column."""


@dataclass
class BuildReport:
    manifest: Manifest
    rebuilt: bool
    """False when the existing index already matched (no-op)."""
    reason: str
    """Why it was (re)built or left alone, e.g. "KB changed" or "unchanged"."""
    seconds: float


def build_settings(cfg: IndexConfig) -> dict[str, Any]:
    """The index settings that change its content (search-time ones such as nprobe do not)."""
    settings = {"index_type": cfg.index_type, "num_shards": cfg.num_shards, "fusion": cfg.fusion,
                "on_bad_row": cfg.on_bad_row}
    if cfg.index_type == "ivf":
        settings["ivf_nlist"] = cfg.ivf_nlist
    if cfg.index_type == "hnsw":
        settings["hnsw_m"] = cfg.hnsw_m
    return settings


def _rebuild_reason(index_dir: Path, fingerprint: str, kb_sha256: str, identity: dict, settings: dict,
                   force: bool) -> str:
    """Why the index must be (re)built, or "" when the existing one matches."""
    if force:
        return "forced (--force)"
    try:
        old = Manifest.read(index_dir)
    except (FileNotFoundError, ValueError):
        return "no valid manifest"
    missing = old.missing_files(index_dir)
    if old.fingerprint == fingerprint:
        return f"shard file missing: {missing[0].name}" if missing else ""
    if old.kb_sha256 != kb_sha256:
        return "KB changed"
    if vector_identity(old.encoder) != vector_identity(identity):
        return "encoder changed"
    return "index settings changed"


def _remove_previous_build(index_dir: Path) -> None:
    """Drop the old manifest first (an interrupted rebuild must not look complete), then its shards."""
    try:
        old = Manifest.read(index_dir)
    except (FileNotFoundError, ValueError):
        old = None
    (index_dir / MANIFEST_NAME).unlink(missing_ok=True)
    for entry in old.shards if old else []:
        for name in (entry.index_file, entry.docstore_file):
            (index_dir / name).unlink(missing_ok=True)


class _BadRow(Exception):
    def __init__(self, column: str, kind: str, detail: str = "") -> None:
        super().__init__(f"column {column!r} {kind}{detail}")
        self.count_key = f"{column}: {kind}"


class _RowReader:
    """Validates KB rows batch by batch; returns the usable ones, raising on or counting the rest."""

    def __init__(self, kb_path: Path, schema: pa.Schema, on_bad_row: str) -> None:
        missing = [name for name in KB_REQUIRED if name not in schema.names]
        if missing:
            raise KBRowError(f"{kb_path}: missing required column {missing[0]!r} (required: {', '.join(KB_REQUIRED)}; "
                             f"optional: {', '.join(KB_OPTIONAL)}; found: {', '.join(schema.names)})")
        image_type = schema.field("image").type if "image" in schema.names else pa.binary()
        self.images_are_paths = pa.types.is_string(image_type) or pa.types.is_large_string(image_type)
        self.kb_path, self.on_bad_row = kb_path, on_bad_row
        self.seen_doc_ids: dict[str, int] = {}
        self.skipped: Counter[str] = Counter()
        self.rows_read = 0

    def _validated(self, record: dict) -> tuple[bytes | None, Image.Image | None]:
        """The row's image bytes and decoded image (None, None without one); `_BadRow` if unusable."""
        doc_id, text = record.get("doc_id"), record.get("text")
        if not doc_id:
            raise _BadRow("doc_id", "null or empty")
        if doc_id in self.seen_doc_ids:
            raise _BadRow("doc_id", "duplicate", f" ({doc_id!r} already used by row {self.seen_doc_ids[doc_id]})")
        if text is None or not text.strip():
            raise _BadRow("text", "null or empty")
        if record.get("image") is None:
            return None, None
        try:
            data = (self.kb_path.parent / record["image"]).read_bytes() if self.images_are_paths else record["image"]
            return data, decode_image(data)
        except (OSError, ValueError) as exc:
            raise _BadRow("image", "undecodable", f" ({exc})") from None

    def read(self, batch: pa.RecordBatch) -> tuple[list[dict], list[Image.Image | None]]:
        docs, images = [], []
        for row, record in enumerate(batch.to_pylist(), start=self.rows_read):
            try:
                image_bytes, image = self._validated(record)
            except _BadRow as bad:
                if self.on_bad_row == "error":
                    raise KBRowError(f"{self.kb_path}: row {row} (doc_id {record.get('doc_id')!r}): {bad}; fix the "
                                     f"row, or set index.on_bad_row: skip to skip and count such rows") from None
                self.skipped[bad.count_key] += 1
                continue
            self.seen_doc_ids[record["doc_id"]] = row
            images.append(image)
            docs.append({"doc_id": record["doc_id"], "title": record.get("title") or "", "text": record["text"],
                         "image": image_bytes, "entity_id": record.get("entity_id") or ""})
        self.rows_read += batch.num_rows
        return docs, images


def _embed_kb(kb_path: Path, index_dir: Path, cfg: IndexConfig, encoder: ClipEncoder, progress: bool
              ) -> tuple[_RowReader, list[ShardEntry]]:
    parquet = pq.ParquetFile(kb_path)
    reader = _RowReader(kb_path, parquet.schema_arrow, cfg.on_bad_row)
    columns = [name for name in (*KB_REQUIRED, *KB_OPTIONAL) if name in parquet.schema_arrow.names]
    with ShardSetWriter(index_dir, cfg.num_shards, encoder.dim) as writer, \
            tqdm(total=parquet.metadata.num_rows, desc="embedding KB", unit="row", disable=not progress) as bar:
        for batch in parquet.iter_batches(batch_size=cfg.batch_size, columns=columns):
            docs, images = reader.read(batch)
            if docs:
                vectors = encoder.encode_documents([doc["text"] for doc in docs], images, cfg.fusion)
                writer.add(vectors, pa.Table.from_pylist(docs))
            bar.update(batch.num_rows)
        if writer.num_docs == 0:
            raise KBRowError(f"{kb_path}: no usable rows out of {reader.rows_read} (skipped: {dict(reader.skipped)})")
        return reader, writer.finish(cfg)


def build_index(kb_path: str | Path, index_dir: str | Path, index_cfg: IndexConfig, encoder_cfg: EncoderConfig,
                cache_dir: str, force: bool = False, device: str = "cpu", progress: bool = True) -> BuildReport:
    """Build (or keep, when unchanged) the sharded index of `kb_path` under `index_dir`."""
    start = time.perf_counter()
    kb_path, index_dir = Path(kb_path), Path(index_dir)
    if not kb_path.is_file():
        raise FileNotFoundError(f"{kb_path}: KB file not found (data.dir must hold kb.parquet; `mmrag synth` writes one)")
    kb_sha256 = file_sha256(kb_path)
    identity = encoder_identity(encoder_cfg.model_name, encoder_cfg.pretrained, cache_dir)
    settings = build_settings(index_cfg)
    fingerprint = build_fingerprint(kb_sha256, vector_identity(identity), settings)
    reason = _rebuild_reason(index_dir, fingerprint, kb_sha256, identity, settings, force)
    if not reason:
        return BuildReport(Manifest.read(index_dir), False, "unchanged", time.perf_counter() - start)
    index_dir.mkdir(parents=True, exist_ok=True)
    _remove_previous_build(index_dir)
    encoder = ClipEncoder(encoder_cfg.model_name, encoder_cfg.pretrained, cache_dir, device, encoder_cfg.batch_size)
    reader, shards = _embed_kb(kb_path, index_dir, index_cfg, encoder, progress)
    manifest = Manifest(
        fingerprint=fingerprint, kb_path=str(kb_path), kb_sha256=kb_sha256, encoder=identity, dim=encoder.dim, settings=settings, kb_rows=reader.rows_read,
        num_docs=sum(entry.num_docs for entry in shards), skipped=dict(reader.skipped), shards=shards)
    manifest.write(index_dir)
    return BuildReport(manifest, True, reason, time.perf_counter() - start)


def write_vector_index(index_dir: str | Path, vectors: np.ndarray, docs: pa.Table, cfg: IndexConfig,
                       encoder: dict[str, str]) -> Manifest:
    """Shards and manifest for vectors computed elsewhere (benchmarks, tests, precomputed embeddings).

    `docs` has one row per vector (doc_id, text; optional title, image, entity_id); the
    manifest's content hash is taken over the vectors, since there is no KB file.
    """
    index_dir = Path(index_dir)
    index_dir.mkdir(parents=True, exist_ok=True)
    _remove_previous_build(index_dir)
    with ShardSetWriter(index_dir, cfg.num_shards, vectors.shape[1]) as writer:
        writer.add(vectors, docs)
        shards = writer.finish(cfg)
    content_sha256 = hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()
    settings = build_settings(cfg)
    manifest = Manifest(
        fingerprint=build_fingerprint(content_sha256, vector_identity(encoder), settings), kb_path="",
        kb_sha256=content_sha256,
        encoder=encoder, dim=vectors.shape[1], settings=settings, kb_rows=len(vectors), num_docs=len(vectors),
        skipped={}, shards=shards)
    manifest.write(index_dir)
    return manifest
