"""RetrievalShardDeployment: one FAISS shard of the index, when `retrieve` is a stage group of its own.

After the encoder's group: query vector -> this shard's top-k hits. The ingress scatters
each vector to every shard and merges their hits with `merge_topk`, as `LocalRetriever`
does in one process (the other layouts load every shard in the group's replicas).
"""

from __future__ import annotations

import numpy as np
from ray import serve

from mmrag.actors.serving import configure_batching
from mmrag.config import Config
from mmrag.retrieval.manifest import ShardEntry
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.shard import ShardSearcher


@serve.deployment
class RetrievalShardDeployment:
    def __init__(self, cfg: Config, entry: ShardEntry):
        self.searcher = ShardSearcher(cfg.index.dir, entry, cfg.index)
        configure_batching(self.search, cfg.serving)

    @serve.batch
    async def search(self, vectors: list[np.ndarray], ks: list[int]) -> list[list[Hit]]:
        """Each vector's top-k hits in this shard; one FAISS search at the batch's largest k."""
        hits = self.searcher.search(np.stack(vectors).astype(np.float32), max(ks))
        return [row[:k] for row, k in zip(hits, ks)]
