"""One shard's FAISS index, built by streaming the embedded parts: trained on a sample, filled part by part.

The FAISS stage of `mmrag.retrieval.build` runs `write_shard_index` once per shard (in
turn with `--local`, as parallel Ray tasks otherwise). Inner product over normalised
vectors; `index.index_type` picks Flat (exact), IVF, HNSW or IVF-PQ. IVF and IVF-PQ train
their clusters and codebooks on at most `index.train_sample` of the shard's vectors, taken
at an even stride across it; HNSW needs no training. Vectors are added in buffers of
`ADD_BATCH`, so besides the index itself one part and one buffer are in memory.
"""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from mmrag.config import IndexConfig
from mmrag.atomic import atomic_file
from mmrag.retrieval.embedded_parts import EmbeddedParts, offsets

INDEX_TYPES = ("flat", "ivf", "hnsw", "ivfpq")
# FAISS warns below ~39 training points per k-means centroid; fewer clusters keep k-means meaningful.
MIN_POINTS_PER_CENTROID = 39
ADD_BATCH = 65536


def _ivf_nlist(cfg: IndexConfig, num_train: int) -> int:
    return max(1, min(cfg.ivf_nlist, num_train // MIN_POINTS_PER_CENTROID))


def new_faiss_index(dim: int, num_train: int, cfg: IndexConfig) -> tuple[faiss.Index, dict]:
    """An empty inner-product index of `cfg.index_type`, and the build parameters it really uses.

    `num_train` (the training sample's size) bounds IVF's clusters and PQ's code bits, so
    k-means always gets enough points.
    """
    if cfg.index_type == "flat":
        return faiss.IndexFlatIP(dim), {}
    if cfg.index_type == "hnsw":
        return faiss.IndexHNSWFlat(dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT), {"hnsw_m": cfg.hnsw_m}
    if cfg.index_type == "ivf":
        nlist = _ivf_nlist(cfg, num_train)
        return faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT), {"ivf_nlist": nlist}
    if cfg.index_type == "ivfpq":
        if cfg.pq_m < 1 or dim % cfg.pq_m:
            divisors = [m for m in range(1, dim + 1) if dim % m == 0]
            raise ValueError(f"index.pq_m: {cfg.pq_m} does not divide the vector dimension {dim}; "
                             f"choose one of {divisors}")
        nbits = max(1, cfg.pq_nbits)
        while nbits > 1 and MIN_POINTS_PER_CENTROID << nbits > num_train:
            nbits -= 1
        nlist = _ivf_nlist(cfg, num_train)
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(dim), dim, nlist, cfg.pq_m, nbits, faiss.METRIC_INNER_PRODUCT)
        return index, {"ivf_nlist": nlist, "pq_m": cfg.pq_m, "pq_nbits": nbits}
    raise ValueError(f"index.index_type: expected one of {list(INDEX_TYPES)}, got {cfg.index_type!r}")


def _shard_positions(parts: EmbeddedParts, shard: int, num_shards: int):
    """(part, positions of its vectors that belong to `shard`) for every part with any."""
    for part, first_id in enumerate(offsets(parts)):
        positions = np.flatnonzero((first_id + np.arange(parts.sizes[part])) % num_shards == shard)
        if len(positions):
            yield part, positions


def _training_sample(parts: EmbeddedParts, shard: int, num_shards: int, shard_size: int,
                     sample_size: int) -> np.ndarray:
    """`sample_size` of the shard's vectors, spread evenly over it (all of them if it has no more)."""
    wanted = np.unique(np.arange(sample_size, dtype=np.int64) * shard_size // sample_size)
    sample, seen = [], 0
    for part, positions in _shard_positions(parts, shard, num_shards):
        first, last = np.searchsorted(wanted, [seen, seen + len(positions)])
        if last > first:
            sample.append(parts.vectors(part)[positions[wanted[first:last] - seen]])
        seen += len(positions)
    return np.concatenate(sample)


def write_shard_index(parts: EmbeddedParts, index_dir: Path, name: str, shard: int, num_shards: int,
                      cfg: IndexConfig) -> tuple[int, dict]:
    """Build shard `shard` of `num_shards` and save it as NAME.faiss; returns (vectors in it, build parameters)."""
    shard_size = len(range(shard, sum(parts.sizes), num_shards))
    if cfg.index_type in ("ivf", "ivfpq"):
        sample = _training_sample(parts, shard, num_shards, shard_size, min(shard_size, cfg.train_sample))
        index, params = new_faiss_index(parts.dim, len(sample), cfg)
        index.train(sample)
        del sample  # up to train_sample x dim floats, not needed while the vectors are added
    else:
        index, params = new_faiss_index(parts.dim, 0, cfg)
    buffer: list[np.ndarray] = []
    for part, positions in _shard_positions(parts, shard, num_shards):
        buffer.append(parts.vectors(part)[positions])
        if sum(len(vectors) for vectors in buffer) >= ADD_BATCH:
            index.add(np.concatenate(buffer))
            buffer = []
    if buffer:
        index.add(np.concatenate(buffer))
    with atomic_file(index_dir / f"{name}.faiss") as temporary:
        faiss.write_index(index, str(temporary))
    return int(index.ntotal), params
