"""The `grounded` generator: answers from what it is given, image and evidence, as an LVLM would.

Worlds v2's and v3's stand-in for the frozen LVLM (weightless but for its eye, `zoo:visual-reader`),
reading passages with `mmrag.data.wording_v3` (whose templates include v2's):

* a visual question (`question_kinds.demand_of`) is answered from the first document, in the
  order given, whose description states the asked attribute (through an anchor's passage among
  the documents, where a v3 description links it); only when none does, from the image through
  the visual reader. So evidence overrides the image: a near-duplicate's passage gives its own
  texture, and any other entity's passage its own look;
* a one-fact question is answered from the first document that states the relation (in any
  of the KB's paraphrases, a superseded statement taken at its word, or a v3 link resolved
  through its anchor's statement among the documents), else "unknown";
* a two-fact question needs both facts: "{first} and {second}", "unknown" for a missing one,
  so exact match scores it only when both passages were given.

Extra documents can therefore cost reward (a wrong passage ranked first), and for most visual
questions the best selection is none.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PIL import Image

from mmrag.data.question_kinds import demand_of, two_fact_answer
from mmrag.data.wording_v3 import read_attribute, read_fact

if TYPE_CHECKING:  # the reader is handed its eye; only the eye's own module needs torch
    from mmrag.models.visual_reader import VisualReader

UNKNOWN = "unknown"


class GroundedReader:
    def __init__(self, visual_reader: VisualReader) -> None:
        self.visual_reader = visual_reader

    def fact(self, relation: str, documents: list[str]) -> str:
        """The value the first document stating `relation` gives, or "unknown"."""
        value = read_fact(relation, documents)
        return UNKNOWN if value is None else value

    def stated_attribute(self, attribute: str, documents: list[str]) -> str | None:
        """The `attribute` word the first document describing an entity states, or None when none does."""
        return read_attribute(attribute, documents)

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
