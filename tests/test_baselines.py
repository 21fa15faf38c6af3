"""Training-free baselines: k (single or per predicted kind) and the best pipeline are chosen on val alone, the
test figures are read at those choices, and the grounding rerankers."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from mmrag.config import RerankerConfig
from mmrag.data.dataset import Question
from mmrag.data.render import render_entity
from mmrag.data.world import Entity
from mmrag.evaluation.baselines import (FixedBaseline, best_fixed, best_training_free, choose_k, name_match,
                                        query_texts, reorder, sight_scores)
from mmrag.models.reranker import AdaptiveReranker
from mmrag.models.visual_reader import seen_description
from mmrag.retrieval.hit import Hit


def records(rewards_by_k: dict[int, list[float]], kinds: list[str]) -> dict[int, list[dict]]:
    """Per k, one record per question with its reward and predicted kind (k documents kept); its exact match is
    its reward, as under the default rule reward."""
    return {k: [{"kind": kind, "predicted_kind": kind, "reward": reward, "exact_match": reward,
                 "selected": [f"d{j}" for j in range(k)], "gold": []} for reward, kind in zip(rewards, kinds)]
            for k, rewards in rewards_by_k.items()}


KINDS = ["visual", "visual", "one-fact", "one-fact"]
VAL = {0: [1, 1, 0, 0], 1: [0, 0, 1, 1], 3: [0, 0, 1, 0]}
"""Val: k = 0 is right for visual questions, k = 1 for one-fact ones; every single k scores 0.5 or less."""
TEST = {0: [1, 1, 0, 0], 1: [0, 1, 1, 1], 3: [1, 1, 1, 1]}
"""Test would prefer k = 3 (1.0): a choice that looked at test would report it."""


def test_k_is_chosen_on_val_and_test_is_read_at_that_k_even_when_test_prefers_another():
    baseline = FixedBaseline("dense: caption", records(VAL, KINDS), records(TEST, KINDS))
    assert baseline.k == 0, "a val tie (0.5 at k 0 and 1) goes to fewer documents"
    assert (baseline.val_reward, baseline.test_reward) == (0.5, 0.5)


def test_one_k_per_predicted_kind_is_chosen_on_the_val_questions_predicted_of_that_kind():
    per_kind = FixedBaseline("dense: caption", records(VAL, KINDS), records(TEST, KINDS)).choices()[1]
    assert per_kind.k == {"visual": 0, "one-fact": 1}
    assert (per_kind.val_reward, per_kind.test_reward) == (1.0, 1.0)


def test_perturbing_test_changes_no_choice_only_the_test_figures():
    before = FixedBaseline("b", records(VAL, KINDS), records(TEST, KINDS))
    worse = {k: [1 - r for r in rewards] for k, rewards in TEST.items()}
    after = FixedBaseline("b", records(VAL, KINDS), records(worse, KINDS))
    assert [c.k for c in after.choices()] == [c.k for c in before.choices()]
    assert (before.choices()[1].test_reward, after.choices()[1].test_reward) == (1.0, 0.0)
    other = FixedBaseline("other", records({2: [0.6] * 4}, KINDS), records({2: [0.0] * 4}, KINDS))
    assert best_training_free([before, other]).name == best_training_free([after, other]).name == \
        "b, k per predicted kind"


def test_a_k_above_max_k_is_never_chosen_though_its_records_are_kept():
    baseline = FixedBaseline("b", records(VAL, KINDS), records(TEST, KINDS), max_k=1)
    assert baseline.ks == [0, 1] and 3 in baseline.val
    assert dataclasses.replace(baseline, max_k=None).ks == [0, 1, 3]


def test_a_val_tie_goes_to_fewer_documents():
    assert choose_k({5: 0.6, 2: 0.6, 3: 0.4}) == 2


def test_the_best_fixed_baseline_is_the_best_on_val_not_on_test_and_the_oracle_is_never_shipped():
    on_val = FixedBaseline("question", records({1: [0.3]}, ["visual"]), records({1: [0.1]}, ["visual"]))
    on_test = FixedBaseline("caption", records({2: [0.2]}, ["visual"]), records({2: [0.95]}, ["visual"]))
    oracle = FixedBaseline("oracle", records({-1: [1.0]}, ["visual"]), records({-1: [1.0]}, ["visual"]))
    assert best_fixed([on_test, on_val]).name == "question"
    assert best_training_free([oracle, on_test, on_val]).name == "question"


def test_name_match_is_the_share_of_the_identified_names_words_a_passage_contains():
    row = [Hit("d0", "Bor Verlabon", "built in 1919", None, "e0", 0.1, 0),
           Hit("d1", "", "Pul Verlabon sits in Lurpuras", None, "e1", 0.2, 1),
           Hit("d2", "", "a tall tower", None, "e2", 0.3, 2)]
    assert name_match(row, "Bor Verlabon").tolist() == [1.0, 0.5, 0.0]
    assert name_match(row, "").tolist() == [0.0, 0.0, 0.0]


def test_sight_reordering_puts_the_passage_stating_what_the_reader_sees_above_a_near_duplicate(zoo_dir):
    reranker = AdaptiveReranker.from_config(RerankerConfig(backbone_pretrained="zoo:tiny-clip-v2"), zoo_dir)
    pictured = Entity("e0", "Ada Lind", "circle", "red", "striped", "grey")
    question = Question("q0", render_entity(pictured), "When was this built?", ["1901"], "e0", ["d0"])
    seen = seen_description(reranker.visual_reader.read([question.image])[0])
    twin = seen.replace("striped", "dotted")
    rows = [("d1", twin, 0.50), ("d0", seen, 0.49), ("d2", "a tall tower", 0.30)]
    hits = [Hit(doc, "", text, None, "e", score, j) for j, (doc, text, score) in enumerate(rows)]
    pipeline = SimpleNamespace(reranker=reranker)
    reordered = reorder([hits], sight_scores(pipeline, [hits], [seen]))
    assert [hit.doc_id for hit in reordered[0]] == ["d0", "d1", "d2"]
    far_apart = [dataclasses.replace(hits[0], score=3.0), *hits[1:]]
    assert [hit.doc_id for hit in reorder([far_apart], sight_scores(pipeline, [far_apart], [seen]))[0]] \
        == ["d1", "d0", "d2"]


def test_the_sight_query_is_what_the_reader_sees_followed_by_the_question():
    question = Question("q0", render_entity(Entity("e0", "Ada Lind", "circle", "red", "striped", "grey")),
                        "When was this built?", ["1901"])
    assert query_texts("sight+question", [question], ["red striped circle pictured on grey"]) == [
        "red striped circle pictured on grey when was this built"]


def test_reorder_sorts_each_row_by_descending_score_and_keeps_retrieval_order_on_ties():
    hits = [[Hit(f"d{j}", "", "", None, "", 0.0, j) for j in range(4)]]
    assert [h.doc_id for h in reorder(hits, [np.array([0.1, 0.3, 0.1, 0.2])])[0]] == ["d1", "d3", "d0", "d2"]
