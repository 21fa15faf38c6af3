"""FAISS shards: write a set of them from document vectors, and load and search one.

Build side: `ShardSetWriter` receives (vectors, doc rows) batch by batch from
`mmrag.retrieval.build` (or from a test/benchmark in one go), deals row g to shard g % S,
streams each shard's doc rows into an Arrow IPC file, and at `finish` builds one FAISS
index per shard (Flat, IVF or HNSW; inner product over normalised vectors).

Search side: `ShardSearcher` loads one shard's index (moved to GPU FAISS when possible),
memory-maps its doc store, and answers a batch of query vectors with its top-K `Hit`s;
`LocalRetriever` and the `RetrievalShard` actor wrap it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Self

import faiss
import numpy as np
import pyarrow as pa

from mmrag.config import IndexConfig
from mmrag.retrieval.manifest import ShardEntry
from mmrag.retrieval.merge import Hit

DOCSTORE_SCHEMA = pa.schema([
    ("index_id", pa.int64()),
    ("doc_id", pa.string()),
    ("title", pa.string()),
    ("text", pa.string()),
    ("image", pa.binary()),
    ("entity_id", pa.string()),
])

# FAISS warns below ~39 training points per IVF cluster; fewer clusters keep k-means meaningful.
MIN_POINTS_PER_IVF_CLUSTER = 39


def build_faiss_index(vectors: np.ndarray, cfg: IndexConfig) -> tuple[faiss.Index, dict]:
    """An inner-product FAISS index over `vectors`, and the build parameters it really used."""
    dim = vectors.shape[1]
    if cfg.index_type == "flat":
        index, params = faiss.IndexFlatIP(dim), {}
    elif cfg.index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        params = {"hnsw_m": cfg.hnsw_m}
    elif cfg.index_type == "ivf":
        nlist = max(1, min(cfg.ivf_nlist, len(vectors) // MIN_POINTS_PER_IVF_CLUSTER))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        params = {"ivf_nlist": nlist}
    else:
        raise ValueError(f"index.index_type: expected one of ['flat', 'ivf', 'hnsw'], got {cfg.index_type!r}")
    index.add(vectors)
    return index, params


def _docstore_rows(docs: pa.Table, index_ids: np.ndarray) -> pa.Table:
    """`docs` in the doc store's schema; absent optional columns become "" (image: null)."""
    columns = {"index_id": pa.array(index_ids)}
    for field in DOCSTORE_SCHEMA.remove(0):
        if field.name in docs.column_names:
            columns[field.name] = docs.column(field.name)
        elif field.name in ("doc_id", "text"):
            raise ValueError(f"doc rows lack required column {field.name!r} (found: {', '.join(docs.column_names)})")
        else:
            columns[field.name] = pa.nulls(docs.num_rows, field.type) if field.name == "image" else [""] * docs.num_rows
    return pa.table(columns).cast(DOCSTORE_SCHEMA)


class ShardSetWriter:
    """Writes S shards under `index_dir`: doc stores streamed as rows arrive, indexes at `finish`.

    Vectors are held in memory until `finish` (IVF must see all of a shard's vectors to train).
    Use it as a context manager, so that an error midway removes the partial files.
    """

    def __init__(self, index_dir: str | Path, num_shards: int, dim: int) -> None:
        if num_shards < 1:
            raise ValueError(f"index.num_shards: expected a positive integer, got {num_shards}")
        self.index_dir = Path(index_dir)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self.num_shards, self.dim, self.num_docs = num_shards, dim, 0
        self.names = [f"shard-{shard:03d}" for shard in range(num_shards)]
        self.vectors: list[list[np.ndarray]] = [[] for _ in range(num_shards)]
        self.docstores = [pa.ipc.new_file(str(self.index_dir / f"{name}.arrow"), DOCSTORE_SCHEMA)
                          for name in self.names]

    def add(self, vectors: np.ndarray, docs: pa.Table) -> None:
        """Append documents (columns doc_id, text; optional title, image, entity_id) and their vectors."""
        if vectors.shape != (docs.num_rows, self.dim):
            raise ValueError(f"ShardSetWriter.add: vectors of shape {vectors.shape} for {docs.num_rows} docs; "
                             f"expected ({docs.num_rows}, {self.dim})")
        index_ids = np.arange(self.num_docs, self.num_docs + docs.num_rows, dtype=np.int64)
        rows = _docstore_rows(docs, index_ids)
        for shard in range(self.num_shards):
            mine = np.flatnonzero(index_ids % self.num_shards == shard)
            if len(mine):
                self.docstores[shard].write_table(rows.take(mine))
                self.vectors[shard].append(np.ascontiguousarray(vectors[mine], dtype=np.float32))
        self.num_docs += docs.num_rows

    def finish(self, cfg: IndexConfig) -> list[ShardEntry]:
        """Close the doc stores, build and save each shard's FAISS index; one entry per shard."""
        entries = []
        for shard, name in enumerate(self.names):
            self.docstores[shard].close()
            vectors = np.concatenate(self.vectors[shard]) if self.vectors[shard] else np.zeros((0, self.dim), np.float32)
            if len(vectors) == 0:
                raise ValueError(f"shard {shard} of {self.num_shards} got no documents (only {self.num_docs} "
                                 f"indexed); set index.num_shards to at most {max(self.num_docs, 1)}")
            index, params = build_faiss_index(vectors, cfg)
            faiss.write_index(index, str(self.index_dir / f"{name}.faiss"))
            entries.append(ShardEntry(f"{name}.faiss", f"{name}.arrow", len(vectors), params))
        return entries

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        """On an error, close and delete every file written so far: a failed build leaves no stray shards."""
        if exc_type is None:
            return
        for docstore, name in zip(self.docstores, self.names):
            docstore.close()  # closing twice is harmless
            for suffix in (".arrow", ".faiss"):
                (self.index_dir / f"{name}{suffix}").unlink(missing_ok=True)


def _set_search_params(index: faiss.Index, cfg: IndexConfig) -> None:
    if isinstance(index, faiss.IndexIVF):
        index.nprobe = cfg.ivf_nprobe
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = cfg.hnsw_ef_search


def _gpu_allowed(index: faiss.Index, cfg: IndexConfig) -> bool:
    """GPU FAISS when the config allows it and this process sees a GPU; FAISS has no GPU HNSW."""
    return cfg.use_gpu and faiss.get_num_gpus() > 0 and not isinstance(index, faiss.IndexHNSW)


class ShardSearcher:
    """One shard: its FAISS index, and its doc store memory-mapped from the Arrow IPC file."""

    def __init__(self, index_dir: str | Path, entry: ShardEntry, cfg: IndexConfig) -> None:
        index_path, docstore_path = Path(index_dir) / entry.index_file, Path(index_dir) / entry.docstore_file
        for path in (index_path, docstore_path):
            if not path.is_file():
                raise FileNotFoundError(f"{path}: shard file listed in the index manifest is missing; "
                                        f"rebuild the index with `mmrag index --force`")
        self.index = faiss.read_index(str(index_path))
        _set_search_params(self.index, cfg)
        self.gpu_resources = None
        if _gpu_allowed(self.index, cfg):
            self.gpu_resources = faiss.StandardGpuResources()  # must outlive the GPU index
            self.index = faiss.index_cpu_to_gpu(self.gpu_resources, 0, self.index)  # copies nprobe too
        self.docs = pa.ipc.open_file(pa.memory_map(str(docstore_path))).read_all()
        if self.docs.num_rows != self.index.ntotal:
            raise ValueError(f"{docstore_path}: {self.docs.num_rows} doc rows but {index_path} holds "
                             f"{self.index.ntotal} vectors; rebuild the index with `mmrag index --force`")

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        """This shard's top-`k` hits for each row of `query_vectors` (float32 [n, dim])."""
        scores, rows = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), min(k, self.index.ntotal))
        found = rows >= 0  # IVF and HNSW return -1 where they found fewer than k.
        payloads = iter(self.docs.take(pa.array(rows[found])).to_pylist())
        return [[Hit(score=float(score), **next(payloads)) for score in query_scores[query_found]]
                for query_scores, query_found in zip(scores, found)]
