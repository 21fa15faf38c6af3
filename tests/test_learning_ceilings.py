"""The ceilings benchmark's oracles: what a perfect reranker keeps, what a perfect translator writes."""

from PIL import Image

from mmrag.data.dataset import Question
from mmrag.data.world import Entity
from mmrag.retrieval.hit import Hit
from research.zoo_ceilings.ceilings import oracle_selection, perfect_query

PICTURE = Image.new("RGB", (4, 4))


def hit(doc_id: str, entity_id: str = "e1") -> Hit:
    return Hit(doc_id, "", f"text of {doc_id}", None, entity_id, 0.5, 0)


def question(kind: str, gold: list[str], text: str = "When was this built?") -> Question:
    return Question("q", PICTURE, text, ["1900"], "e1", gold, kind)


def test_the_oracle_reranker_keeps_nothing_for_a_visual_question():
    assert oracle_selection(question("visual", []), [hit("d1"), hit("d2")]) == []


def test_the_oracle_reranker_keeps_exactly_the_retrieved_gold_passages_in_gold_order():
    candidates = [hit("d9", "e2"), hit("d3"), hit("d5"), hit("d1")]
    kept = oracle_selection(question("two-fact", ["d1", "d3"]), candidates)
    assert [h.doc_id for h in kept] == ["d1", "d3"]


def test_the_oracle_reranker_keeps_nothing_when_no_gold_passage_was_retrieved():
    assert oracle_selection(question("one-fact", ["d7"]), [hit("d1"), hit("d2")]) == []


def test_the_perfect_query_is_the_true_description_in_the_captioners_style_then_the_question():
    entity = Entity("e1", "Bor Verlabon", shape="heart", colour="yellow", texture="plain", background="olive")
    assert perfect_query(question("one-fact", ["d1"], "When was this built?"), entity) == (
        "yellow heart, plain, olive backdrop when was this built")
