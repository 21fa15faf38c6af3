"""The shards' top-K merged off the driver: `merged_rows` ranks as one index would, and evidence is built from it.

Ray-free: the merge task (`mmrag.actors.retrieval.merge_shard_rows`) and the generator replica only call these.
"""

from __future__ import annotations

import pytest

from mmrag.retrieval.hit import Hit
from mmrag.retrieval.retrieved_rows import HitsRow, RetrievedRows, leaf_evidence, merged_rows


def hit(doc_id: str, score: float, index_id: int) -> Hit:
    return Hit(doc_id=doc_id, title=f"title {doc_id}", text=f"text {doc_id}", image=None, entity_id="e",
               score=score, index_id=index_id)


A, B, C, D, E = hit("A", 0.9, 4), hit("B", 0.5, 0), hit("C", 0.7, 2), hit("D", 0.9, 1), hit("E", 0.6, 7)
PER_SHARD = [
    [[A, B], [C]],  # shard 0: two hits for query 0, one for query 1
    [[D, E], []],   # shard 1: fewer than k for query 1 (none)
    [[], []],       # shard 2: an empty shard
]


def test_the_merged_top_k_ranks_by_score_ties_by_index_id_and_keeps_what_fewer_than_k_hits_give():
    doc_ids, hits = merged_rows(PER_SHARD, k=3)
    # Query 0: D and A tie at 0.9, D's vector comes first in the index (1 < 4); then E (0.6); B (0.5) is 4th.
    # Query 1: only C was found, by any shard.
    assert doc_ids == [["D", "A", "E"], ["C"]]
    assert hits == [[D, A, E], [C]]


def test_merging_no_shards_gives_no_rows_and_shards_answering_different_query_counts_is_an_error():
    assert merged_rows([], k=3) == ([], [])
    assert merged_rows([[[]], [[]]], k=3) == ([[]], [[]])
    with pytest.raises(ValueError, match="shard 1 answered 1 queries, shard 0 answered 2"):
        merged_rows([[[A], [C]], [[D]]], k=3)


def test_each_leafs_evidence_is_its_selections_texts_in_selection_order_row_by_row_draw_by_draw():
    _, hits = merged_rows(PER_SHARD, k=3)
    selections = [[(1, 0), ()], [(0,), (0,)]]  # 2 draws per query row; the empty selection keeps nothing
    assert leaf_evidence(hits, selections) == [["text A", "text D"], [], ["text C"], ["text C"]]


def test_a_row_is_the_hits_themselves_in_one_process_and_where_they_are_when_held_by_reference():
    _, hits = merged_rows(PER_SHARD, k=3)
    assert RetrievedRows.of(hits).row(1) == [C]
    held = RetrievedRows([["D", "A", "E"], ["C"]], "a reference to the merged hits")
    assert held.row(1) == HitsRow("a reference to the merged hits", 1)
