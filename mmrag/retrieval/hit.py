"""`Hit`: one retrieved KB document, the unit every searcher returns.

Shards (`mmrag.retrieval.shard`) produce hits, `merge_topk` ranks them across shards, and
the reranker, generator, evaluation and serving read them downstream.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hit:
    """One retrieved KB document and its inner-product score against the query."""

    doc_id: str
    title: str
    text: str
    image: bytes | None
    """Encoded image bytes as stored in the KB, or None for a text-only document."""
    entity_id: str
    score: float
    index_id: int
    """Position of the document's vector in the whole index (0..num_docs-1); breaks score ties."""
