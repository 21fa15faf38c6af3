"""The `grounded` generator: answers from what it is given, image and evidence, as an LVLM would.

World v2's stand-in for the frozen LVLM (weightless but for its eye, `zoo:visual-reader`):

* a visual question (`question_kinds.demand_of`) is answered from the first document, in the
  order given, whose description states the asked attribute; only when none does, from the
  image through the visual reader. So evidence overrides the image: a near-duplicate's
  passage gives its own texture, and any other entity's passage its own look;
* a one-fact question is answered from the first document that states the relation (in any
  of the KB's paraphrases), else "unknown";
* a two-fact question needs both facts: "{first} and {second}", "unknown" for a missing one,
  so exact match scores it only when both passages were given.

Extra documents can therefore cost reward (a wrong passage ranked first), and for most visual
questions the best selection is none.
"""

from __future__ import annotations

from PIL import Image

from mmrag.data.question_kinds import demand_of, two_fact_answer
from mmrag.data.wording import KB_WORDING, Wording
from mmrag.models.visual_reader import VisualReader

UNKNOWN = "unknown"


class GroundedReader:
    def __init__(self, visual_reader: VisualReader, wording: Wording = KB_WORDING) -> None:
        self.visual_reader = visual_reader
        self.wording = wording

    def fact(self, relation: str, documents: list[str]) -> str:
        """The value the first document stating `relation` gives, or "unknown"."""
        for document in documents:
            value = self.wording.parse_fact(relation, document)
            if value is not None:
                return value
        return UNKNOWN

    def stated_attribute(self, attribute: str, documents: list[str]) -> str | None:
        """The `attribute` word the first document describing an entity states, or None when none does."""
        for document in documents:
            stated = self.wording.parse_description(document)
            if stated.get(attribute):
                return stated[attribute]
        return None

    def answer_batch(self, images: list[Image.Image | None], questions: list[str],
                     evidence: list[list[str]]) -> list[str]:
        demands = [demand_of(question) for question in questions]
        answers: list[str | None] = []
        for demand, documents in zip(demands, evidence):
            if demand.attribute is not None:
                answers.append(self.stated_attribute(demand.attribute, documents))
            elif demand.relations:
                answers.append(two_fact_answer(*(self.fact(r, documents) for r in demand.relations[:2]))
                               if len(demand.relations) > 1 else self.fact(demand.relations[0], documents))
            else:
                answers.append(UNKNOWN)
        # The eye is used only where no evidence stated the attribute, all such images in one batch.
        looking = [i for i, (d, a) in enumerate(zip(demands, answers)) if d.attribute is not None and a is None]
        seen = self.visual_reader.read([images[i] for i in looking if images[i] is not None])
        readings = iter(seen)
        for i in looking:
            answers[i] = next(readings)[demands[i].attribute] if images[i] is not None else UNKNOWN
        return answers
