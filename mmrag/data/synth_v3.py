"""World v3: knowledge demand that no question's wording reveals, passages that mislead, a KB of lookalikes.

Same entities, families and pictures as v2 (`world.py`, `render.py`); what differs is which
evidence a question needs, decided by the pictured entity, not by the question's wording:

* a look question ("What colour is this?") is `visual` when the entity's pictures show that
  attribute; when its pictures show another value (taken during a repainting, under wraps, against
  another backdrop) it is `one-fact` if the KB states the attribute in the entity's descriptions,
  `two-fact` if its descriptions give it through an anchor landmark ("painted the same colour as
  X") whose own passage states it;
* a fact question ("Who designed this?") is `one-fact` when the KB states the fact for the entity,
  `two-fact` when it links the entity to an anchor ("designed by the architect of X") and states
  the anchor's fact in another passage.

Each question slot draws its kind from `WorldV3Options.kind_mix` and, if it needs the KB, whether it
asks about the look (`LOOK_SHARE`) or a fact; the entity's pictures and KB are then drawn to make
that demand true. Besides, the KB holds superseded statements about the entity (a wrong value in
templates of their own, `wording_v3.SUPERSEDED*`), so keeping every passage of the entity can
mislead, and text-only lookalike landmarks (a look one attribute away, facts of their own).
Every word comes from `mmrag.data.wording_v3`; everything derives from one `random.Random(seed)`.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from mmrag.data import wording_v3
from mmrag.data.dataset import KINDS, ONE_FACT, TWO_FACT, VISUAL, Doc, Question
from mmrag.data.question_kinds import ONE_FACT_TEMPLATES, VISUAL_TEMPLATES
from mmrag.data.render import render_entity
from mmrag.data.synth_v2 import minted_word_exclusions
from mmrag.data.wording import ATTRIBUTES, VOCABULARIES
from mmrag.data.world import RELATIONS, TEXTURES, Entity, WordMint, World, build_world, draw_entities

QUESTIONS_PER_ENTITY = 10
LOOK_SHARE = 0.6
"""Of the questions that need the KB, the fraction that ask about the look (the rest ask a fact). Look questions
are the only ones that can be visual, so the larger this share, the less a question's words say about its kind."""
SUPERSEDED_FACT_RATE = 0.3
"""Chance that the KB also holds a superseded (wrong) statement of a given fact of an entity."""
SUPERSEDED_LOOK_RATE = 0.3
"""Chance that the KB also holds a superseded (wrong) look of an entity."""
LOOKALIKES_PER_ENTITY = 2
"""Text-only landmarks per entity whose look differs from the entity's in one attribute."""
FACTS_PER_LOOKALIKE = 2
MOST_STATED_HIDDEN = 2
"""Most attributes an entity's pictures hide whose words its descriptions state (at most one more is linked)."""


@dataclass(frozen=True)
class WorldV3Options:
    """What the world-sweep options of `mmrag synth --world v3` change."""

    family_sizes: tuple[int, int] = (3, 4)
    """Smallest and largest near-duplicate family (members differ in texture: at most 4)."""
    kind_mix: tuple[float, float, float] = (0.3, 0.4, 0.3)
    """Expected fractions of visual, one-fact and two-fact questions."""

    def __post_init__(self) -> None:
        smallest, largest = self.family_sizes
        if not 1 <= smallest <= largest <= len(TEXTURES):
            raise ValueError(f"family_sizes: expected smallest,largest with 1 <= smallest <= largest <= "
                             f"{len(TEXTURES)} (a family's members differ in texture), got {smallest},{largest}")
        if len(self.kind_mix) != len(KINDS) or min(self.kind_mix) < 0 or abs(sum(self.kind_mix) - 1) > 1e-6:
            raise ValueError(f"kind_mix: expected three fractions >= 0 (visual, one-fact, two-fact) summing to 1, "
                             f"got {','.join(map(str, self.kind_mix))}")


@dataclass(frozen=True)
class Slot:
    """One question of an entity: its kind, whether it asks about the look or a fact, which one, in which words."""

    kind: str
    group: str
    """"look" (an attribute) or "fact" (a relation)."""
    item: str
    """The attribute or relation asked."""
    template: str


@dataclass
class EntityPlan:
    """What one entity's questions ask and where the KB answers them, drawn before its docs are written."""

    slots: list[Slot]
    shown: Entity
    """The entity as its pictures show it (hidden attributes replaced)."""
    look: wording_v3.Look
    """What the KB says it looks like."""
    linked_relations: set[str]
    """Relations the KB gives through an anchor (the others it states directly)."""
    gold: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    """(group, attribute or relation) -> the doc ids that answer it."""


class WorldV3Builder:
    """The three functions `build_world` takes, sharing one word mint for anchors, lookalikes and wrong values."""

    def __init__(self, options: WorldV3Options) -> None:
        self.options = options
        self.mint: WordMint | None = None

    def draw(self, num_entities: int, rng: random.Random) -> list[Entity]:
        exclusions = " ".join([minted_word_exclusions(), *wording_v3.templates()])
        entities = draw_entities(num_entities, rng, self.options.family_sizes, exclusions)
        issued = " ".join(f"{e.name} {' '.join(e.facts.values())}" for e in entities)
        self.mint = WordMint(rng, forbidden_text=f"{exclusions} {issued}")
        return entities

    def add_entity_docs(self, entity: Entity, image_size: int, rng: random.Random, docs: list[Doc]) -> EntityPlan:
        """Append the entity's picture doc, then its passages, anchors' passages and lookalikes in shuffled order."""
        plan = self._plan(entity, rng)
        passages: list[_Passage] = []
        for relation, value in entity.facts.items():
            if relation in plan.linked_relations:
                anchor = self._landmark_name()
                passages.append(_Passage(wording_v3.link(entity.name, plan.look, relation, anchor, rng),
                                         entity.name, entity.entity_id, ("fact", relation)))
                passages.append(_Passage(wording_v3.anchor_fact(anchor, relation, value, rng), anchor, "",
                                         ("fact", relation)))
            else:
                passages.append(_Passage(wording_v3.direct_fact(entity.name, plan.look, relation, value, rng),
                                         entity.name, entity.entity_id, ("fact", relation)))
            if rng.random() < SUPERSEDED_FACT_RATE:
                wrong = self._other_value(relation, value, rng)
                passages.append(_Passage(wording_v3.superseded_fact(entity.name, plan.look, relation, wrong, rng),
                                         entity.name, entity.entity_id))
        if plan.look.linked_attribute is not None:
            attribute, anchor = plan.look.linked_attribute, plan.look.anchor
            passages.append(_Passage(wording_v3.anchor_attribute(anchor, attribute, getattr(entity, attribute), rng),
                                     anchor, "", ("look", attribute)))
        if rng.random() < SUPERSEDED_LOOK_RATE:
            passages.append(_Passage(wording_v3.superseded_look(entity.name, _one_attribute_off(entity, rng), rng),
                                     entity.name, entity.entity_id))
        passages.append(_Passage(wording_v3.aside(entity.name, plan.look, rng), entity.name, entity.entity_id))
        for _ in range(LOOKALIKES_PER_ENTITY):
            passages.extend(self._lookalike(entity, rng))
        rng.shuffle(passages)

        picture_id = _append(docs, entity.name, wording_v3.caption(entity.name, plan.look, rng), entity.entity_id,
                             render_entity(plan.shown, image_size))
        for attribute in ATTRIBUTES:
            plan.gold[("look", attribute)] = [picture_id]
        for passage in passages:
            doc_id = _append(docs, passage.title, passage.text, passage.entity_id)
            if passage.answers is not None:
                plan.gold.setdefault(passage.answers, []).append(doc_id)
        return plan

    def entity_questions(self, entity: Entity, plan: EntityPlan, image_size: int, rng: random.Random) -> list[Question]:
        """One question per slot, each with its own augmented view of the entity as its pictures show it."""
        questions = []
        for index, slot in enumerate(plan.slots):
            answer = getattr(entity, slot.item) if slot.group == "look" else entity.facts[slot.item]
            gold = [] if slot.kind == VISUAL else plan.gold[slot.group, slot.item]
            view_rng = np.random.default_rng(rng.getrandbits(64))
            questions.append(Question(
                id=f"{entity.entity_id}-q{index}", image_source=render_entity(plan.shown, image_size, view_rng),
                question=slot.template, answers=[answer], entity_id=entity.entity_id, gold_doc_ids=list(gold),
                kind=slot.kind))
        return questions

    def _plan(self, entity: Entity, rng: random.Random) -> EntityPlan:
        """Each slot's kind and group, then the hidden attributes and linked relations that make them true."""
        kinds = rng.choices(KINDS, weights=self.options.kind_mix, k=QUESTIONS_PER_ENTITY)
        groups = ["look" if kind == VISUAL or rng.random() < LOOK_SHARE else "fact" for kind in kinds]
        needed = Counter(zip(kinds, groups))
        attributes = rng.sample(ATTRIBUTES, len(ATTRIBUTES))
        linked_attributes = attributes[:min(1, needed[TWO_FACT, "look"])]
        stated_attributes = attributes[len(linked_attributes):][:min(MOST_STATED_HIDDEN, needed[ONE_FACT, "look"])]
        relations = rng.sample(list(RELATIONS), len(RELATIONS))
        # Unasked relations are linked or direct too, so the KB's shape says nothing about what is asked.
        fewest, most = min(1, needed[TWO_FACT, "fact"]), len(relations) - min(1, needed[ONE_FACT, "fact"])
        linked_relations = relations[:rng.randint(fewest, most)]
        items = {(VISUAL, "look"): [a for a in attributes if a not in linked_attributes + stated_attributes],
                 (ONE_FACT, "look"): stated_attributes, (TWO_FACT, "look"): linked_attributes,
                 (ONE_FACT, "fact"): [r for r in relations if r not in linked_relations],
                 (TWO_FACT, "fact"): linked_relations}
        decks: dict[tuple[str, str], list[tuple[str, str]]] = {}
        slots = []
        for kind, group in zip(kinds, groups):
            deck = decks.setdefault((kind, group), [])
            if not deck:  # every (item, wording) once before any twice
                templates = VISUAL_TEMPLATES if group == "look" else ONE_FACT_TEMPLATES
                pairs = [(item, template) for item in items[kind, group] for template in templates[item]]
                deck.extend(rng.sample(pairs, len(pairs)))
            slots.append(Slot(kind, group, *deck.pop()))
        hidden = linked_attributes + stated_attributes
        shown = dataclasses.replace(entity, **{a: _other_word(a, getattr(entity, a), rng) for a in hidden})
        look = wording_v3.Look.of(entity)
        if linked_attributes:
            look = dataclasses.replace(look, linked_attribute=linked_attributes[0], anchor=self._landmark_name())
        return EntityPlan(slots, shown, look, set(linked_relations))

    def _landmark_name(self) -> str:
        return f"{self.mint.word(1, 2)} {self.mint.word(2, 3)}"

    def _other_value(self, relation: str, value: str, rng: random.Random) -> str:
        while (other := RELATIONS[relation].draw_value(rng, self.mint)) == value:
            pass
        return other

    def _lookalike(self, entity: Entity, rng: random.Random) -> list[_Passage]:
        """Passages of a text-only landmark whose look differs from `entity`'s in one attribute."""
        look, name = _one_attribute_off(entity, rng), self._landmark_name()
        return [_Passage(wording_v3.direct_fact(name, look, relation, RELATIONS[relation].draw_value(rng, self.mint),
                                                rng), name, "")
                for relation in rng.sample(list(RELATIONS), FACTS_PER_LOOKALIKE)]


@dataclass(frozen=True)
class _Passage:
    text: str
    title: str
    entity_id: str
    """The pictured entity it is about; empty for anchors and lookalikes."""
    answers: tuple[str, str] | None = None
    """The (group, attribute or relation) it is evidence for, if any."""


def _one_attribute_off(entity: Entity, rng: random.Random) -> wording_v3.Look:
    words = dict(wording_v3.Look.of(entity).words)
    attribute = rng.choice(ATTRIBUTES)
    words[attribute] = _other_word(attribute, words[attribute], rng)
    return wording_v3.Look(words)


def _other_word(attribute: str, word: str, rng: random.Random) -> str:
    return rng.choice([w for w in VOCABULARIES[attribute] if w != word])


def _append(docs: list[Doc], title: str, text: str, entity_id: str, image=None) -> str:
    doc_id = f"d{len(docs):06d}"
    docs.append(Doc(doc_id, title, text, image, entity_id))
    return doc_id


def make_world_v3(num_entities: int, seed: int, image_size: int = 64, options: WorldV3Options = WorldV3Options(),
                  progress: bool = False) -> World:
    """Entities, KB docs and per-split questions of world v3, rendered at `image_size` pixels."""
    builder = WorldV3Builder(options)
    return build_world(num_entities, seed, image_size, builder.draw, builder.add_entity_docs,
                       builder.entity_questions, progress)
