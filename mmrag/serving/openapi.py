"""OpenAPI description of `POST /v1/answer`, for the schema FastAPI serves at /openapi.json and /docs.

The endpoint reads its body itself (`mmrag.serving.request` validates JSON and multipart
alike, with errors naming the field), so the request and reply shapes are declared here.
"""

from __future__ import annotations

OPTIONS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "top_k": {"type": "integer", "minimum": 1, "description": "candidates retrieved (default index.top_k)"},
        "max_docs": {"type": "integer", "minimum": 0,
                     "description": "most evidence documents kept (default and maximum reranker.max_docs)"},
        "return_evidence": {"type": "boolean", "default": True},
    },
}

ANSWER_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {
                "type": "object",
                "required": ["image", "question"],
                "additionalProperties": False,
                "properties": {
                    "image": {"type": "string", "format": "byte", "description": "base64 image (PNG, JPEG, ...)"},
                    "question": {"type": "string"},
                    "options": OPTIONS_SCHEMA,
                },
            }},
            "multipart/form-data": {"schema": {
                "type": "object",
                "required": ["image", "question"],
                "properties": {
                    "image": {"type": "string", "format": "binary"},
                    "question": {"type": "string"},
                    "options": {"type": "string", "description": "the options object as JSON text"},
                },
            }},
        },
    },
    "responses": {
        "200": {"description": "answer, evidence used, translated query, per-stage timings, versions",
                "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {
                        "answer": {"type": "string"},
                        "evidence": {"type": "array", "items": {"type": "object", "properties": {
                            "doc_id": {"type": "string"}, "title": {"type": "string"},
                            "snippet": {"type": "string"}, "score": {"type": "number"}}}},
                        "query": {"type": "string"},
                        "timings_ms": {"type": "object", "additionalProperties": {"type": "number"}},
                        "versions": {"type": "object"},
                    },
                }}}},
        "4XX": {"description": "bad input: {error: {field, message, status}}"},
    },
}
