"""What the zoo reader is fitted and measured on: (picture, question, passages) -> answer cases of a world v3.

`zoo:tiny-lvlm-reader` (`mmrag.zoo.fit_reader`) is the `hf` generator's frozen LVLM. It is fitted on
cases drawn from a world v3 of its own (`make_world_v3` at a seed of its own: entities of no dataset
split) and measured on cases of another. A case is one of that world's questions, its picture, and a
list of KB passages in any order, chosen from:

* gold: the question's gold passages (a direct statement; a link and its anchor's statement; a
  description stating a look the picture hides);
* misleading: a passage about the pictured entity itself that states a wrong value (v3's superseded
  statements, an old look);
* distractors: the entity's passages that say nothing of what is asked, and passages of its
  near-duplicates, of lookalike landmarks and of any other entity.

The answer a case is fitted to is what the pictured entity's own passages among those the reader
sees (within its evidence bound) state, read in order by the world's own reader
(`wording_v3.read_fact` / `read_attribute`: the first passage that gives it, a link resolved through
its anchor's statement, a superseded statement taken at its word); the true value when none does
(unknowable from the passages: the reader learns to guess); for a look question whose passages say
nothing, what the picture shows. Passages of other entities never set the answer: whether the reader
tells them apart, how far it reads and which of two conflicting statements it believes are learned
from examples, not written as rules.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from PIL import Image

from mmrag.data.dataset import ONE_FACT, TWO_FACT, VISUAL, Doc, Question
from mmrag.data.question_kinds import demand_of
from mmrag.data.synth_v3 import make_world_v3
from mmrag.data.wording_v3 import described_look, linked_anchor, read_attribute, read_fact, stated_fact
from mmrag.data.world import RELATIONS, WordMint


@dataclass
class ReaderCase:
    image: Image.Image
    question: Question
    passages: list[Doc]
    own: set[str]
    """Doc ids of the passages about the pictured entity (its own and its anchors')."""
    misleading_value: str | None = None
    """The wrong answer a misleading passage in the case states, if it holds one."""
    tags: dict = field(default_factory=dict)

    @property
    def documents(self) -> list[str]:
        return [doc.text for doc in self.passages]

    @property
    def truth(self) -> str:
        return self.question.answers[0]

    def stated_answer(self, visible: int) -> str:
        """What the pictured entity's passages among the first `visible` state (module docstring): the fitting
        target. A look question with nothing stated is answered from the picture: its true value when the
        question is visual (the picture shows it), else None (the picture shows another value, not recorded)."""
        own = [doc.text for doc in self.passages[:visible] if doc.doc_id in self.own]
        demand = demand_of(self.question.question)
        if demand.attribute is not None:
            stated = read_attribute(demand.attribute, own)
            return stated if stated is not None else (self.truth if self.question.kind == VISUAL else None)
        stated = read_fact(demand.relations[0], own)
        return self.truth if stated is None else stated


@dataclass
class ReaderWorld:
    """A world v3 held as the reader's cases need it: each question with the passages of its entity."""

    questions: list[Question]
    docs: list[Doc]
    own: dict[str, list[Doc]]
    """entity_id -> its passages and its anchors' passages."""
    family: dict[str, list[str]]
    """entity_id -> its near-duplicates' ids."""
    drills: list[Question]
    """The questions a reading drill asks: direct facts and visual looks."""


def reader_world(num_entities: int, seed: int) -> ReaderWorld:
    """World v3 of `num_entities` drawn from `seed`; every split's questions are the reader's."""
    world = make_world_v3(num_entities, seed)
    by_title: dict[str, list[Doc]] = {}
    for doc in world.docs:
        by_title.setdefault(doc.title, []).append(doc)
    own: dict[str, list[Doc]] = {}
    for entity in world.entities:
        docs = [doc for doc in world.docs if doc.entity_id == entity.entity_id]
        anchors = {anchor for doc in docs for anchor in _anchors(doc.text)}
        own[entity.entity_id] = docs + [d for anchor in sorted(anchors) for d in by_title.get(anchor, [])
                                        if d.entity_id == ""]
    families: dict[int, list[str]] = {}
    for entity in world.entities:
        families.setdefault(entity.family, []).append(entity.entity_id)
    family = {e.entity_id: [i for i in families[e.family] if i != e.entity_id] for e in world.entities}
    questions = [q for split in world.questions.values() for q in split]
    drills = [q for q in questions if q.kind == VISUAL
              or (q.kind == ONE_FACT and demand_of(q.question).attribute is None)]
    return ReaderWorld(questions, world.docs, own, family, drills)


def _anchors(text: str) -> list[str]:
    found = [anchor for relation in RELATIONS if (anchor := linked_anchor(relation, text)) is not None]
    _, _, look_anchor = described_look(text)
    return found + ([look_anchor] if look_anchor else [])


def _stated_alone(question: Question, text: str) -> str | None:
    """What one passage, read alone, states for `question` (a link without its anchor states nothing)."""
    demand = demand_of(question.question)
    if demand.attribute is not None:
        return read_attribute(demand.attribute, [text])
    return stated_fact(demand.relations[0], text)


def misleading_passages(world: ReaderWorld, question: Question) -> list[Doc]:
    """The pictured entity's passages that state a wrong answer to `question` (superseded statements, old looks)."""
    return [doc for doc in world.own[question.entity_id]
            if (stated := _stated_alone(question, doc.text)) is not None and stated != question.answers[0]]


def _says_nothing_of(question: Question, doc: Doc) -> bool:
    """A passage of the pictured entity that neither states nor links what a fact question asks."""
    relation = demand_of(question.question).relations[0]
    return (doc.doc_id not in question.gold_doc_ids and stated_fact(relation, doc.text) is None
            and linked_anchor(relation, doc.text) is None)


def _distractor(world: ReaderWorld, question: Question, exclude: set[str], rng: random.Random) -> Doc:
    """A passage that does not answer the question: (fact questions) one of the entity's own on another subject,
    a near-duplicate's, or any other entity's or landmark's."""
    own = world.own[question.entity_id]
    own_ids = {doc.doc_id for doc in own}
    fact_question = demand_of(question.question).attribute is None
    family = world.family[question.entity_id]
    for _ in range(100):
        draw = rng.random()
        if draw < 0.25 and fact_question:
            doc = rng.choice(own)
            if not _says_nothing_of(question, doc):
                continue
        elif draw < 0.55 and family:
            doc = rng.choice(world.own[rng.choice(family)])
        else:
            doc = rng.choice(world.docs)
        if doc.doc_id in exclude or (doc.doc_id in own_ids and not (fact_question and _says_nothing_of(question, doc))):
            continue
        return doc
    raise ValueError(f"no distractor found for question {question.id}")


def build_case(world: ReaderWorld, question: Question, rng: random.Random, distractors: int, gold: bool = True,
               misleading: bool = False, gold_position: int | None = None,
               misleading_first: bool | None = None) -> ReaderCase:
    """One case of `question`: `distractors` passages that do not answer it, its gold passages (when `gold`) and,
    when `misleading` and the entity has one, a passage stating a wrong answer; shuffled. `gold_position`
    (0-based) pins the first gold passage, `misleading_first` puts the misleading one just before or after it."""
    by_id = {doc.doc_id: doc for doc in world.own[question.entity_id]}
    golds = [by_id[i] for i in question.gold_doc_ids if i in by_id] if gold else []
    wrongs = misleading_passages(world, question)
    wrong = rng.choice(wrongs) if misleading and wrongs else None
    exclude = {d.doc_id for d in golds} | {d.doc_id for d in wrongs}
    passages: list[Doc] = []
    while len(passages) < distractors:
        doc = _distractor(world, question, exclude, rng)
        exclude.add(doc.doc_id)
        passages.append(doc)
    for index, doc in enumerate(golds):
        pinned = gold_position is not None and index == 0
        passages.insert(min(gold_position, len(passages)) if pinned else rng.randint(0, len(passages)), doc)
    if wrong is not None:
        if misleading_first is None or not golds:
            passages.insert(rng.randint(0, len(passages)), wrong)
        else:
            at = passages.index(golds[0])
            passages.insert(at if misleading_first else at + 1, wrong)
    misleading_value = None if wrong is None else _stated_alone(question, wrong.text)
    image = question.image
    return ReaderCase(image, question, passages, set(by_id), misleading_value)


KIND_WEIGHTS = {VISUAL: 0.3, ONE_FACT: 0.4, TWO_FACT: 0.3}
NO_EVIDENCE_RATE = 0.15
GOLD_RATE = 0.8
MISLEADING_RATE = 0.3
MAX_DISTRACTORS = 5


DRILL_DISTRACTORS = 2


def drill_case(world: ReaderWorld, rng: random.Random) -> ReaderCase:
    """A reading drill: a direct fact with its gold passage among 0..`DRILL_DISTRACTORS` others, or a visual
    question with no evidence; the strongest signal for learning to copy a value and to read the picture."""
    question = rng.choice(world.drills)
    if question.kind == VISUAL:
        return build_case(world, question, rng, distractors=0)
    return build_case(world, question, rng, distractors=rng.randint(0, DRILL_DISTRACTORS))


def copy_drill_case(world: ReaderWorld, rng: random.Random) -> ReaderCase:
    """A copy drill: a direct fact whose gold passage states a value drawn afresh (as the world draws a year,
    height, city or architect) instead of the entity's, among 0..`DRILL_DISTRACTORS` other passages. Its answer
    cannot be remembered from other cases: only copying it from the passage fits it."""
    while True:
        question = rng.choice(world.drills)
        if question.kind == VISUAL:
            continue
        case = build_case(world, question, rng, distractors=rng.randint(0, DRILL_DISTRACTORS))
        gold = next(doc for doc in case.passages if doc.doc_id in question.gold_doc_ids)
        if gold.text.count(case.truth) != 1:
            continue
        relation = RELATIONS[demand_of(question.question).relations[0]]
        value = relation.draw_value(rng, WordMint(rng, question.question))
        passages = [replace(doc, text=doc.text.replace(case.truth, value)) if doc is gold else doc
                    for doc in case.passages]
        return replace(case, question=replace(question, answers=[value]), passages=passages)


def sample_case(world: ReaderWorld, rng: random.Random) -> ReaderCase:
    """A fitting case of a random question: no evidence at `NO_EVIDENCE_RATE`; else 0..`MAX_DISTRACTORS`
    distractors, the gold passages at `GOLD_RATE`, a misleading passage (where the entity has one) at
    `MISLEADING_RATE`, at random places."""
    question = rng.choice(world.questions)
    if rng.random() < NO_EVIDENCE_RATE:
        return build_case(world, question, rng, distractors=0, gold=False)
    return build_case(world, question, rng, distractors=rng.randint(0, MAX_DISTRACTORS),
                      gold=rng.random() < GOLD_RATE, misleading=rng.random() < MISLEADING_RATE)
