"""How world v3's knowledge base is worded, and how a reader reads it back.

One module for both directions, so the world (`mmrag.data.synth_v3`, which writes) and every
reader of it (the grounded rule reader, the zoo's fitted LVLM reader) share the same template
families. A v3 KB states things in five ways, each a family of paraphrase templates:

* a *direct* statement: the entity (by name and description) and a fact's value;
* a *link*: the entity shares a fact with an anchor, a landmark with no picture
  ("... was designed by the architect of {anchor}"), whose own *anchor statement* gives the value:
  such a fact needs two passages;
* a *linked description*: the entity's look with one attribute given by an anchor
  ("painted the same colour as {anchor}"), the anchor's attribute stated in its own passage;
* a *superseded* statement: a wrong value for the entity, in templates of its own (an old
  measurement, a disputed attribution, a photograph from before a repainting); no one word marks them.
* an *aside*: the entity and nothing a question asks.

`read_fact` and `read_attribute` read a list of passages as the grounded reader does: the first
passage that gives the asked value, directly, through a link resolved in the same list, or from a
superseded statement taken at its word (so a superseded passage ranked first misleads it).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from mmrag.data.wording import (
    ATTRIBUTES,
    KB_WORDING,
    NAME_PATTERN,
    VALUE_PATTERNS,
    VOCABULARIES,
    canonical_word,
    spellings,
)
from mmrag.data.world import Entity

DESCRIPTIONS = (
    *KB_WORDING.descriptions,
    "a {texture} {colour} {shape} before a {background} backdrop",
)
"""An entity's look. Fields: {colour}, {shape}, {texture}, {background}, each as one of its spellings."""

LINKED_DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    "colour": ("a {shape} painted the same colour as {anchor}, {texture}, on a field of {background}",
               "a {texture} {shape} in the colours of {anchor}, set against {background}"),
    "shape": ("{texture} and {colour}, built to the outline of {anchor}, over {background} ground",
              "a {colour} {texture} copy of the outline of {anchor}, before a {background} backdrop"),
    "texture": ("a {colour} {shape} patterned like {anchor}, set against {background}",
                "a {shape} in {colour}, finished in the pattern of {anchor}, on a field of {background}"),
    "background": ("a {colour} {shape} with a {texture} finish, against the same backdrop as {anchor}",
                   "{texture} and {colour}, shaped like a {shape}, before the backdrop of {anchor}"),
}
"""An entity's look with attribute -> its field replaced by a reference to {anchor} (other fields as above)."""

ANCHOR_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "colour": ("{anchor} is painted {value}.", "The walls of {anchor} are {value}."),
    "shape": ("{anchor} has the outline of a {value}.", "Seen from above, {anchor} forms a {value}."),
    "texture": ("The surface of {anchor} is {value}.", "{anchor} is known for its {value} facade."),
    "background": ("{anchor} stands against a {value} sky.", "Behind {anchor} the hills are {value}."),
}
"""What an anchor's passage says about its look. Fields: {anchor}, {value} (a spelling of the attribute word)."""

CAPTIONS = (*KB_WORDING.captions, "{name}, pictured: {description}.")
"""The text of an entity's picture doc. Fields: {name}, {description}."""

FACTS: dict[str, tuple[str, ...]] = {
    "year": (*KB_WORDING.facts["year"], "{name} ({description}) was completed in {value}."),
    "city": (*KB_WORDING.facts["city"], "Visitors to {value} know {name}, {description}."),
    "architect": (*KB_WORDING.facts["architect"], "{name}, {description}, was designed by {value}."),
    "height": (*KB_WORDING.facts["height"], "{name} ({description}) measures {value} metres from base to tip."),
}
"""Direct statements. Fields: {name}, {description}, {value}."""

LINKS: dict[str, tuple[str, ...]] = {
    "year": ("{name}, {description}, was finished in the same year as {anchor}.",
             "Work on {name} ({description}) ended the year {anchor} was completed."),
    "city": ("{name} ({description}) stands across the street from {anchor}.",
             "{name}, {description}, shares a square with {anchor}."),
    "architect": ("{name}, {description}, was designed by the architect of {anchor}.",
                  "The architect of {anchor} also drew up {name} ({description})."),
    "height": ("{name} ({description}) is exactly as tall as {anchor}.",
               "{name}, {description}, matches {anchor} in height."),
}
"""A fact given through an anchor. Fields: {name}, {description}, {anchor}."""

ANCHOR_FACTS: dict[str, tuple[str, ...]] = {
    "year": ("{anchor} was completed in {value}.", "{anchor} dates from {value}."),
    "city": ("{anchor} is a landmark of {value}.", "{anchor} stands in the centre of {value}."),
    "architect": ("{anchor} was designed by {value}.", "{value} was the architect of {anchor}."),
    "height": ("{anchor} is {value} metres tall.", "{anchor} rises {value} metres above the street."),
}
"""An anchor's own fact. Fields: {anchor}, {value}."""

SUPERSEDED: dict[str, tuple[str, ...]] = {
    "year": ("Early guidebooks gave {value} as the year {name} ({description}) was finished.",
             "Until recently {name}, {description}, was thought to date from {value}."),
    "city": ("{name}, {description}, was first put up in {value} and later moved.",
             "Some older maps still place {name} ({description}) in {value}."),
    "architect": ("For decades {value} was credited with {name}, {description}.",
                  "{name} ({description}) is often attributed to {value}, on little evidence."),
    "height": ("Before its spire was shortened, {name}, {description}, rose {value} metres.",
               "An old survey measured {name} ({description}) at {value} metres."),
}
"""A wrong value stated for the entity. Fields: {name}, {description}, {value}."""

SUPERSEDED_LOOKS = (
    "Postcards printed before its repainting show {name} as {description}.",
    "A faded engraving in the town hall depicts {name} as {description}.",
)
"""A wrong look stated for the entity. Fields: {name}, {description} (the wrong look)."""

ASIDES = (*KB_WORDING.asides, "{name}, {description}, was closed for repairs for two summers.")
"""Passages stating nothing a question asks. Fields: {name}, {description}."""


def templates() -> list[str]:
    """Every v3 KB template (minted names must not occur in any)."""
    families = [DESCRIPTIONS, CAPTIONS, SUPERSEDED_LOOKS, ASIDES]
    for mapping in (LINKED_DESCRIPTIONS, ANCHOR_ATTRIBUTES, FACTS, LINKS, ANCHOR_FACTS, SUPERSEDED):
        families.extend(mapping.values())
    return [template for family in families for template in family]


def _spelled(attribute: str, word: str, rng: random.Random) -> str:
    return rng.choice(spellings(attribute, word))


@dataclass(frozen=True)
class Look:
    """What the KB says an entity looks like: its attribute words, and the attribute (if any) given by an anchor."""

    words: dict[str, str]
    """Attribute -> canonical word."""
    linked_attribute: str | None = None
    anchor: str | None = None

    @classmethod
    def of(cls, entity: Entity) -> Look:
        return cls({attribute: getattr(entity, attribute) for attribute in ATTRIBUTES})


def describe(look: Look, rng: random.Random) -> str:
    """The look in one of the description templates (the linked ones when an attribute is given by an anchor)."""
    words = {attribute: _spelled(attribute, word, rng) for attribute, word in look.words.items()}
    if look.linked_attribute is None:
        return rng.choice(DESCRIPTIONS).format(**words)
    words.pop(look.linked_attribute)
    return rng.choice(LINKED_DESCRIPTIONS[look.linked_attribute]).format(anchor=look.anchor, **words)


def caption(name: str, look: Look, rng: random.Random) -> str:
    return rng.choice(CAPTIONS).format(name=name, description=describe(look, rng))


def direct_fact(name: str, look: Look, relation: str, value: str, rng: random.Random) -> str:
    return rng.choice(FACTS[relation]).format(name=name, description=describe(look, rng), value=value)


def link(name: str, look: Look, relation: str, anchor: str, rng: random.Random) -> str:
    return rng.choice(LINKS[relation]).format(name=name, description=describe(look, rng), anchor=anchor)


def anchor_fact(anchor: str, relation: str, value: str, rng: random.Random) -> str:
    return rng.choice(ANCHOR_FACTS[relation]).format(anchor=anchor, value=value)


def anchor_attribute(anchor: str, attribute: str, word: str, rng: random.Random) -> str:
    return rng.choice(ANCHOR_ATTRIBUTES[attribute]).format(anchor=anchor, value=_spelled(attribute, word, rng))


def superseded_fact(name: str, look: Look, relation: str, wrong_value: str, rng: random.Random) -> str:
    return rng.choice(SUPERSEDED[relation]).format(name=name, description=describe(look, rng), value=wrong_value)


def superseded_look(name: str, wrong_look: Look, rng: random.Random) -> str:
    return rng.choice(SUPERSEDED_LOOKS).format(name=name, description=describe(wrong_look, rng))


def aside(name: str, look: Look, rng: random.Random) -> str:
    return rng.choice(ASIDES).format(name=name, description=describe(look, rng))


# Reading: regexes compiled once from the templates above.

_ANCHOR = NAME_PATTERN
_DESCRIPTION = ".+?"


def _alternatives(attribute: str) -> str:
    words = sorted({s for word in VOCABULARIES[attribute] for s in spellings(attribute, word)}, key=len, reverse=True)
    return "|".join(re.escape(word) for word in words)


def _regex(template: str, fields: dict[str, str]) -> re.Pattern:
    """`template` as a regex, each {field} a named group of the given pattern (a repeated field matches anything)."""
    parts = re.split(r"\{(\w+)\}", template)
    seen: set[str] = set()
    pattern = []
    for index, part in enumerate(parts):
        if index % 2 == 0:
            pattern.append(re.escape(part))
        elif part in seen:
            pattern.append(f"(?:{fields[part]})")
        else:
            seen.add(part)
            pattern.append(f"(?P<{part}>{fields[part]})")
    return re.compile("".join(pattern))


_ATTRIBUTE_FIELDS = {attribute: _alternatives(attribute) for attribute in ATTRIBUTES}
_DESCRIPTION_PATTERNS = [_regex(t, _ATTRIBUTE_FIELDS) for t in DESCRIPTIONS]
_LINKED_DESCRIPTION_PATTERNS = {a: [_regex(t, {**_ATTRIBUTE_FIELDS, "anchor": _ANCHOR}) for t in ts]
                                for a, ts in LINKED_DESCRIPTIONS.items()}
_ANCHOR_ATTRIBUTE_PATTERNS = {a: [_regex(t, {"anchor": _ANCHOR, "value": _ATTRIBUTE_FIELDS[a]}) for t in ts]
                              for a, ts in ANCHOR_ATTRIBUTES.items()}
_STATEMENT_FIELDS = {r: {"name": NAME_PATTERN, "description": _DESCRIPTION, "value": VALUE_PATTERNS[r],
                         "anchor": _ANCHOR} for r in FACTS}
_FACT_PATTERNS = {r: [_regex(t, _STATEMENT_FIELDS[r]) for t in (*FACTS[r], *SUPERSEDED[r])] for r in FACTS}
_LINK_PATTERNS = {r: [_regex(t, _STATEMENT_FIELDS[r]) for t in LINKS[r]] for r in LINKS}
_ANCHOR_FACT_PATTERNS = {r: [_regex(t, _STATEMENT_FIELDS[r]) for t in ANCHOR_FACTS[r]] for r in ANCHOR_FACTS}


def _first_fullmatch(patterns: list[re.Pattern], text: str) -> re.Match | None:
    return next((m for m in (p.fullmatch(text) for p in patterns) if m), None)


def stated_fact(relation: str, text: str) -> str | None:
    """The value one passage states for `relation` of its entity, directly or as a superseded statement."""
    match = _first_fullmatch(_FACT_PATTERNS[relation], text)
    return match.group("value") if match else None


def linked_anchor(relation: str, text: str) -> str | None:
    """The anchor one passage gives `relation` through, or None."""
    match = _first_fullmatch(_LINK_PATTERNS[relation], text)
    return match.group("anchor") if match else None


def anchor_value(relation: str, anchor: str, text: str) -> str | None:
    """The value one passage states for `relation` of the landmark `anchor`, or None."""
    match = _first_fullmatch(_ANCHOR_FACT_PATTERNS[relation], text)
    return match.group("value") if match and match.group("anchor") == anchor else None


def read_fact(relation: str, documents: list[str]) -> str | None:
    """The value the first passage giving `relation` gives: stated, or linked to an anchor whose statement is
    among `documents`; None when no passage gives it (a link without its anchor's statement gives nothing)."""
    for document in documents:
        value = stated_fact(relation, document)
        if value is None and (anchor := linked_anchor(relation, document)) is not None:
            value = next((v for d in documents if (v := anchor_value(relation, anchor, d)) is not None), None)
        if value is not None:
            return value
    return None


def described_look(text: str) -> tuple[dict[str, str], str | None, str | None]:
    """(attribute -> canonical word, linked attribute, its anchor) of the first description in `text`."""
    for attribute, patterns in _LINKED_DESCRIPTION_PATTERNS.items():
        for pattern in patterns:
            match = pattern.search(text)
            if match:
                words = {a: canonical_word(a, match.group(a)) for a in ATTRIBUTES if a != attribute}
                return words, attribute, match.group("anchor")
    for pattern in _DESCRIPTION_PATTERNS:
        match = pattern.search(text)
        if match:
            return {a: canonical_word(a, match.group(a)) for a in ATTRIBUTES}, None, None
    return {}, None, None


def anchor_attribute_value(attribute: str, anchor: str, text: str) -> str | None:
    """The canonical `attribute` word one passage states for the landmark `anchor`, or None."""
    match = _first_fullmatch(_ANCHOR_ATTRIBUTE_PATTERNS[attribute], text)
    if match is None or match.group("anchor") != anchor:
        return None
    return canonical_word(attribute, match.group("value"))


def read_attribute(attribute: str, documents: list[str]) -> str | None:
    """The `attribute` word the first passage describing a look gives (through its anchor when linked, resolved
    among `documents`); None when none does."""
    for document in documents:
        words, linked, anchor = described_look(document)
        if attribute in words:
            return words[attribute]
        if linked == attribute:
            value = next((v for d in documents if (v := anchor_attribute_value(attribute, anchor, d)) is not None),
                         None)
            if value is not None:
                return value
    return None
