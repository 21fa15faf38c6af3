"""The grounded generator (world v2's) on hand-built evidence: the image answers a visual question unless a
passage states the attribute; facts come from the first passage stating them; a two-fact answer needs both."""

from __future__ import annotations

import random

import numpy as np
import pytest

from mmrag.config import GeneratorConfig
from mmrag.data.question_kinds import demand_of, question_texts
from mmrag.data.render import render_entity
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import KB_WORDING
from mmrag.data.world import Entity
from mmrag.metrics.answers import exact_match
from mmrag.model_refs import resolve
from mmrag.models.generator import GroundedGenerator, build_generator
from mmrag.models.visual_reader import load_visual_reader

PICTURED = Entity("e0", "Bako Tirun", "square", "red", "striped", "grey",
                  {"year": "1523", "city": "Valo", "architect": "Mera Dusk", "height": "120"})
SIBLING = Entity("e1", "Sima Korel", "square", "red", "dotted", "grey",
                 {"year": "1777", "city": "Pell", "architect": "Tor Vane", "height": "88"})


@pytest.fixture(scope="module")
def generator(zoo_dir) -> GroundedGenerator:
    return build_generator(GeneratorConfig(), zoo_dir)


def passage(entity: Entity, relation: str, template: int = 0) -> str:
    return KB_WORDING.facts[relation][template].format(
        name=entity.name, value=entity.facts[relation],
        description=KB_WORDING.descriptions[0].format(**{a: getattr(entity, a) for a in
                                                         ("colour", "shape", "texture", "background")}))


def ask(generator, question: str, documents: list[str]) -> str:
    (answer,) = generator.answer([render_entity(PICTURED, 64)], [question], [documents])
    return answer


def test_with_no_evidence_a_visual_question_is_answered_from_the_image(generator):
    assert ask(generator, "What colour is this?", []) == "red"
    assert ask(generator, "What pattern is on this?", []) == "striped"
    assert ask(generator, "What is the backdrop colour?", []) == "grey"


def test_a_passage_stating_the_attribute_overrides_the_image(generator):
    # The near-duplicate's passage says "dotted": the reader believes it over the striped picture.
    misleading = passage(SIBLING, "city")
    assert ask(generator, "What pattern is on this?", [misleading]) == "dotted"
    assert ask(generator, "What pattern is on this?", [passage(PICTURED, "year"), misleading]) == "striped"
    # A passage that describes nothing (no KB description in it) leaves the image in charge.
    assert ask(generator, "What pattern is on this?", ["Nothing here is described."]) == "striped"


def test_a_fact_comes_from_the_first_passage_that_states_it(generator):
    documents = [passage(PICTURED, "city"), passage(SIBLING, "year", 1), passage(PICTURED, "year", 2)]
    assert ask(generator, "When was this built?", documents) == "1777"
    assert ask(generator, "When was this built?", documents[2:]) == "1523"
    assert ask(generator, "Who designed this?", documents) == "unknown"
    assert ask(generator, "When was this built?", []) == "unknown"


def test_a_two_fact_answer_needs_both_passages_in_any_order(generator):
    question = "When was it built and who designed it?"
    reference = ["1523 and Mera Dusk"]
    year, architect = passage(PICTURED, "year"), passage(PICTURED, "architect", 1)
    assert ask(generator, question, [year]) == "1523 and unknown"
    assert exact_match(ask(generator, question, [year]), reference) == 0.0
    assert exact_match(ask(generator, question, [architect]), reference) == 0.0
    assert exact_match(ask(generator, question, [architect, year]), reference) == 1.0


def test_every_kb_paraphrase_parses_back_and_every_question_has_a_demand():
    rng = random.Random(0)
    for relation, templates in KB_WORDING.facts.items():
        for index in range(len(templates)):
            text = passage(PICTURED, relation, index)
            assert KB_WORDING.parse_fact(relation, text) == PICTURED.facts[relation], text
            assert [r for r in KB_WORDING.facts if KB_WORDING.parse_fact(r, text)] == [relation]
        stated = KB_WORDING.parse_description(KB_WORDING.fact(SIBLING, relation, rng))
        assert stated == {"colour": "red", "shape": "square", "texture": "dotted", "background": "grey"}
    kinds = {demand_of(question).kind for question in question_texts()}
    assert kinds == {"visual", "one-fact", "two-fact"}


def test_the_eye_reads_every_attribute_of_held_out_world_v2_pictures(zoo_dir):
    # Held-out near-duplicate families, each view augmented as a question's is. Fitted on a family world of its
    # own, the reader got shape right 0.52 of the time (it read shape off colour and background), which made
    # retrieval look useful on visual questions; fitted on one view of each of 6000 independently drawn things it
    # read ~0.95, mistaking hexagons for circles; on four views each it reads ~0.99.
    entities = draw_entities_v2(40, random.Random(123))
    view_rng = np.random.default_rng(123)
    views = [(entity, render_entity(entity, 64, view_rng)) for entity in entities for _ in range(3)]
    readings = load_visual_reader(resolve("zoo:visual-reader", zoo_dir)).read([image for _, image in views])
    accuracy = {a: np.mean([reading[a] == getattr(entity, a) for (entity, _), reading in zip(views, readings)])
                for a in ("colour", "shape", "texture", "background")}
    assert accuracy["shape"] >= 0.97, accuracy
    assert min(accuracy[a] for a in ("colour", "texture", "background")) >= 0.97, accuracy
