"""How texts are worded in world v2: the knowledge base's own language, and the zoo's separate ones.

World v2's KB (`mmrag.data.synth_v2`) states each description and fact through one of several
paraphrase templates (word order, synonyms). The zoo models are fitted on texts in wordings of
their own (`CAPTIONER_WORDING` for the captioner, `GENERIC_WORDING` for tiny-clip) that share
the vocabulary (the attribute words and their synonyms, as a real model knows a language) but
no template with the KB, so what retrieves well has to be learned, not inherited. The grounded
reader (`mmrag.models.grounded_reader`) is the one component that reads the KB's language: it
parses passages back with `Wording.parse_fact` and `Wording.parse_description`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES, Entity

ATTRIBUTES = ("colour", "shape", "texture", "background")
VOCABULARIES = {"colour": COLOURS, "shape": SHAPES, "texture": TEXTURES, "background": BACKGROUNDS}
SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    "colour": {"purple": ("purple", "violet")},
    "shape": {"circle": ("circle", "disc"), "diamond": ("diamond", "rhombus")},
    "texture": {"plain": ("plain", "unpatterned"), "striped": ("striped", "banded"),
                "dotted": ("dotted", "spotted"), "checkered": ("checkered", "chequered")},
    "background": {"grey": ("grey", "gray")},
}
"""Attribute -> canonical word -> the words the KB may use for it (the canonical word first)."""
VALUE_PATTERNS = {
    "year": r"\d{3,4}",
    "city": r"[A-Z][a-z]+",
    "architect": r"[A-Z][a-z]+ [A-Z][a-z]+",
    "height": r"\d+",
}
NAME_PATTERN = r"[A-Z][a-z]+ [A-Z][a-z]+"


def spellings(attribute: str, word: str) -> tuple[str, ...]:
    """The words that may stand for `word` (a canonical `attribute` word)."""
    return SYNONYMS[attribute].get(word, (word,))


def canonical_word(attribute: str, spelling: str) -> str | None:
    """The canonical word a spelling stands for, or None if it names no value of `attribute`."""
    for word in VOCABULARIES[attribute]:
        if spelling.lower() in spellings(attribute, word):
            return word
    return None


def _template_regex(template: str, fields: dict[str, str]) -> re.Pattern:
    """`template` as a full-match regex, each {field} a named group of the given pattern."""
    parts = re.split(r"\{(\w+)\}", template)
    pattern = "".join(re.escape(part) if index % 2 == 0 else f"(?P<{part}>{fields[part]})"
                      for index, part in enumerate(parts))
    return re.compile(pattern)


def _alternatives(attribute: str) -> str:
    words = sorted({s for word in VOCABULARIES[attribute] for s in spellings(attribute, word)}, key=len, reverse=True)
    return "|".join(re.escape(word) for word in words)


@dataclass(frozen=True)
class Wording:
    """One language for describing entities and stating their facts: templates to write and to parse."""

    name: str
    descriptions: tuple[str, ...]
    """Fields: {colour}, {shape}, {texture}, {background} (each written as one of its spellings)."""
    captions: tuple[str, ...]
    """The text of an entity's picture doc. Fields: {name}, {description}."""
    facts: dict[str, tuple[str, ...]]
    """Relation -> templates of the passage stating it. Fields: {name}, {description}, {value}."""
    asides: tuple[str, ...] = ()
    """Passages stating no fact. Fields: {name}, {description}."""
    synonyms: bool = True
    """Whether attribute words may be written as their synonyms."""

    def describe(self, entity: Entity, rng: random.Random) -> str:
        words = {attribute: getattr(entity, attribute) for attribute in ATTRIBUTES}
        if self.synonyms:
            words = {attribute: rng.choice(spellings(attribute, word)) for attribute, word in words.items()}
        return rng.choice(self.descriptions).format(**words)

    def caption(self, entity: Entity, rng: random.Random) -> str:
        return rng.choice(self.captions).format(name=entity.name, description=self.describe(entity, rng))

    def fact(self, entity: Entity, relation: str, rng: random.Random) -> str:
        return rng.choice(self.facts[relation]).format(
            name=entity.name, description=self.describe(entity, rng), value=entity.facts[relation])

    def aside(self, entity: Entity, rng: random.Random) -> str:
        return rng.choice(self.asides).format(name=entity.name, description=self.describe(entity, rng))

    def templates(self) -> list[str]:
        """Every template of this wording (descriptions, captions, facts, asides)."""
        return [*self.descriptions, *self.captions, *(t for ts in self.facts.values() for t in ts), *self.asides]

    def parse_fact(self, relation: str, text: str) -> str | None:
        """The value `text` states for `relation` (it must be worded by one of this wording's templates)."""
        for pattern in _fact_patterns(self, relation):
            match = pattern.fullmatch(text)
            if match:
                return match.group("value")
        return None

    def parse_description(self, text: str) -> dict[str, str]:
        """Attribute -> canonical word, for the description that any template of this wording writes in `text`."""
        for pattern in _description_patterns(self):
            match = pattern.search(text)
            if match:
                return {a: canonical_word(a, match.group(a)) for a in ATTRIBUTES}
        return {}


_PATTERN_CACHE: dict[tuple[str, str], list[re.Pattern]] = {}


def _description_patterns(wording: Wording) -> list[re.Pattern]:
    key = (wording.name, "")
    if key not in _PATTERN_CACHE:
        fields = {attribute: _alternatives(attribute) for attribute in ATTRIBUTES}
        _PATTERN_CACHE[key] = [re.compile(_template_regex(t, fields).pattern) for t in wording.descriptions]
    return _PATTERN_CACHE[key]


def _fact_patterns(wording: Wording, relation: str) -> list[re.Pattern]:
    key = (wording.name, relation)
    if key not in _PATTERN_CACHE:
        fields = {"name": NAME_PATTERN, "description": ".+?", "value": VALUE_PATTERNS[relation]}
        _PATTERN_CACHE[key] = [_template_regex(t, fields) for t in wording.facts[relation]]
    return _PATTERN_CACHE[key]


KB_WORDING = Wording(
    name="kb",
    descriptions=(
        "a {colour} {shape} with a {texture} finish, set against {background}",
        "{texture} and {colour}, shaped like a {shape}, over {background} ground",
        "a {shape} in {colour}, {texture}, on a field of {background}",
    ),
    captions=("A photograph of {name}, {description}.", "{name} as seen by visitors: {description}."),
    facts={
        "year": ("{name}, {description}, dates from {value}.",
                 "Construction of {name} ({description}) ended in {value}.",
                 "In {value} work finished on {name}, {description}."),
        "city": ("{name}, {description}, can be found in {value}.",
                 "The city of {value} is home to {name} ({description}).",
                 "{name} ({description}) sits in {value}."),
        "architect": ("{name}, {description}, is the work of {value}.",
                      "{value} drew up the plans for {name} ({description}).",
                      "The plans of {name}, {description}, came from {value}."),
        "height": ("{name}, {description}, rises {value} metres.",
                   "At {value} metres, {name} ({description}) towers over its square.",
                   "The top of {name}, {description}, is {value} metres above the ground."),
    },
    asides=("Tourists queue for hours to see {name}, {description}.",
            "{name} ({description}) features in a well-known folk song.",
            "Local legend says {name}, {description}, brings luck to newlyweds.",
            "Each winter {name}, {description}, is covered in lights."),
)
"""World v2's KB: three paraphrases per description and per relation, synonyms for attribute words."""

CAPTIONER_WORDING = Wording(
    name="captioner",
    descriptions=("{colour} {shape}, {texture}, {background} backdrop",
                  "{texture} {shape} in {colour}, {background} behind"),
    captions=(), facts={}, synonyms=False,
)
"""How `zoo:tiny-lvlm-captioner-v2` describes a picture (its fitting targets); canonical words only."""

GENERIC_WORDING = Wording(
    name="generic",
    descriptions=("{colour} {texture} {shape} pictured on {background}",
                  "{background} scene showing a {colour} {shape} that is {texture}",
                  "{shape} | {colour} | {texture} | {background}"),
    captions=("picture: {description}",),
    facts={
        "year": ("{name} is a {description}; it was erected in the year {value}.",
                 "Building year for {name} ({description}): {value}."),
        "city": ("{name} is a {description}; it is situated in {value}.",
                 "Whereabouts for {name} ({description}): {value}."),
        "architect": ("{name} is a {description}; it was created by {value}.",
                      "Designer for {name} ({description}): {value}."),
        "height": ("{name} is a {description}; it has a height of {value} metres.",
                   "Height for {name} ({description}): {value} metres."),
    },
)
"""The generic caption-passage pairs `zoo:tiny-clip-v2` is fitted on (synonyms included, KB templates not)."""
