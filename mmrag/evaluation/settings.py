"""The evaluation settings compared side by side, as stage wrappers around a pipeline.

`greedy_batch` runs any object with the pipeline's stage methods, so each setting is the
same greedy path with different stages: the untrained and the trained pipelines as they
are; `no_retrieval` hands the generator no evidence (what the frozen generator knows on
its own); `oracle` hands it exactly the gold documents (the headroom left for retrieval
and reranking). Together they show what training bought and what is left to gain.
"""

from __future__ import annotations

from pathlib import Path


from mmrag.data.dataset import KB_FILE, Question, read_table
from mmrag.retrieval.hit import Hit

SETTINGS = ("no_retrieval", "untrained", "trained", "oracle")


class NoRetrieval:
    """The wrapped pipeline with retrieval switched off: no candidates, empty selection, no evidence."""

    def __init__(self, pipeline) -> None:
        self.pipeline = pipeline

    def __getattr__(self, name: str):
        return getattr(self.pipeline, name)

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        return [[] for _ in queries]

    def rerank_greedy(self, table, rows, queries, hits: list[list[Hit]]) -> list[tuple[int, ...]]:
        return [() for _ in hits]


class OracleEvidence:
    """The wrapped pipeline with retrieval and reranking replaced by the questions' gold documents.

    `for_questions(batch)` must be called before each `greedy_batch`, since retrieval only
    sees queries, not the questions they came from. A question without gold documents gets
    no evidence.
    """

    def __init__(self, pipeline, gold_docs: dict[str, Hit]) -> None:
        self.pipeline = pipeline
        self.gold_docs = gold_docs
        self._gold: list[list[Hit]] = []

    def __getattr__(self, name: str):
        return getattr(self.pipeline, name)

    def for_questions(self, questions: list[Question]) -> OracleEvidence:
        unknown = [(q.id, d) for q in questions for d in q.gold_doc_ids if d not in self.gold_docs]
        if unknown:
            question_id, doc_id = unknown[0]
            raise KeyError(f"question {question_id!r}: gold doc id {doc_id!r} is not in the knowledge base")
        self._gold = [[self.gold_docs[d] for d in q.gold_doc_ids] for q in questions]
        return self

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        if len(queries) != len(self._gold):
            raise RuntimeError(f"oracle: {len(queries)} queries for {len(self._gold)} questions; "
                               "call for_questions(batch) before each batch")
        return self._gold

    def rerank_greedy(self, table, rows, queries, hits: list[list[Hit]]) -> list[tuple[int, ...]]:
        return [tuple(range(len(row))) for row in hits]


def gold_doc_hits(data_dir: str | Path, doc_ids: set[str]) -> dict[str, Hit]:
    """The KB documents named by `doc_ids`, as retrieval hits (text only: the generator reads text)."""
    table = read_table(Path(data_dir) / KB_FILE, columns=["doc_id", "title", "text", "entity_id"])
    hits = {}
    for index, row in enumerate(table.to_pylist()):
        if row["doc_id"] in doc_ids:
            hits[row["doc_id"]] = Hit(row["doc_id"], row["title"] or "", row["text"], None,
                                      row["entity_id"] or "", 1.0, index)
    return hits
