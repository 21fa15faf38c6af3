"""The JSON body of a `POST /v1/answer` reply, built from the greedy path's outputs.

Last step of serving: the ingress has the translated query, the retrieved hits, the
reranker's selection (indices into the hits), the answer and its stage timings; this turns
them into {answer, evidence: [{doc_id, title, snippet, score}], query, timings_ms, versions}.
"""

from __future__ import annotations

from typing import Any

from mmrag.retrieval.merge import Hit


def evidence_of(hits: list[Hit], selection: tuple[int, ...], snippet_chars: int) -> list[dict[str, Any]]:
    """The selected documents in the reranker's order; `score` is the retrieval score against the query."""
    return [{"doc_id": hits[j].doc_id, "title": hits[j].title, "snippet": _snippet(hits[j].text, snippet_chars),
             "score": round(float(hits[j].score), 6)} for j in selection]


def answer_body(answer: str, query: str, evidence: list[dict[str, Any]], timings_ms: dict[str, float],
                versions: dict[str, Any]) -> dict[str, Any]:
    return {"answer": answer, "evidence": evidence, "query": query,
            "timings_ms": {stage: round(ms, 3) for stage, ms in timings_ms.items()}, "versions": versions}


def _snippet(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 1, 0)].rstrip() + "…"
