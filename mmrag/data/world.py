"""The synthetic world's entities, their facts, and the split of entities into train/val/test.

First stage of the synthetic data flow: world.py draws entities and facts, render.py draws
their images, synth.py turns both into knowledge-base documents and questions. `RELATIONS`
is also what the extractive reader uses to recognise a question and find its answer.

Entities come in families that share shape, colour and background and differ only in
texture (and in name and facts), so that retrieval has to get fine visual detail right.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, TypeVar

from tqdm import tqdm

from mmrag.data.dataset import Doc

if TYPE_CHECKING:
    from PIL import Image

    from mmrag.data.dataset import Question

SHAPES = ("circle", "square", "triangle", "star", "hexagon", "diamond", "cross", "heart")
COLOURS = ("red", "green", "blue", "yellow", "purple", "orange", "white", "black")
TEXTURES = ("plain", "striped", "dotted", "checkered")
BACKGROUNDS = ("grey", "navy", "olive", "pink", "teal", "brown")
SPLITS = ("train", "val", "test")
SPLIT_FRACTIONS = {"train": 0.6, "val": 0.2, "test": 0.2}

_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CODAS = ("", "", "n", "r", "l", "s")


class WordMint:
    """Issues capitalised pseudo-words, each at most once, so names, cities and architects never collide.

    Words that occur inside any question template are refused, so an answer can never be
    read off the question text.
    """

    def __init__(self, rng: random.Random, forbidden_text: str) -> None:
        self._rng = rng
        self._forbidden_text = forbidden_text.lower()
        self._issued: set[str] = set()

    def word(self, min_syllables: int = 2, max_syllables: int = 3) -> str:
        while True:
            count = self._rng.randint(min_syllables, max_syllables)
            text = "".join(self._syllable() for _ in range(count))
            if text not in self._issued and text not in self._forbidden_text:
                self._issued.add(text)
                return text.capitalize()

    def _syllable(self) -> str:
        return self._rng.choice(_ONSETS) + self._rng.choice(_VOWELS) + self._rng.choice(_CODAS)


@dataclass(frozen=True)
class Relation:
    """One kind of fact: how it is asked, how the knowledge base states it, and how to read it back."""

    name: str
    question_templates: tuple[str, ...]
    passage_template: str
    """Fields: {name}, {description}, {value}."""
    answer_pattern: str
    """Regex whose first group captures the value from a passage of this relation."""
    keywords: tuple[str, ...]
    """Lower-case question words that identify this relation."""
    draw_value: Callable[[random.Random, WordMint], str]


RELATIONS: dict[str, Relation] = {
    relation.name: relation
    for relation in (
        Relation(
            name="year",
            question_templates=("When was this built?", "In what year was this built?"),
            passage_template="{name}, the {description}, was built in {value}.",
            answer_pattern=r"was built in (\d{3,4})\b",
            keywords=("when", "year", "built"),
            draw_value=lambda rng, mint: str(rng.randint(1100, 1999)),
        ),
        Relation(
            name="city",
            question_templates=("Where is this located?", "In which city is this?"),
            passage_template="{name}, the {description}, is located in {value}.",
            answer_pattern=r"is located in ([A-Z][a-z]+)\b",
            keywords=("where", "city", "located"),
            draw_value=lambda rng, mint: mint.word(2, 3),
        ),
        Relation(
            name="architect",
            question_templates=("Who designed this?", "Who was the architect of this?"),
            passage_template="{name}, the {description}, was designed by {value}.",
            answer_pattern=r"was designed by ([A-Z][a-z]+ [A-Z][a-z]+)\b",
            keywords=("who", "architect", "designed"),
            draw_value=lambda rng, mint: f"{mint.word(1, 2)} {mint.word(2, 3)}",
        ),
        Relation(
            name="height",
            question_templates=("How tall is this?", "What is the height of this?"),
            passage_template="{name}, the {description}, stands {value} metres tall.",
            answer_pattern=r"stands (\d+) metres tall\b",
            keywords=("tall", "height", "high"),
            draw_value=lambda rng, mint: str(rng.randint(10, 400)),
        ),
    )
}


@dataclass
class Entity:
    """A landmark-like thing with a distinctive look and one fact per relation."""

    entity_id: str
    name: str
    shape: str
    colour: str
    texture: str
    background: str
    facts: dict[str, str] = field(default_factory=dict)
    family: int = 0
    """Index of its near-duplicate family (same shape, colour, background)."""

    @property
    def description(self) -> str:
        return f"{self.colour} {self.texture} {self.shape} on {self.background}"


V1_FAMILY_SIZES = (2, 3)
"""Near-duplicate family sizes of world v1; world v2 draws larger families (`mmrag.data.synth_v2`)."""


def max_entities(sizes: tuple[int, int] = V1_FAMILY_SIZES) -> int:
    """Most entities the vocabularies allow: families of at most max(sizes) over every (shape, colour, background)."""
    return len(SHAPES) * len(COLOURS) * len(BACKGROUNDS) * max(sizes)


def family_sizes(num_entities: int, rng: random.Random, sizes: tuple[int, int] = V1_FAMILY_SIZES) -> list[int]:
    """Family sizes drawn from `sizes` (smallest, largest) summing to `num_entities`; smaller families only at the
    end, where the remainder needs them, and singletons only where needed for three splits."""
    smallest, largest = sizes
    available = len(SHAPES) * len(COLOURS) * len(BACKGROUNDS)
    drawn: list[int] = []
    remaining = num_entities
    while remaining > 0:
        families_left = available - len(drawn) - 1
        if remaining <= largest:
            size = remaining
        elif remaining < largest + smallest:
            size = remaining - smallest  # e.g. 2 + 2 rather than 3 + a singleton
        elif remaining - smallest > largest * families_left:
            size = largest  # too few looks left for the rest otherwise
        else:
            size = rng.choice(sizes)
        drawn.append(size)
        remaining -= size
    while len(drawn) < min(len(SPLITS), num_entities):
        biggest = drawn.index(max(drawn))
        drawn[biggest] -= 1
        drawn.append(1)
    return drawn


def draw_entities(num_entities: int, rng: random.Random, sizes: tuple[int, int] = V1_FAMILY_SIZES,
                  forbidden_text: str | None = None) -> list[Entity]:
    """Entities e0000.. in families of `sizes`; every (shape, colour, texture, background) is used at most once.

    Minted words (names, cities, architects) avoid `forbidden_text` (default: v1's question templates).
    """
    if not 1 <= num_entities <= max_entities(sizes):
        raise ValueError(f"num_entities: expected 1..{max_entities(sizes)}, got {num_entities}")
    looks = [(s, c, b) for s in SHAPES for c in COLOURS for b in BACKGROUNDS]
    rng.shuffle(looks)
    if forbidden_text is None:
        forbidden_text = " ".join(t for r in RELATIONS.values() for t in r.question_templates)
    mint = WordMint(rng, forbidden_text=forbidden_text)
    entities: list[Entity] = []
    for family, size in enumerate(family_sizes(num_entities, rng, sizes)):
        shape, colour, background = looks[family]
        textures = rng.sample(TEXTURES, size)
        family_facts = _distinct_facts(size, rng, mint)
        for texture, facts in zip(textures, family_facts):
            name = f"{mint.word(1, 2)} {mint.word(2, 3)}"
            entities.append(Entity(f"e{len(entities):04d}", name, shape, colour, texture, background, facts, family))
    return entities


def _distinct_facts(size: int, rng: random.Random, mint: WordMint) -> list[dict[str, str]]:
    """Facts for one family, all different between members, so a near-duplicate's passage gives a wrong answer."""
    per_member: list[dict[str, str]] = [{} for _ in range(size)]
    for relation in RELATIONS.values():
        values: list[str] = []
        while len(values) < size:
            value = relation.draw_value(rng, mint)
            if value not in values:
                values.append(value)
        for facts, value in zip(per_member, values):
            facts[relation.name] = value
    return per_member


@dataclass
class World:
    """A whole synthetic world in memory (`synth.make_world`, `synth_v2.make_world_v2` or `synth_v3.make_world_v3`)."""

    entities: list[Entity]
    docs: list[Doc]
    questions: dict[str, list[Question]]
    """Split name -> its questions."""
    split_of: dict[str, str]
    """entity_id -> split name."""


def assign_splits(entities: list[Entity], rng: random.Random) -> dict[str, str]:
    """entity_id -> split, whole families at a time, near 60/20/20 of entities, no split empty when possible."""
    families: dict[int, list[Entity]] = {}
    for entity in entities:
        families.setdefault(entity.family, []).append(entity)
    order = list(families.values())
    rng.shuffle(order)
    targets = {split: SPLIT_FRACTIONS[split] * len(entities) for split in SPLITS}
    counts = dict.fromkeys(SPLITS, 0)
    split_of: dict[str, str] = {}
    for index, members in enumerate(order):
        if index < len(SPLITS):
            split = ("val", "test", "train")[index]
        else:
            split = max(SPLITS, key=lambda s: targets[s] - counts[s])
        counts[split] += len(members)
        split_of.update((entity.entity_id, split) for entity in members)
    return split_of


def append_entity_doc(docs: list[Doc], entity: Entity, text: str, image: Image.Image | None = None) -> str:
    """Append one KB doc of `entity` (ids numbered in order of appending); returns its doc id."""
    doc_id = f"d{len(docs):06d}"
    docs.append(Doc(doc_id, entity.name, text, image, entity.entity_id))
    return doc_id


EvidenceT = TypeVar("EvidenceT")
"""What a world's `add_entity_docs` tells its `entity_questions` about where the KB answers them."""


def build_world(num_entities: int, seed: int, image_size: int, draw: Callable[[int, random.Random], list[Entity]],
                add_entity_docs: Callable[[Entity, int, random.Random, list[Doc]], EvidenceT],
                entity_questions: Callable[[Entity, EvidenceT, int, random.Random], list[Question]],
                progress: bool = False) -> World:
    """The one recipe of every world (v1, v2 and v3 differ only in the three functions): draw the entities, split
    them, then each entity's KB docs and questions in entity order, all from one RNG seeded by `seed`."""
    if image_size < 16:
        raise ValueError(f"image_size: expected at least 16 pixels, got {image_size}")
    rng = random.Random(seed)
    entities = draw(num_entities, rng)
    split_of = assign_splits(entities, rng)
    docs: list[Doc] = []
    questions: dict[str, list[Question]] = {split: [] for split in SPLITS}
    for entity in tqdm(entities, desc="rendering entities", unit="entity", disable=not progress):
        evidence = add_entity_docs(entity, image_size, rng, docs)
        questions[split_of[entity.entity_id]].extend(entity_questions(entity, evidence, image_size, rng))
    return World(entities, docs, questions, split_of)
