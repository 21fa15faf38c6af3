"""Fixed baselines: k is chosen on val alone, the test figure is read at that k, and the sight reordering."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from mmrag.config import RerankerConfig
from mmrag.data.dataset import Question
from mmrag.data.render import render_entity
from mmrag.data.world import Entity
from mmrag.evaluation.baselines import FixedBaseline, best_fixed, choose_k, query_texts, reorder, sight_reordered
from mmrag.models.reranker import AdaptiveReranker
from mmrag.models.visual_reader import seen_description
from mmrag.retrieval.hit import Hit


def test_k_is_chosen_on_val_and_test_is_read_at_that_k_even_when_test_prefers_another():
    # Val prefers k = 1; test would prefer k = 3 (0.9). A choice that looked at test would report 0.9.
    baseline = FixedBaseline("caption+question", val_by_k={0: 0.0, 1: 0.70, 2: 0.65, 3: 0.60},
                             test_by_k={0: 0.0, 1: 0.50, 2: 0.55, 3: 0.90})
    assert baseline.k == 1
    assert (baseline.val_reward, baseline.test_reward) == (0.70, 0.50)


def test_a_val_tie_goes_to_fewer_documents():
    assert choose_k({5: 0.6, 2: 0.6, 3: 0.4}) == 2


def test_the_best_fixed_baseline_is_the_best_on_val_not_on_test():
    on_val = FixedBaseline("question", {1: 0.30}, {1: 0.10})
    on_test = FixedBaseline("caption", {2: 0.20}, {2: 0.95})
    assert best_fixed([on_test, on_val]).name == "question"


def test_sight_reordering_puts_the_passage_stating_what_the_reader_sees_above_a_near_duplicate(zoo_dir):
    reranker = AdaptiveReranker.from_config(RerankerConfig(backbone_pretrained="zoo:tiny-clip-v2"), zoo_dir)
    pictured = Entity("e0", "Ada Lind", "circle", "red", "striped", "grey")
    question = Question("q0", render_entity(pictured), "When was this built?", ["1901"], "e0", ["d0"])
    seen = seen_description(reranker.visual_reader.read([question.image])[0])
    twin = seen.replace("striped", "dotted")
    rows = [("d1", twin, 0.50), ("d0", seen, 0.49), ("d2", "a tall tower", 0.30)]
    hits = [Hit(doc, "", text, None, "e", score, j) for j, (doc, text, score) in enumerate(rows)]
    reordered = sight_reordered(SimpleNamespace(reranker=reranker), [hits], [seen])
    assert [hit.doc_id for hit in reordered[0]] == ["d0", "d1", "d2"]
    far_apart = [dataclasses.replace(hits[0], score=3.0), *hits[1:]]
    assert [hit.doc_id for hit in sight_reordered(SimpleNamespace(reranker=reranker), [far_apart], [seen])[0]] \
        == ["d1", "d0", "d2"]


def test_the_sight_query_is_what_the_reader_sees_followed_by_the_question():
    question = Question("q0", render_entity(Entity("e0", "Ada Lind", "circle", "red", "striped", "grey")),
                        "When was this built?", ["1901"])
    assert query_texts("sight+question", [question], ["red striped circle pictured on grey"]) == [
        "red striped circle pictured on grey when was this built"]


def test_reorder_sorts_each_row_by_descending_score_and_keeps_retrieval_order_on_ties():
    hits = [[Hit(f"d{j}", "", "", None, "", 0.0, j) for j in range(4)]]
    assert [h.doc_id for h in reorder(hits, [np.array([0.1, 0.3, 0.1, 0.2])])[0]] == ["d1", "d3", "d0", "d2"]
