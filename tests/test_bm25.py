"""BM25 over the KB's passages and reciprocal-rank fusion."""

from __future__ import annotations

import pytest

from mmrag.data.dataset import Doc, write_kb
from mmrag.retrieval.bm25 import BM25Index, reciprocal_rank_fusion
from mmrag.retrieval.hit import Hit


def hit(doc_id: str, text: str, title: str = "") -> Hit:
    return Hit(doc_id, title, text, None, "", 0.0, int(doc_id[1:]))


PASSAGES = [hit("d0", "the tower was built in 1901"), hit("d1", "the bridge spans the river"),
            hit("d2", "the tower tower tower stands in the square"), hit("d3", "a striped circle on grey")]


def test_the_passage_sharing_the_rare_query_words_ranks_first():
    index = BM25Index(PASSAGES)
    assert [h.doc_id for h in index.search(["when was the tower built"], top_k=2)[0]] == ["d0", "d2"]
    assert [h.doc_id for h in index.search(["striped circle"], top_k=1)[0]] == ["d3"]


def test_a_word_in_every_passage_weighs_less_than_a_rare_one():
    index = BM25Index(PASSAGES)
    assert index.idf["the"] < index.idf["bridge"]
    assert index.scores("unknownword").tolist() == [0.0] * 4


def test_scores_are_filled_in_and_descending():
    row = BM25Index(PASSAGES).search(["tower"], top_k=4)[0]
    assert [h.score for h in row] == sorted((h.score for h in row), reverse=True) and row[0].score > 0


def test_the_index_reads_the_kb_file_and_names_a_missing_one(tmp_path):
    write_kb([Doc("d0", "Bor Verlabon", "built in 1919", None, "e0"),
              Doc("d1", "Pul Gasvus", "sits in Lurpuras", None, "e1")], tmp_path)
    index = BM25Index.from_kb(tmp_path)
    assert index.search(["where does pul gasvus sit"], top_k=1)[0][0].entity_id == "e1"
    with pytest.raises(FileNotFoundError, match="kb.parquet"):
        BM25Index.from_kb(tmp_path / "nowhere")


def test_reciprocal_rank_fusion_favours_a_document_both_rankings_rank_high():
    dense = [hit("d1", ""), hit("d0", ""), hit("d2", "")]
    lexical = [hit("d3", ""), hit("d0", ""), hit("d1", "")]
    fused = reciprocal_rank_fusion([dense, lexical], top_k=3)
    assert [h.doc_id for h in fused] == ["d1", "d0", "d3"]
    assert fused[0].score == pytest.approx(1 / 61 + 1 / 63)
