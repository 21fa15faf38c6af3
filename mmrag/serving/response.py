"""The reply to `POST /v1/answer`, built from a request's finished `StageState`.

Last step of serving: the API has the state the last deployment returned (query, the
reranker's evidence, the answer, each stage's milliseconds) and its own timings; this turns
them into an `AnswerReply` (mmrag/serving/schema.py): {answer, evidence: [{doc_id, title,
snippet, score}], query, timings_ms, versions}.
"""

from __future__ import annotations

from typing import Any

from mmrag.retrieval.hit import Hit
from mmrag.serving.schema import AnswerReply, Evidence
from mmrag.serving.state import StageState


def answer_reply(state: StageState, return_evidence: bool, timings_ms: dict[str, float], snippet_chars: int,
                 versions: dict[str, Any]) -> AnswerReply:
    evidence = [evidence_of(hit, snippet_chars) for hit in state.evidence] if return_evidence else []
    return AnswerReply(answer=state.answer, evidence=evidence, query=state.query,
                       timings_ms={stage: round(ms, 3) for stage, ms in timings_ms.items()}, versions=versions)


def evidence_of(hit: Hit, snippet_chars: int) -> Evidence:
    """One selected document; `score` is its retrieval score against the query."""
    return Evidence(doc_id=hit.doc_id, title=hit.title, snippet=_snippet(hit.text, snippet_chars),
                    score=round(float(hit.score), 6))


def _snippet(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:max(limit - 1, 0)].rstrip() + "…"
