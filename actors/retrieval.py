"""Sharded retrieval on Ray: one `RetrievalShard` actor per FAISS shard, and the `RetrievalRouter`.

Sits after the encoder in the rollout loop and in serving: the router scatters a batch of
query vectors to every shard actor, gathers each shard's top-K and merges them into the
global top-K (`mmrag.retrieval.merge.merge_topk`). `RetrievalRouter.search` has the same
API as the in-process `LocalRetriever`. The router is a plain picklable object holding actor
handles, so the driver or any actor can call it without an extra hop.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ray

from mmrag.config import IndexConfig
from mmrag.retrieval.manifest import Manifest, ShardEntry
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import merge_topk
from mmrag.retrieval.shard import ShardSearcher


@ray.remote
class RetrievalShard:
    """One shard's FAISS index (GPU FAISS when this actor was given a GPU) and its memory-mapped doc store."""

    def __init__(self, index_dir: str, entry: ShardEntry, cfg: IndexConfig):
        self.searcher = ShardSearcher(index_dir, entry, cfg)

    def num_docs(self) -> int:
        return int(self.searcher.index.ntotal)

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        return self.searcher.search(query_vectors, k)


class RetrievalRouter:
    """Scatter/gather over the `RetrievalShard` actors of one index."""

    def __init__(self, manifest: Manifest, shards: list) -> None:
        self.manifest = manifest
        self.shards = shards

    @classmethod
    def launch(cls, index_dir: str | Path, cfg: IndexConfig, max_restarts: int = 0) -> RetrievalRouter:
        """Start one shard actor per manifest entry (`index.shard_num_cpus` / `shard_num_gpus` each).

        Waits until every shard has loaded, so a missing or corrupt shard file fails here, naming it. A shard
        actor Ray restarts (`max_restarts`) reloads its shard in its constructor before it serves again.
        """
        manifest = Manifest.read(index_dir)
        missing = manifest.missing_files(index_dir)
        if missing:
            raise FileNotFoundError(f"{missing[0]}: shard file listed in the index manifest is missing; "
                                    f"rebuild the index with `mmrag index --force`")
        placement = RetrievalShard.options(num_cpus=cfg.shard_num_cpus, num_gpus=cfg.shard_num_gpus,
                                           max_restarts=max_restarts, max_task_retries=0)
        shards = [placement.remote(str(index_dir), entry, cfg) for entry in manifest.shards]
        ray.get([shard.num_docs.remote() for shard in shards])
        return cls(manifest, shards)

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        """The global top-`k` documents of each query vector (rows of `query_vectors`)."""
        queries = self.manifest.check_search(query_vectors, k)
        queries_ref = ray.put(queries)
        return merge_topk(ray.get([shard.search.remote(queries_ref, k) for shard in self.shards]), k)

    def shutdown(self) -> None:
        for shard in self.shards:
            ray.kill(shard)
        self.shards = []
