"""World v2's questions: three kinds of knowledge demand, how each is asked, and how to read one back.

* `visual`: an attribute of the pictured thing (colour, shape, texture, background), answerable
  from the image alone; its answer is the attribute's canonical word.
* `one-fact`: one relation of `RELATIONS` (year, city, architect, height), stated in one KB passage.
* `two-fact`: two relations asked at once, each stated in its own passage; the answer is
  "{first} and {second}" in the order asked, so exact match needs both.

`synth_v2` writes questions from these templates; the grounded reader (the v2 generator)
recognises what a question demands with `demand_of`, from keywords, as the v1 reader does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mmrag.data.dataset import ONE_FACT, TWO_FACT, UNKNOWN_KIND, VISUAL
from mmrag.data.world import RELATIONS

TWO_FACT_JOINER = " and "

VISUAL_TEMPLATES = {
    "colour": ("What colour is this?", "What is the main colour of this?"),
    "shape": ("What shape is this?", "What shape does this have?"),
    "texture": ("What pattern is on this?", "What is the surface pattern of this?"),
    "background": ("What colour is the background?", "What is the backdrop colour?"),
}
VISUAL_KEYWORDS = {"background": ("background", "backdrop"), "texture": ("pattern", "texture"),
                   "shape": ("shape",), "colour": ("colour", "color")}
"""Checked in this order: "what colour is the background" asks for the background."""
ONE_FACT_TEMPLATES = {
    "year": ("When was this built?", "In what year was this built?", "What year does this date from?"),
    "city": ("Where is this located?", "In which city is this?", "Which city is this in?"),
    "architect": ("Who designed this?", "Who was the architect of this?", "Which architect designed this?"),
    "height": ("How tall is this?", "What is the height of this?", "How high is this?"),
}
TWO_FACT_CLAUSES = {"year": "when was it built", "city": "where is it located",
                    "architect": "who designed it", "height": "how tall is it"}
TWO_FACT_TEMPLATES = ("{first} and {second}?", "Tell me {first} and {second}.")


def two_fact_question(first: str, second: str, template: str) -> str:
    text = template.format(first=TWO_FACT_CLAUSES[first], second=TWO_FACT_CLAUSES[second])
    return text[0].upper() + text[1:]


def two_fact_answer(first_value: str, second_value: str) -> str:
    return f"{first_value}{TWO_FACT_JOINER}{second_value}"


def question_texts() -> list[str]:
    """Every question world v2 asks (the two-fact ones for every ordered pair of relations)."""
    texts = [t for templates in VISUAL_TEMPLATES.values() for t in templates]
    texts += [t for templates in ONE_FACT_TEMPLATES.values() for t in templates]
    texts += [two_fact_question(a, b, t) for a in RELATIONS for b in RELATIONS if a != b for t in TWO_FACT_TEMPLATES]
    return texts


@dataclass(frozen=True)
class Demand:
    """What a question asks for: facts (relation names, in the order asked) or one visual attribute."""

    relations: tuple[str, ...] = ()
    attribute: str | None = None

    @property
    def kind(self) -> str:
        if self.attribute is not None:
            return VISUAL
        return {0: UNKNOWN_KIND, 1: ONE_FACT}.get(len(self.relations), TWO_FACT)


def demand_of(question: str) -> Demand:
    """Relations whose keywords the question uses (ordered by first mention); else the visual attribute it names."""
    words = re.findall(r"[a-z]+", question.lower())
    first_mention = {}
    for name, relation in RELATIONS.items():
        positions = [i for i, word in enumerate(words) if word in relation.keywords]
        if positions:
            first_mention[name] = min(positions)
    if first_mention:
        return Demand(relations=tuple(sorted(first_mention, key=first_mention.get)))
    for attribute, keywords in VISUAL_KEYWORDS.items():
        if any(word in keywords for word in words):
            return Demand(attribute=attribute)
    return Demand()
