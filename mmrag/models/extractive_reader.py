"""A weightless reader that answers only from the evidence it is handed (the local-mode generator).

Sits where the frozen LVLM sits in the pipeline: (question, selected documents) -> answer.
It recognises the question's relation by its keywords (from `RELATIONS`), then returns the
value that relation's answer pattern captures in the first document, in the order given,
that states it. It never looks at the image or at any fact outside the documents, so the
reward it earns measures retrieval and reranking alone: right evidence -> right answer,
a near-duplicate's passage -> a wrong answer, no evidence -> "unknown".
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mmrag.data.world import RELATIONS, Relation

UNKNOWN = "unknown"


class ExtractiveReader:
    def __init__(self, relations: Mapping[str, Relation] = RELATIONS) -> None:
        self.relations = dict(relations)
        self._patterns = {name: re.compile(r.answer_pattern) for name, r in self.relations.items()}

    def relation_of(self, question: str) -> str | None:
        """The relation whose keywords the question uses most (earlier relations win ties); None if none."""
        words = set(re.findall(r"[a-z]+", question.lower()))
        hits = {name: len(words.intersection(r.keywords)) for name, r in self.relations.items()}
        best = max(hits, key=hits.get, default=None)
        return best if best is not None and hits[best] > 0 else None

    def answer(self, question: str, documents: list[str]) -> str:
        relation = self.relation_of(question)
        if relation is None:
            return UNKNOWN
        pattern = self._patterns[relation]
        for document in documents:
            match = pattern.search(document)
            if match:
                return match.group(1)
        return UNKNOWN

    def answer_batch(self, questions: list[str], documents: list[list[str]]) -> list[str]:
        """One answer per question, each from its own list of documents."""
        if len(questions) != len(documents):
            raise ValueError(
                f"documents: expected one list per question ({len(questions)} questions), got {len(documents)} lists"
            )
        return [self.answer(q, docs) for q, docs in zip(questions, documents)]
