"""Sharded retrieval on Ray: one `RetrievalShard` actor per FAISS shard, the `RetrievalRouter`, and the merge task.

Sits after the encoder in the rollout loop and in serving: the router scatters a batch of
query vectors to every shard actor, gathers each shard's top-K and merges them into the
global top-K (`mmrag.retrieval.merge.merge_topk`). `RetrievalRouter.search` has the same
API as the in-process `LocalRetriever`. The router is a plain picklable object holding actor
handles, so the driver or any actor can call it without an extra hop. The rollout stream
instead keeps the hits off the driver: each shard's `search_rows` result goes by reference to
`merge_shard_rows`, a task whose merged hits go on by reference to the reranker, the generator
and (in the rollout trees, `fetch_hits_rows`) the learner; the driver reads the doc ids only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import ray

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.pool import probed
from mmrag.config import IndexConfig
from mmrag.retrieval.manifest import Manifest, ShardEntry
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import merge_topk
from mmrag.retrieval.retrieved_rows import HitsRow, merged_rows
from mmrag.retrieval.shard import ShardSearcher
from mmrag.rl.rollout import Node, nodes_at


class RetrievalShard:
    """One shard's FAISS index (GPU FAISS when this actor was given a GPU) and its memory-mapped doc store."""

    def __init__(self, index_dir: str, entry: ShardEntry, cfg: IndexConfig):
        use_actor_cpus("RetrievalShard")
        self.searcher = ShardSearcher(index_dir, entry, cfg)

    def num_docs(self) -> int:
        return int(self.searcher.index.ntotal)

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        return self.searcher.search(query_vectors, k)

    @ray.method(num_returns=2)
    def search_rows(self, query_vectors: np.ndarray, k: int) -> tuple[int, list[list[Hit]]]:
        """(the number of query rows, `search`'s hits): the rollout waits on the count and passes the hits to the
        merge by reference."""
        return len(query_vectors), self.searcher.search(query_vectors, k)


@ray.remote(num_cpus=0, num_returns=2)
def merge_shard_rows(k: int, *per_shard: list[list[Hit]]) -> tuple[list[list[str]], list[list[Hit]]]:
    """`merged_rows` of the shards' results (passed as references, resolved here): the doc ids for the driver, the
    merged hits for the stages that read them."""
    return merged_rows(list(per_shard), k)


def fetch_hits_rows(roots: list[Node]) -> list[Node]:
    """`roots` with every translator node's hits fetched here where the tree carries them by reference (`HitsRow`),
    each micro-batch's once: what a learner rank does before its losses read them."""
    nodes = [node for root in roots for node in nodes_at(root, "translator")
             if isinstance(node.payload.get("hits"), HitsRow)]
    refs = list(dict.fromkeys(node.payload["hits"].rows for node in nodes))
    fetched = dict(zip(refs, ray.get(refs)))
    for node in nodes:
        where = node.payload["hits"]
        node.payload["hits"] = fetched[where.rows][where.row]
    return roots


class RetrievalRouter:
    """Scatter/gather over the `RetrievalShard` actors of one index (`shard_replicas`: each shard's actors; `shards`:
    the first of each, which `search` asks)."""

    def __init__(self, manifest: Manifest, shard_replicas: list[list]) -> None:
        self.manifest = manifest
        self.shard_replicas = shard_replicas
        self.loading: list[list] = [[] for _ in shard_replicas]
        """Per shard, each replica's load check (`launch`): one not yet answered is still loading."""

    @property
    def shards(self) -> list:
        return [replicas[0] for replicas in self.shard_replicas]

    @classmethod
    def launch(cls, index_dir: str | Path, cfg: IndexConfig, max_restarts: int = 0,
               replicas: int = 1) -> RetrievalRouter:
        """Start `replicas` shard actors per manifest entry (`index.shard_num_cpus` / `shard_num_gpus` each); return
        once one replica of every shard has loaded it.

        A missing or corrupt shard file fails here, naming it (every replica of a shard loads the same file). A shard
        actor Ray restarts (`max_restarts`) reloads its shard in its constructor before it serves again.
        """
        manifest = Manifest.read(index_dir)
        missing = manifest.missing_files(index_dir)
        if missing:
            raise FileNotFoundError(f"{missing[0]}: shard file listed in the index manifest is missing; "
                                    f"rebuild the index with `mmrag index --force`")
        placement = probed(RetrievalShard).options(num_cpus=cfg.shard_num_cpus, num_gpus=cfg.shard_num_gpus,
                                                   max_restarts=max_restarts, max_task_retries=0)
        shard_replicas = [[placement.remote(str(index_dir), entry, cfg) for _ in range(replicas)]
                          for entry in manifest.shards]
        router = cls(manifest, shard_replicas)
        router.loading = [[shard.num_docs.remote() for shard in shards] for shards in shard_replicas]
        for refs in router.loading:  # a shard serves once one replica has loaded it; its others join when loaded
            ray.get(ray.wait(refs, num_returns=1)[0])
        return router

    @property
    def dim(self) -> int:
        return self.manifest.dim

    def search(self, query_vectors: np.ndarray, k: int) -> list[list[Hit]]:
        """The global top-`k` documents of each query vector (rows of `query_vectors`)."""
        queries = self.manifest.check_search(query_vectors, k)
        queries_ref = ray.put(queries)
        return merge_topk(ray.get([shard.search.remote(queries_ref, k) for shard in self.shards]), k)

    def shutdown(self) -> None:
        for shard in [shard for shards in self.shard_replicas for shard in shards]:
            ray.kill(shard)
        self.shard_replicas = []
