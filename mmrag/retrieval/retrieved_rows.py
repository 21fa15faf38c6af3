"""What the rollout stream holds of one micro-batch's retrieval: the merged top-K's doc ids, and the hits or a handle.

Retrieval answers each query row with its global top-K `Hit`s (passage texts, KB images). The
stream needs only their doc ids (a rollout tree's leaf names the documents it kept); the
reranker, the generator and the learner need the hits themselves. In one process `hits` is the
rows; on Ray it is an object reference to them, which those stages resolve where they run, so
the texts never reach the driver (`mmrag.actors.stage_pools.RetrievalCall` merges the shards' results
in a task, `merged_rows`). A rollout tree's translator node carries its row of hits, or where
it is (`HitsRow`); the learner's ranks fetch those before computing the reranker's loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import merge_topk


@dataclass(frozen=True)
class HitsRow:
    """Row `row` of a micro-batch's merged hits, held elsewhere: `rows` is a handle (an object ref) to all of them."""

    rows: Any
    row: int


@dataclass
class RetrievedRows:
    """One micro-batch's global top-K per query row: the doc ids here, the hits themselves or a handle to them."""

    doc_ids: list[list[str]]
    hits: Any
    """`list[list[Hit]]` in one process; on Ray an object reference to it."""

    @classmethod
    def of(cls, hits: list[list[Hit]]) -> RetrievedRows:
        return cls(doc_ids_of(hits), hits)

    def row(self, query: int) -> list[Hit] | HitsRow:
        """Query row `query`'s hits when they are here, else where they are."""
        return self.hits[query] if isinstance(self.hits, list) else HitsRow(self.hits, query)


def doc_ids_of(hits: list[list[Hit]]) -> list[list[str]]:
    return [[hit.doc_id for hit in row] for row in hits]


def merged_rows(per_shard: list[list[list[Hit]]], k: int) -> tuple[list[list[str]], list[list[Hit]]]:
    """(doc ids, hits) of the global top-`k` per query row from every shard's top-`k` (`merge_topk`): the doc ids
    for the driver, the hits for the stages that read them."""
    hits = merge_topk(per_shard, k)
    return doc_ids_of(hits), hits


def leaf_evidence(hits: list[list[Hit]], selections: list[list[tuple[int, ...]]]) -> list[list[str]]:
    """The evidence texts of every leaf, query row by query row, draw by draw: the selected hits' texts in order."""
    return [[hits[row][j].text for j in selection] for row, draws in enumerate(selections) for selection in draws]
