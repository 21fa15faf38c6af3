"""Word-level late interaction: how well each word the visual reader reads is matched by a document's words.

A pooled text vector dilutes one word among twenty: near-duplicates differ only in texture, and the
cosine of a whole passage with what the reader sees picks the pictured entity's passage among those
stating the asked relation for 73 % of world v2's val fact questions. Matching word by word, as
late-interaction retrievers (ColBERT) match token by token, keeps the one word that decides: the
reranker's backbone embeds every word on its own (its text tower, so a KB synonym such as "banded" lands
next to "striped": cosine 0.96, against at most 0.6 for another texture), and for each attribute word the
reader reads, the feature is its best cosine with any word of the document. Summed over the four
attributes, that score picks the pictured entity's passage for 92 % of the same questions (docs/LEARNING.md).

The reranker's head learns how to weigh these features from its training signal; an untrained reranker
ignores them (its output layers start at zero).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch

from mmrag.data.wording import ATTRIBUTES
from mmrag.models.clip_encoder import ClipEncoder

WORD = re.compile(r"[a-z]+")
"""A document's words: lower-case letter runs (numbers state values, never looks)."""


def words_of(text: str) -> list[str]:
    return WORD.findall(text.lower())


class WordMatcher:
    """Embeds words one at a time through a CLIP text tower (cached: the backbone is frozen) and matches them."""

    def __init__(self, encoder: ClipEncoder, cache: bool = True) -> None:
        self.encoder = encoder
        self.cache = cache
        self._vectors: dict[str, torch.Tensor] = {}

    def vectors(self, words: Sequence[str]) -> torch.Tensor:
        """[len(words), D] unit vectors, one per word embedded on its own."""
        if not self.cache:
            self._vectors.clear()
        new = sorted({word for word in words if word not in self._vectors})
        if new:
            self._vectors.update(zip(new, torch.from_numpy(self.encoder.encode_texts(new))))
        if not words:
            return torch.zeros(0, self.encoder.dim)
        return torch.stack([self._vectors[word] for word in words])

    def match(self, readings: Sequence[dict[str, str]], documents: Sequence[Sequence[str]],
              num_slots: int) -> torch.Tensor:
        """[B, num_slots, len(ATTRIBUTES)]: for row b's reading and its j-th document, each attribute word's best
        cosine with a word of the document (0 at padding, and for a document without words)."""
        out = torch.zeros(len(readings), num_slots, len(ATTRIBUTES))
        for row, (reading, texts) in enumerate(zip(readings, documents)):
            seen = self.vectors([reading[attribute] for attribute in ATTRIBUTES])
            for slot, text in enumerate(texts):
                doc_words = words_of(text)
                if doc_words:
                    out[row, slot] = (seen @ self.vectors(doc_words).T).amax(dim=1)
        return out
