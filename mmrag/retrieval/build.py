"""Knowledge-base index build: kb.parquet -> vectors per part -> S FAISS shards + doc stores + manifest.

First stage of retrieval (`mmrag index` runs it; the trainer and the retrieval actors read
its output). Two stages, each streaming one KB part at a time:

1. Embedding. The KB file is cut into parts (`kb_parts`); after a KB-wide doc_id check
   (`doc_ids`), every part not yet persisted under INDEX_DIR/embeddings (`staging`) is
   validated and embedded by a `PartEmbedder`, in this process (`LocalRunner`, `mmrag
   index --local`) or by a Ray Data pool of encoder workers (`mmrag.actors.index_build.RayRunner`).
   A build killed at any point and run again resumes here.
2. FAISS. The persisted parts are streamed into one doc store per shard (`docstore`) and
   one FAISS index per shard (`faiss_index`), trained on a sample where the type needs it.

The manifest is written last; when its fingerprint (KB content, encoder identity, build
settings) is unchanged, the build is a no-op.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
from tqdm import tqdm

from mmrag.atomic import remove_leftovers
from mmrag.checksum import file_sha256
from mmrag.config import EncoderConfig, IndexConfig
from mmrag.models.clip_encoder import encoder_identity
from mmrag.retrieval.build_report import BuildReport, peak_rss_mb
from mmrag.retrieval.doc_ids import check_doc_ids
from mmrag.retrieval.docstore import write_docstores
from mmrag.retrieval.embedded_parts import EmbeddedParts, StagedParts, VectorParts
from mmrag.retrieval.faiss_index import write_shard_index
from mmrag.retrieval.kb_parts import KBFile, KBPart, KBRowError
from mmrag.retrieval.manifest import MANIFEST_NAME, Manifest, ShardEntry, build_fingerprint, vector_identity
from mmrag.retrieval.part_embedder import PartEmbedder
from mmrag.retrieval.staging import Staging


@dataclass
class EmbedJob:
    """What an embedding worker needs: the KB, the rows the doc_id check rejected, and PartEmbedder's arguments."""

    kb: KBFile
    doc_id_problems: dict[int, dict[int, str]]
    """Part number -> {KB row: why it is skipped}."""
    embedder_args: dict[str, Any] = field(default_factory=dict)
    """PartEmbedder keyword arguments except `device`."""

    def rows(self, part: KBPart) -> pa.Table:
        return self.kb.rows_to_embed(part, self.doc_id_problems.get(part.number, {}))


class BuildRunner(Protocol):
    """Where the build's work runs: this process (`LocalRunner`) or Ray (`mmrag.actors.index_build.RayRunner`)."""

    workers: int
    """Encoder workers; 0 for in-process."""

    def embed(self, job: EmbedJob, parts: list[KBPart]) -> Iterator[dict]:
        """Embed and persist `parts`; yields one PartEmbedder summary per part (or piece) as each finishes."""

    def run(self, jobs: list[Callable[[], Any]]) -> list[tuple[Any, float]]:
        """Each job's result with the peak RSS (MiB) of the process that ran it, or 0 if that is this one."""


class LocalRunner:
    """Everything in this process, one part after another."""

    workers = 0

    def __init__(self, device: str = "cpu", progress: bool = False) -> None:
        self.device, self.progress = device, progress

    def embed(self, job: EmbedJob, parts: list[KBPart]) -> Iterator[dict]:
        if not parts:
            return
        embedder = PartEmbedder(**job.embedder_args, device=self.device)
        for part in parts:
            yield embedder(job.rows(part)).to_pylist()[0]

    def run(self, jobs: list[Callable[[], Any]]) -> list[tuple[Any, float]]:
        return [(job(), 0.0) for job in tqdm(jobs, desc="writing shards", unit="file", disable=not self.progress)]


def build_settings(cfg: IndexConfig) -> dict[str, Any]:
    """The index settings that change its content (search-time ones such as nprobe do not)."""
    settings = {"index_type": cfg.index_type, "num_shards": cfg.num_shards, "fusion": cfg.fusion,
                "on_bad_row": cfg.on_bad_row}
    if cfg.index_type in ("ivf", "ivfpq"):
        settings.update(ivf_nlist=cfg.ivf_nlist, train_sample=cfg.train_sample)
    if cfg.index_type == "ivfpq":
        settings.update(pq_m=cfg.pq_m, pq_nbits=cfg.pq_nbits)
    if cfg.index_type == "hnsw":
        settings["hnsw_m"] = cfg.hnsw_m
    return settings


def _check_counts(cfg: IndexConfig) -> None:
    for name in ("num_shards", "part_rows", "num_workers", "train_sample"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"index.{name}: expected a positive integer, got {getattr(cfg, name)}")


def _rebuild_reason(index_dir: Path, fingerprint: str, kb_sha256: str, identity: dict, force: bool) -> str:
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
    remove_leftovers(index_dir)


def write_shards(parts: EmbeddedParts, index_dir: Path, cfg: IndexConfig, runner: BuildRunner
                 ) -> tuple[list[ShardEntry], float]:
    """The doc stores and the FAISS index of every shard; returns the entries and the writers' peak RSS
    (MiB) less the size of the index each built (0 when they ran in this process)."""
    total = sum(parts.sizes)
    if total < cfg.num_shards:
        raise ValueError(f"shard {cfg.num_shards - 1} of {cfg.num_shards} would get no documents (only {total} "
                         f"indexed); set index.num_shards to at most {max(total, 1)}")
    names = [f"shard-{shard:03d}" for shard in range(cfg.num_shards)]
    jobs = [partial(write_docstores, parts, index_dir, names)]
    jobs += [partial(write_shard_index, parts, index_dir, name, shard, cfg.num_shards, cfg)
             for shard, name in enumerate(names)]
    (doc_counts, docstore_peak), *indexes = runner.run(jobs)
    entries, peaks = [], [docstore_peak]
    for name, doc_count, ((num_vectors, params), peak) in zip(names, doc_counts, indexes):
        if doc_count != num_vectors:
            raise RuntimeError(f"{name}: {doc_count} doc store rows but {num_vectors} vectors")
        entries.append(ShardEntry(f"{name}.faiss", f"{name}.arrow", num_vectors, params))
        if peak:
            peaks.append(peak - (index_dir / f"{name}.faiss").stat().st_size / 2**20)
    return entries, max(peaks)


def _embedding_key(kb_sha256: str, identity: dict, cfg: IndexConfig) -> dict:
    """What persisted part embeddings depend on; any change discards them."""
    return {"kb_sha256": kb_sha256, "encoder": vector_identity(identity), "fusion": cfg.fusion,
            "on_bad_row": cfg.on_bad_row, "part_rows": cfg.part_rows}


@dataclass
class _EmbedStats:
    rows: int = 0
    peak_rss_mb: float = 0.0


def _embed(runner: BuildRunner, job: EmbedJob, pending: list[KBPart], progress: bool) -> _EmbedStats:
    """Run the embedding stage over `pending`; the first bad row (`on_bad_row: error`) stops it with KBRowError."""
    stats = _EmbedStats()
    with tqdm(total=sum(part.num_rows for part in pending), desc="embedding KB", unit="row",
              disable=not progress or not pending) as bar:
        for summary in runner.embed(job, pending):
            if summary["error"]:
                raise KBRowError(summary["error"])
            stats.rows += summary["rows"]
            stats.peak_rss_mb = max(stats.peak_rss_mb, summary["peak_rss_mb"])
            bar.update(summary["rows"])
    return stats


def build_index(kb_path: str | Path, index_dir: str | Path, index_cfg: IndexConfig, encoder_cfg: EncoderConfig,
                cache_dir: str, force: bool = False, device: str = "cpu", progress: bool = True,
                runner: BuildRunner | None = None) -> BuildReport:
    """Build (or keep, when unchanged) the sharded index of `kb_path` under `index_dir`.

    `runner` says where the work runs: this process by default (on `device`), or
    `mmrag.actors.index_build.RayRunner` for a pool of encoder workers on Ray.
    """
    start = time.perf_counter()
    kb_path, index_dir = Path(kb_path), Path(index_dir)
    if not kb_path.is_file():
        raise FileNotFoundError(f"{kb_path}: KB file not found (data.dir must hold kb.parquet; `mmrag synth` writes one)")
    _check_counts(index_cfg)
    kb_sha256 = file_sha256(kb_path)
    identity = encoder_identity(encoder_cfg.model_name, encoder_cfg.pretrained, cache_dir)
    settings = build_settings(index_cfg)
    fingerprint = build_fingerprint(kb_sha256, vector_identity(identity), settings)
    reason = _rebuild_reason(index_dir, fingerprint, kb_sha256, identity, force)
    if not reason:
        return BuildReport(Manifest.read(index_dir), False, "unchanged", time.perf_counter() - start)
    runner = runner or LocalRunner(device, progress)
    kb = KBFile(kb_path, index_cfg.part_rows)
    # The KB's ids are read through before anything is written: an unreadable file leaves the directory as it was.
    doc_ids = check_doc_ids(kb, index_cfg.on_bad_row, progress)
    created = not index_dir.exists()
    try:
        index_dir.mkdir(parents=True, exist_ok=True)
        _remove_previous_build(index_dir)
        staging = Staging(index_dir)
        staging.prepare(_embedding_key(kb_sha256, identity, index_cfg), discard=force)
        done = staging.complete_parts(kb.parts)
        job = EmbedJob(kb, doc_ids.by_part(kb.parts), {
            "kb": kb, "index_dir": str(index_dir), "encoder": encoder_cfg, "cache_dir": cache_dir,
            "fusion": index_cfg.fusion, "on_bad_row": index_cfg.on_bad_row})
        embed_start = time.perf_counter()
        embedded = _embed(runner, job, [part for part in kb.parts if part.number not in done], progress)
        embed_seconds = time.perf_counter() - embed_start
        pieces = staging.complete_parts(kb.parts)
        skipped = sum((Counter(piece.skipped) for part in pieces.values() for piece in part), Counter())
        parts = StagedParts(kb, pieces)
        if sum(parts.sizes) == 0:
            raise KBRowError(f"{kb_path}: no usable rows out of {kb.num_rows} (skipped: {dict(skipped)})")
        shards, writer_peak = write_shards(parts, index_dir, index_cfg, runner)
        manifest = Manifest(
            fingerprint=fingerprint, kb_path=str(kb_path), kb_sha256=kb_sha256, encoder=identity, dim=parts.dim,
            settings=settings, kb_rows=kb.num_rows, num_docs=sum(parts.sizes), skipped=dict(skipped), shards=shards)
        manifest.write(index_dir)
        if not index_cfg.keep_embeddings:
            staging.remove()
        seconds = time.perf_counter() - start
        return BuildReport(manifest, True, reason, seconds, workers=runner.workers, rows_embedded=embedded.rows,
                           parts_reused=len(done), embed_seconds=embed_seconds,
                           index_seconds=seconds - embed_seconds - (embed_start - start),
                           peak_rss_mb_driver=peak_rss_mb(), peak_rss_mb_worker=embedded.peak_rss_mb,
                           peak_rss_mb_writer=writer_peak)
    except KBRowError:
        # A KB row found unreadable while embedding: a directory this call made holds nothing worth resuming from.
        if created:
            shutil.rmtree(index_dir, ignore_errors=True)
        raise


def write_vector_index(index_dir: str | Path, vectors: np.ndarray, docs: pa.Table, cfg: IndexConfig,
                       encoder: dict[str, str]) -> Manifest:
    """Shards and manifest for vectors computed elsewhere (benchmarks, tests, precomputed embeddings).

    `docs` has one row per vector (doc_id, text; optional title, image, entity_id); the
    manifest's content hash is taken over the vectors, since there is no KB file.
    """
    index_dir = Path(index_dir)
    _check_counts(cfg)
    parts = VectorParts(vectors, docs)
    index_dir.mkdir(parents=True, exist_ok=True)
    _remove_previous_build(index_dir)
    shards, _ = write_shards(parts, index_dir, cfg, LocalRunner())
    content_sha256 = hashlib.sha256(np.ascontiguousarray(vectors, dtype=np.float32).tobytes()).hexdigest()
    settings = build_settings(cfg)
    manifest = Manifest(
        fingerprint=build_fingerprint(content_sha256, vector_identity(encoder), settings), kb_path="",
        kb_sha256=content_sha256, encoder=encoder, dim=parts.dim, settings=settings, kb_rows=len(vectors),
        num_docs=len(vectors), skipped={}, shards=shards)
    manifest.write(index_dir)
    return manifest
