"""World v2, the default synthetic world: varying knowledge demand, and a KB that speaks its own language.

Same entities and pictures as v1 (`world.py`, `render.py`), with larger near-duplicate families
(3 or 4 members sharing shape, colour and background), and per entity:

* KB docs: a picture doc, one passage per relation, one aside stating no fact, each worded by
  one of `KB_WORDING`'s paraphrase templates (no zoo model is fitted on them);
* questions (`question_kinds`): 3 visual, 5 one-fact (every relation once, one twice) and 2
  two-fact, so 30 / 50 / 20 % of each split; a visual question's gold evidence is none (the
  image suffices), a one-fact question's its relation's passage, a two-fact question's both.

`generate_dataset(world="v2")` (in `synth.py`) writes it; everything derives from one
`random.Random(seed)`, so the same seed writes the same files.
"""

from __future__ import annotations

import random

import numpy as np

from mmrag.data.dataset import ONE_FACT, TWO_FACT, VISUAL, Doc, Question
from mmrag.data.question_kinds import (
    ONE_FACT_TEMPLATES,
    TWO_FACT_TEMPLATES,
    VISUAL_TEMPLATES,
    question_texts,
    two_fact_answer,
    two_fact_question,
)
from mmrag.data.render import render_entity
from mmrag.data.wording import CAPTIONER_WORDING, GENERIC_WORDING, KB_WORDING
from mmrag.data.world import RELATIONS, Entity, append_entity_doc, World, build_world, draw_entities

FAMILY_SIZES = (3, 4)
VISUAL_PER_ENTITY = 3
ONE_FACT_PER_ENTITY = 5
TWO_FACT_PER_ENTITY = 2
KIND_FRACTIONS = {VISUAL: 0.3, ONE_FACT: 0.5, TWO_FACT: 0.2}
"""What the per-entity counts above give, in every split."""


def minted_word_exclusions() -> str:
    """Text no minted name may occur in: every v2 question and every template of every wording."""
    wordings = (KB_WORDING, CAPTIONER_WORDING, GENERIC_WORDING)
    return " ".join([*question_texts(), *(t for wording in wordings for t in wording.templates())])


def draw_entities_v2(num_entities: int, rng: random.Random) -> list[Entity]:
    return draw_entities(num_entities, rng, FAMILY_SIZES, minted_word_exclusions())


def make_world_v2(num_entities: int, seed: int, image_size: int = 64, progress: bool = False) -> World:
    """Entities, KB docs and per-split questions of world v2, rendered at `image_size` pixels."""
    return build_world(num_entities, seed, image_size, draw_entities_v2, _add_entity_docs, _entity_questions, progress)


def _add_entity_docs(entity: Entity, image_size: int, rng: random.Random, docs: list[Doc]) -> dict[str, str]:
    """Append the entity's docs (picture, one passage per relation, aside); returns relation -> doc_id."""

    def add(text: str, image=None) -> str:
        return append_entity_doc(docs, entity, text, image)

    add(KB_WORDING.caption(entity, rng), render_entity(entity, image_size))
    passage_ids = {relation: add(KB_WORDING.fact(entity, relation, rng)) for relation in RELATIONS}
    add(KB_WORDING.aside(entity, rng))
    return passage_ids


def _entity_questions(entity: Entity, passage_ids: dict[str, str], image_size: int,
                      rng: random.Random) -> list[Question]:
    """(kind, question, answer, gold doc ids) drawn for the entity, then each given its own augmented view."""
    drawn: list[tuple[str, str, str, list[str]]] = []
    for attribute in rng.sample(list(VISUAL_TEMPLATES), VISUAL_PER_ENTITY):
        drawn.append((VISUAL, rng.choice(VISUAL_TEMPLATES[attribute]), getattr(entity, attribute), []))
    relations = list(RELATIONS) + [rng.choice(list(RELATIONS))]
    asked = rng.sample([(r, t) for r in RELATIONS for t in ONE_FACT_TEMPLATES[r]], len(RELATIONS) * 3)
    for relation in relations[:ONE_FACT_PER_ENTITY]:
        template = next(t for r, t in asked if r == relation)
        asked.remove((relation, template))
        drawn.append((ONE_FACT, template, entity.facts[relation], [passage_ids[relation]]))
    pairs = rng.sample([(a, b) for a in RELATIONS for b in RELATIONS if a < b], TWO_FACT_PER_ENTITY)
    for first, second in pairs:
        if rng.random() < 0.5:
            first, second = second, first
        drawn.append((TWO_FACT, two_fact_question(first, second, rng.choice(TWO_FACT_TEMPLATES)),
                      two_fact_answer(entity.facts[first], entity.facts[second]),
                      [passage_ids[first], passage_ids[second]]))
    questions = []
    for index, (kind, question, answer, gold) in enumerate(drawn):
        view_rng = np.random.default_rng(rng.getrandbits(64))
        questions.append(Question(
            id=f"{entity.entity_id}-q{index}", image_source=render_entity(entity, image_size, view_rng),
            question=question, answers=[answer], entity_id=entity.entity_id, gold_doc_ids=gold, kind=kind,
        ))
    return questions
