"""Generator backends: the frozen LVLM (zoo:tiny-lvlm) answering batches, the extractive
adapter answering only from its evidence (synthetic world), and the Ray actor."""

from __future__ import annotations

import pytest
from PIL import Image

from mmrag.config import GeneratorConfig
from mmrag.models.generator import ExtractiveGenerator, build_generator
from mmrag.models.lvlm_generator import LVLMGenerator, format_evidence
from mmrag.training.stages import QuestionTable


@pytest.fixture(scope="module")
def world():
    from mmrag.data.synth import make_world

    return make_world(num_entities=6, seed=0, image_size=32)


def hf_config(zoo_dir: str, batch_size: int) -> GeneratorConfig:
    from mmrag.zoo import resolve

    return GeneratorConfig(backend="hf", model=resolve("zoo:tiny-lvlm", zoo_dir), max_new_tokens=6, batch_size=batch_size)


def test_format_evidence_numbers_documents_or_says_none():
    assert format_evidence(["A was built in 1843.", "B is in Valo."]) == "1. A was built in 1843.\n2. B is in Valo."
    assert format_evidence([]) == "(none)"


def test_lvlm_generator_answers_every_leaf_the_same_in_any_batching(zoo_dir):
    images = [Image.new("RGB", (64, 64), (220, 20, 20)), None, Image.new("RGB", (64, 64), (20, 20, 220))]
    questions = ["When was this built?", "Who designed this?", "How tall is this?"]
    evidence = [["X, the red plain circle, was built in 1843."], [], ["Y stands 120 metres tall.", "Z is in Vel."]]
    batched = build_generator(hf_config(zoo_dir, batch_size=2), zoo_dir)
    assert isinstance(batched, LVLMGenerator)
    assert batched.prompt(questions[1], []) == "Evidence:\n(none)\nQuestion: Who designed this?\nAnswer briefly."
    answers = batched.answer(images, questions, evidence)
    assert len(answers) == 3 and all(isinstance(a, str) and a == a.strip() for a in answers)
    one_at_a_time = LVLMGenerator(batched.model, batched.processor, hf_config(zoo_dir, batch_size=1))
    assert one_at_a_time.answer(images, questions, evidence) == answers
    assert not any(p.requires_grad for p in batched.model.parameters())


def test_extractive_generator_answers_only_from_its_evidence(world):
    generator = build_generator(GeneratorConfig(backend="extractive"), cache_dir="unused")
    assert isinstance(generator, ExtractiveGenerator)
    question = next(q for split in world.questions.values() for q in split if "built" in q.question)
    docs = {doc.doc_id: doc for doc in world.docs}
    gold = docs[question.gold_doc_ids[0]].text
    other_year = next(
        d.text for d in world.docs if d.entity_id != question.entity_id and "was built in" in d.text
    )
    images, questions = [question.image] * 3, [question.question] * 3
    answers = generator.answer(images, questions, [[gold], [other_year], []])
    assert answers[0] == question.answers[0]
    assert answers[1] != question.answers[0] and answers[1] in other_year
    assert answers[2] == "unknown"


def test_build_generator_names_the_missing_field():
    with pytest.raises(ValueError, match="generator.model"):
        build_generator(GeneratorConfig(backend="hf", model=""), cache_dir="unused")
    with pytest.raises(ValueError, match="evidence"):
        ExtractiveGenerator().answer([None], ["Who designed this?"], [])


def test_generator_actor_answers_and_reports_throughput(ray_session, world):
    from mmrag.actors.generator import GeneratorActor

    question = world.questions["train"][0]
    gold = next(d.text for d in world.docs if d.doc_id == question.gold_doc_ids[0])
    actor = ray_session.remote(GeneratorActor).remote(GeneratorConfig(backend="extractive"), "unused")
    table = QuestionTable.of([question])
    answers = ray_session.get(actor.answer.remote(table, [0] * 4, [[gold]] * 4))
    assert answers == [question.answers[0]] * 4
    stats = ray_session.get(actor.throughput.remote())
    assert stats["leaves"] == 4 and stats["seconds"] > 0 and stats["leaves_per_s"] == pytest.approx(4 / stats["seconds"])
