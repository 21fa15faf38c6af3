"""A bag-of-words question-kind classifier, fitted on the train split's questions and their recorded kinds.

What a practitioner who picks one k per kind of question would fit: multinomial naive Bayes over the
question's lower-case words (add-one smoothing). It reads the question's text only, never its image, its
answer or its entity, so it may run on val and test questions whose kinds it was not shown.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from mmrag.data.dataset import Question

WORD = re.compile(r"[a-z0-9]+")


class KindClassifier:
    """Question text -> the kind with the highest posterior (ties: the kind first seen in training)."""

    def __init__(self, questions: Sequence[Question]) -> None:
        labelled = [q for q in questions if q.kind]
        if not labelled:
            raise ValueError("KindClassifier: no training question records a kind")
        self.kinds = list(dict.fromkeys(q.kind for q in labelled))
        counts = {kind: Counter() for kind in self.kinds}
        questions_of = Counter(q.kind for q in labelled)
        for q in labelled:
            counts[q.kind].update(WORD.findall(q.question.lower()))
        vocabulary = set().union(*counts.values())
        self.log_prior = {kind: math.log(questions_of[kind] / len(labelled)) for kind in self.kinds}
        self.log_unseen, self.log_likelihood = {}, {}
        for kind in self.kinds:
            total = sum(counts[kind].values()) + len(vocabulary) + 1
            self.log_unseen[kind] = math.log(1 / total)
            self.log_likelihood[kind] = {word: math.log((n + 1) / total) for word, n in counts[kind].items()}

    def predict(self, texts: Sequence[str]) -> list[str]:
        return [self._predict_one(text) for text in texts]

    def _predict_one(self, text: str) -> str:
        words = WORD.findall(text.lower())

        def posterior(kind: str) -> float:
            likelihood = self.log_likelihood[kind]
            return self.log_prior[kind] + sum(likelihood.get(w, self.log_unseen[kind]) for w in words)

        return max(self.kinds, key=posterior)
