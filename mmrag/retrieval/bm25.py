"""BM25 over the knowledge base's passages: the lexical retriever a practitioner sets beside a dense one.

Okapi BM25 (k1, b) on lower-case letter-and-digit runs of each passage's title and text, held in memory
as one sparse term -> (document, frequency) table. Small by design: it ranks a synthetic KB of a few
thousand passages for the training-free baselines (`mmrag.evaluation.baselines`), not a web corpus.
`reciprocal_rank_fusion` merges two rankings of the same query by 1 / (c + rank).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from mmrag.data.dataset import KB_FILE
from mmrag.retrieval.hit import Hit

TOKEN = re.compile(r"[a-z0-9]+")
RRF_CONSTANT = 60
"""c in 1 / (c + rank): the constant of reciprocal-rank fusion's original paper (Cormack et al., 2009)."""


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower())


class BM25Index:
    """Every passage of a KB, scored against a text query by Okapi BM25."""

    def __init__(self, hits: Sequence[Hit], k1: float = 1.2, b: float = 0.75) -> None:
        if not hits:
            raise ValueError("BM25Index: the knowledge base has no passages")
        self.hits, self.k1, self.b = list(hits), k1, b
        counts = [Counter(tokens(f"{hit.title} {hit.text}")) for hit in self.hits]
        self.lengths = np.array([sum(c.values()) for c in counts], dtype=np.float64)
        self.average_length = float(self.lengths.mean()) or 1.0
        self.postings: dict[str, list[tuple[int, int]]] = {}
        for doc, count in enumerate(counts):
            for term, frequency in count.items():
                self.postings.setdefault(term, []).append((doc, frequency))
        total = len(self.hits)
        self.idf = {term: math.log(1 + (total - len(p) + 0.5) / (len(p) + 0.5)) for term, p in self.postings.items()}

    @classmethod
    def from_kb(cls, data_dir: str | Path) -> BM25Index:
        """The text passages of DATA_DIR/kb.parquet (rows without text are left out)."""
        path = Path(data_dir) / KB_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no knowledge base (write it with `mmrag synth`)")
        rows = pq.read_table(path, columns=["doc_id", "title", "text", "entity_id"]).to_pylist()
        return cls([Hit(row["doc_id"], row["title"] or "", row["text"], None, row["entity_id"] or "", 0.0, index)
                    for index, row in enumerate(rows) if row["text"]])

    def scores(self, query: str) -> np.ndarray:
        """[passages] BM25 score of every passage against `query` (a repeated query word counts once per use)."""
        out = np.zeros(len(self.hits))
        norm = self.k1 * (1 - self.b + self.b * self.lengths / self.average_length)
        for term in tokens(query):
            for doc, frequency in self.postings.get(term, ()):
                out[doc] += self.idf[term] * frequency * (self.k1 + 1) / (frequency + norm[doc])
        return out

    def search(self, queries: Sequence[str], top_k: int) -> list[list[Hit]]:
        """Per query, the `top_k` best passages by descending score (ties in KB order), scores filled in."""
        results = []
        for query in queries:
            scores = self.scores(query)
            order = np.argsort(-scores, kind="stable")[:top_k]
            results.append([_scored(self.hits[j], float(scores[j])) for j in order])
        return results


def reciprocal_rank_fusion(rankings: Sequence[Sequence[Hit]], top_k: int, constant: int = RRF_CONSTANT) -> list[Hit]:
    """One ranking from several of the same query: each document scores the sum of 1 / (constant + rank) over the
    rankings it appears in (rank from 1); ties keep first appearance order."""
    fused: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            fused[hit.doc_id] = fused.get(hit.doc_id, 0.0) + 1.0 / (constant + rank)
            first.setdefault(hit.doc_id, hit)
    order = sorted(fused, key=lambda doc: -fused[doc])
    return [_scored(first[doc], fused[doc]) for doc in order[:top_k]]


def _scored(hit: Hit, score: float) -> Hit:
    return Hit(hit.doc_id, hit.title, hit.text, hit.image, hit.entity_id, score, hit.index_id)
