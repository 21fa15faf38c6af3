"""The extractive reader answers from the documents it is given, in order, and from nothing else."""

from __future__ import annotations

import re

import pytest

from mmrag.data.dataset import SPLITS, load_kb, load_questions
from mmrag.data.synth import RELATIONS, make_world
from mmrag.models.extractive_reader import UNKNOWN, ExtractiveReader


@pytest.fixture(scope="module")
def world():
    return make_world(12, seed=5, image_size=32)


@pytest.fixture(scope="module")
def reader():
    return ExtractiveReader()


def passage(world, entity, relation: str) -> str:
    template = RELATIONS[relation].passage_template
    text = template.format(name=entity.name, description=entity.description, value=entity.facts[relation])
    assert any(doc.text == text for doc in world.docs)
    return text


def test_every_template_maps_to_its_relation(reader):
    for name, relation in RELATIONS.items():
        for template in relation.question_templates:
            assert reader.relation_of(template) == name
    assert reader.relation_of("What colour is the sky?") is None


def test_gold_passage_answers_every_question_of_the_dataset(synth_dir, reader):
    texts = {doc.doc_id: doc.text for doc in load_kb(synth_dir)}
    questions = [q for split in SPLITS for q in load_questions(synth_dir, split)]
    answers = reader.answer_batch([q.question for q in questions], [[texts[q.gold_doc_ids[0]]] for q in questions])
    correct = sum(answer == q.answers[0] for answer, q in zip(answers, questions))
    assert correct == len(questions) == 192


def test_near_duplicate_passage_gives_its_own_wrong_answer(world, reader):
    entity = world.entities[0]
    sibling = next(e for e in world.entities[1:] if e.family == entity.family)
    for relation, r in RELATIONS.items():
        question = r.question_templates[0]
        assert reader.answer(question, [passage(world, entity, relation)]) == entity.facts[relation]
        wrong = reader.answer(question, [passage(world, sibling, relation)])
        assert wrong == sibling.facts[relation] != entity.facts[relation]


def test_first_matching_document_wins_and_others_are_skipped(world, reader):
    first, second = world.entities[0], world.entities[5]
    caption = f"{first.name}: a {first.description}."
    documents = [caption, passage(world, first, "city"), passage(world, second, "year"), passage(world, first, "year")]
    assert reader.answer("When was this built?", documents) == second.facts["year"]
    assert reader.answer("When was this built?", documents[::-1]) == first.facts["year"]
    assert reader.answer("In which city is this?", documents) == first.facts["city"]


def test_unknown_without_evidence_of_the_asked_relation(world, reader):
    entity = world.entities[2]
    other_relations = [passage(world, entity, r) for r in ("year", "city", "architect")]
    distractors = [doc.text for doc in world.docs if doc.entity_id == entity.entity_id and not any(
        re.search(r.answer_pattern, doc.text) for r in RELATIONS.values())]
    assert len(distractors) == 2  # the caption and the distractor passage
    assert reader.answer("How tall is this?", []) == UNKNOWN
    assert reader.answer("How tall is this?", other_relations + distractors) == UNKNOWN
    assert reader.answer("What colour is this?", [passage(world, entity, "height")]) == UNKNOWN
    assert reader.answer_batch(["How tall is this?", "Who designed this?"], [[], other_relations]) == [
        UNKNOWN, entity.facts["architect"]]
    with pytest.raises(ValueError, match="one list per question"):
        reader.answer_batch(["How tall is this?"], [])
