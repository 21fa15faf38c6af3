"""Retrieval: KB index build (`build`), FAISS shards (`shard`), top-K merging (`merge`), manifest.

Data flow: kb.parquet -> `build_index` -> shards + doc stores + manifest on disk ->
`ShardSearcher` per shard -> `merge_topk` -> `list[list[Hit]]` per query batch, either in
one process (`LocalRetriever`) or across Ray actors (`actors.retrieval.RetrievalRouter`).
"""

from mmrag.retrieval.manifest import Manifest, ShardEntry
from mmrag.retrieval.merge import Hit, LocalRetriever, merge_topk
from mmrag.retrieval.shard import ShardSearcher, ShardSetWriter

__all__ = ["Hit", "LocalRetriever", "Manifest", "ShardEntry", "ShardSearcher", "ShardSetWriter", "merge_topk"]
