"""What the zoo reader is fitted and measured on: (picture, question, passages) -> answer cases.

`zoo:tiny-lvlm-reader` (`mmrag.zoo.fit_reader`) is the `hf` generator's frozen LVLM. It is fitted on
cases drawn from a world of its own (entities no split of any dataset holds) and measured on cases of
another. A case asks one of the dataset's questions about a pictured entity and hands the reader a
list of passages in the KB's wording, in any order:

* gold: the entity's own passage stating an asked relation;
* distractor: any other passage (another relation or an aside of the entity, a passage of a
  near-duplicate or of any other entity, a picture caption);
* misleading: a passage about the entity itself (its name, its description) stating a wrong value
  for an asked relation, as a superseded or conflicting statement would.

The answer a case is fitted to is what its passages state, read in order: for each asked relation,
the value of the first passage (gold or misleading) that states it within the reader's evidence
bound; the true value when none does (unknowable from the passages: the reader learns to guess);
for a visual question, the attribute the picture shows. Which passage wins, how far the reader
reads and what it does with distractors are therefore learned from examples, not written as rules.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from mmrag.data.dataset import ONE_FACT, TWO_FACT, VISUAL
from mmrag.data.question_kinds import (
    ONE_FACT_TEMPLATES,
    TWO_FACT_TEMPLATES,
    VISUAL_TEMPLATES,
    two_fact_answer,
    two_fact_question,
)
from mmrag.data.render import render_entity
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import KB_WORDING, Wording
from mmrag.data.world import RELATIONS, Entity

GOLD = "gold"
DISTRACTOR = "distractor"
MISLEADING = "misleading"


@dataclass
class Passage:
    text: str
    role: str
    """GOLD, DISTRACTOR or MISLEADING."""
    relation: str | None = None
    """The asked relation a gold or misleading passage states."""
    value: str | None = None
    """The value it states for that relation."""


@dataclass
class ReaderCase:
    image: Image.Image
    question: str
    kind: str
    passages: list[Passage]
    truth: str
    """The entity's true answer (what evaluation scores against)."""
    relations: tuple[str, ...] = ()
    """Asked relations, in the order asked (none for a visual question)."""
    tags: dict = field(default_factory=dict)

    @property
    def documents(self) -> list[str]:
        return [p.text for p in self.passages]

    def stated_answer(self, visible: int) -> str:
        """The answer the first `visible` passages state (see the module docstring); the fitting target."""
        if self.kind == VISUAL:
            return self.truth
        values = []
        for relation in self.relations:
            stated = next((p.value for p in self.passages[:visible]
                           if p.role in (GOLD, MISLEADING) and p.relation == relation), None)
            values.append(stated)
        if any(value is None for value in values):
            return self.truth
        return values[0] if len(values) == 1 else two_fact_answer(*values)

    def misleading_answer(self) -> str | None:
        """The answer a one-fact case's misleading passage states, or None when it has none."""
        values = [p.value for p in self.passages if p.role == MISLEADING]
        return values[0] if values and self.kind == ONE_FACT else None


@dataclass
class ReaderWorld:
    """Entities of a world of the reader's own, each with a few rendered views, and the wording passages use."""

    entities: list[Entity]
    views: dict[str, list[Image.Image]]
    wording: Wording
    families: dict[int, list[Entity]]

    def view(self, entity: Entity, rng: random.Random) -> Image.Image:
        return rng.choice(self.views[entity.entity_id])


def reader_world(num_entities: int, seed: int, views: int, wording: Wording = KB_WORDING,
                 draw: Callable[[int, random.Random], list[Entity]] = draw_entities_v2,
                 image_size: int = 64) -> ReaderWorld:
    """`num_entities` drawn by `draw` from `seed`, each rendered in `views` augmented views."""
    entities = draw(num_entities, random.Random(seed))
    view_rng = np.random.default_rng(seed)
    rendered = {e.entity_id: [render_entity(e, image_size, view_rng) for _ in range(views)] for e in entities}
    families: dict[int, list[Entity]] = {}
    for entity in entities:
        families.setdefault(entity.family, []).append(entity)
    return ReaderWorld(entities, rendered, wording, families)


def _distractor(world: ReaderWorld, entity: Entity, asked: tuple[str, ...], rng: random.Random) -> Passage:
    """Another passage: of the entity itself (not an asked relation), of a near-duplicate, or of anyone."""
    draw = rng.random()
    family = [e for e in world.families[entity.family] if e is not entity]
    if draw < 0.3:
        other_relations = [r for r in RELATIONS if r not in asked]
        choice = rng.randrange(len(other_relations) + 2)
        if choice < len(other_relations):
            text = world.wording.fact(entity, other_relations[choice], rng)
        elif choice == len(other_relations):
            text = world.wording.aside(entity, rng)
        else:
            text = world.wording.caption(entity, rng)
        return Passage(text, DISTRACTOR)
    other = rng.choice(family) if family and draw < 0.6 else rng.choice(world.entities)
    while other is entity:
        other = rng.choice(world.entities)
    relation = rng.choice(list(RELATIONS))
    text = world.wording.fact(other, relation, rng) if rng.random() < 0.8 else world.wording.aside(other, rng)
    return Passage(text, DISTRACTOR)


def _wrong_value(world: ReaderWorld, entity: Entity, relation: str, rng: random.Random) -> str:
    while True:
        value = rng.choice(world.entities).facts[relation]
        if value != entity.facts[relation]:
            return value


def misleading_passage(world: ReaderWorld, entity: Entity, relation: str, rng: random.Random) -> Passage:
    """A passage naming and describing `entity` that states another entity's value for `relation`."""
    wrong = _wrong_value(world, entity, relation, rng)
    impostor = dataclasses.replace(entity, facts={**entity.facts, relation: wrong})
    return Passage(world.wording.fact(impostor, relation, rng), MISLEADING, relation, wrong)


def gold_passage(world: ReaderWorld, entity: Entity, relation: str, rng: random.Random) -> Passage:
    return Passage(world.wording.fact(entity, relation, rng), GOLD, relation, entity.facts[relation])


def ask(entity: Entity, kind: str, rng: random.Random) -> tuple[str, tuple[str, ...], str]:
    """(question, asked relations, true answer) of `kind` about `entity`, in the dataset's question wording."""
    if kind == VISUAL:
        attribute = rng.choice(list(VISUAL_TEMPLATES))
        return rng.choice(VISUAL_TEMPLATES[attribute]), (), getattr(entity, attribute)
    if kind == ONE_FACT:
        relation = rng.choice(list(RELATIONS))
        return rng.choice(ONE_FACT_TEMPLATES[relation]), (relation,), entity.facts[relation]
    first, second = rng.sample(list(RELATIONS), 2)
    return (two_fact_question(first, second, rng.choice(TWO_FACT_TEMPLATES)), (first, second),
            two_fact_answer(entity.facts[first], entity.facts[second]))


def build_case(world: ReaderWorld, entity: Entity, kind: str, rng: random.Random, distractors: int,
               gold: bool = True, misleading: bool = False, gold_position: int | None = None,
               misleading_first: bool | None = None) -> ReaderCase:
    """One case: `distractors` other passages, the gold passage(s) (when `gold`) and a misleading one (when
    `misleading`, fact questions only), shuffled; `gold_position` (0-based) pins the first gold passage,
    `misleading_first` orders the misleading passage before or after it."""
    question, relations, truth = ask(entity, kind, rng)
    passages = [_distractor(world, entity, relations, rng) for _ in range(distractors)]
    rng.shuffle(passages)
    golds = [gold_passage(world, entity, r, rng) for r in relations] if gold else []
    for passage in golds:
        position = rng.randint(0, len(passages)) if gold_position is None else min(gold_position, len(passages))
        passages.insert(position, passage)
        gold_position = None
    if misleading and relations:
        wrong = misleading_passage(world, entity, rng.choice(relations), rng)
        if misleading_first is None or not golds:
            passages.insert(rng.randint(0, len(passages)), wrong)
        else:
            anchor = passages.index(golds[0])
            passages.insert(anchor if misleading_first else anchor + 1, wrong)
    return ReaderCase(world.view(entity, rng), question, kind, passages, truth, relations)


KIND_WEIGHTS = {VISUAL: 0.25, ONE_FACT: 0.55, TWO_FACT: 0.2}
NO_EVIDENCE_RATE = 0.15
GOLD_RATE = 0.85
MISLEADING_RATE = 0.25
MAX_DISTRACTORS = 5


def sample_case(world: ReaderWorld, rng: random.Random) -> ReaderCase:
    """A fitting case: kind by `KIND_WEIGHTS`; no evidence at `NO_EVIDENCE_RATE`; else 0..`MAX_DISTRACTORS`
    distractors, the gold passages at `GOLD_RATE`, a misleading passage at `MISLEADING_RATE`, at random places."""
    entity = rng.choice(world.entities)
    kind = rng.choices(list(KIND_WEIGHTS), weights=list(KIND_WEIGHTS.values()))[0]
    if rng.random() < NO_EVIDENCE_RATE:
        return build_case(world, entity, kind, rng, distractors=0, gold=False)
    return build_case(world, entity, kind, rng, distractors=rng.randint(0, MAX_DISTRACTORS),
                      gold=rng.random() < GOLD_RATE, misleading=rng.random() < MISLEADING_RATE)
