"""Retrieval: KB index build (`build`), FAISS shards (`shard`), top-K merging (`merge`), manifest.

Data flow: kb.parquet -> `build_index` (parts embedded and persisted, then streamed into
FAISS shards + doc stores) -> manifest on disk -> `ShardSearcher` per shard -> `merge_topk`
-> `list[list[Hit]]` per query batch, either in one process (`LocalRetriever`) or across
Ray actors (`mmrag.actors.retrieval.RetrievalRouter`). The rollout stream holds a micro-batch's
result as `retrieved_rows.RetrievedRows` (doc ids, and the hits or a reference to them).

The package imports nothing itself, so a light module (the manifest, the hit type) never pulls in FAISS.
"""
