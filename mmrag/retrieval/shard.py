"""One FAISS shard at search time: its index (memory-mapped, or on GPU FAISS) and its doc store.

`ShardSearcher` loads what the build (`mmrag.retrieval.build`) wrote for one manifest
entry and answers a batch of query vectors with its top-K `Hit`s; `LocalRetriever` and the
`RetrievalShard` actor wrap it, and `merge_topk` combines the shards.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np
import pyarrow as pa

from mmrag.config import IndexConfig
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.manifest import ShardEntry


def _set_search_params(index: faiss.Index, cfg: IndexConfig) -> None:
    if isinstance(index, faiss.IndexIVF):
        index.nprobe = cfg.ivf_nprobe
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = cfg.hnsw_ef_search


def _gpu_allowed(index: faiss.Index, cfg: IndexConfig) -> bool:
    """GPU FAISS when the config allows it and this process sees a GPU; FAISS has no GPU HNSW."""
    return cfg.use_gpu and faiss.get_num_gpus() > 0 and not isinstance(index, faiss.IndexHNSW)


class ShardSearcher:
    """One shard: its FAISS index and its doc store, both memory-mapped from their files."""

    def __init__(self, index_dir: str | Path, entry: ShardEntry, cfg: IndexConfig) -> None:
        index_path, docstore_path = Path(index_dir) / entry.index_file, Path(index_dir) / entry.docstore_file
        for path in (index_path, docstore_path):
            if not path.is_file():
                raise FileNotFoundError(f"{path}: shard file listed in the index manifest is missing; "
                                        f"rebuild the index with `mmrag index --force`")
        # Mapped, not read: the vectors or codes (Flat, IVF lists, HNSW storage) stay in the page cache,
        # shared by every process searching this shard, and are paged in as searches touch them.
        self.index = faiss.read_index(str(index_path), faiss.IO_FLAG_MMAP_IFC)
        _set_search_params(self.index, cfg)
        self.gpu_resources = None
        if _gpu_allowed(self.index, cfg):
            self.gpu_resources = faiss.StandardGpuResources()  # must outlive the GPU index
            self.index = faiss.index_cpu_to_gpu(self.gpu_resources, 0, self.index)  # copies nprobe too
        self.docs = pa.ipc.open_file(pa.memory_map(str(docstore_path))).read_all()
        if self.docs.num_rows != self.index.ntotal:
            raise ValueError(f"{docstore_path}: {self.docs.num_rows} doc rows but {index_path} holds "
                             f"{self.index.ntotal} vectors; rebuild the index with `mmrag index --force`")

    @property
    def on_gpu(self) -> bool:
        return self.gpu_resources is not None

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        """This shard's top-`k` hits for each row of `query_vectors` (float32 [n, dim])."""
        scores, rows = self.index.search(np.ascontiguousarray(query_vectors, dtype=np.float32), min(k, self.index.ntotal))
        found = rows >= 0  # IVF and HNSW return -1 where they found fewer than k.
        payloads = iter(self.docs.take(pa.array(rows[found])).to_pylist())
        return [[Hit(score=float(score), **next(payloads)) for score in query_scores[query_found]]
                for query_scores, query_found in zip(scores, found)]
