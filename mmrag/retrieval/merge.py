"""Search results across shards: `merge_topk`, and the in-process `LocalRetriever`.

Each shard answers a batch of queries with its own top-K; `merge_topk` turns the S lists of
one query into the global top-K. `LocalRetriever` does the scatter/merge in one process (the
single-process reference trainer uses it); `mmrag.actors.retrieval.RetrievalRouter` does the same
across `RetrievalShard` actors and returns the same `list[list[Hit]]`.
"""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

from mmrag.config import IndexConfig
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.manifest import Manifest
from mmrag.retrieval.shard import ShardSearcher


def _rank_key(hit: Hit) -> tuple[float, int]:
    return (-hit.score, hit.index_id)


def merge_topk(per_shard: list[list[list[Hit]]], k: int) -> list[list[Hit]]:
    """Global top-`k` per query from `per_shard[s][q]` (each shard's hits for query q).

    Hits are ranked by score, ties by `index_id`, so the result does not depend on how the
    vectors were split into shards.
    """
    if not per_shard:
        return []
    num_queries = len(per_shard[0])
    for shard, hits in enumerate(per_shard):
        if len(hits) != num_queries:
            raise ValueError(f"merge_topk: shard {shard} answered {len(hits)} queries, shard 0 answered {num_queries}")
    return [heapq.nsmallest(k, (hit for hits in per_shard for hit in hits[query]), key=_rank_key)
            for query in range(num_queries)]


class LocalRetriever:
    """All shards of an index loaded in this process; `search` has the router's API."""

    def __init__(self, index_dir: str | Path, cfg: IndexConfig) -> None:
        self.manifest = Manifest.read(index_dir)
        self.shards = [ShardSearcher(index_dir, entry, cfg) for entry in self.manifest.shards]

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        """The global top-`k` documents of each query vector (rows of `query_vectors`)."""
        queries = self.manifest.check_search(query_vectors, k)
        return merge_topk([shard.search(queries, k) for shard in self.shards], k)
