"""The HTTP bodies of the serving API as pydantic models: what `POST /v1/answer` accepts and every reply.

Used at both ends of the API (mmrag/serving/api.py): `mmrag.serving.request`
validates raw bodies against `AnswerBody` (JSON) or `AnswerUpload` (multipart fields), and
the replies are built from `AnswerReply` / `ErrorReply`. The OpenAPI document at
/openapi.json and /docs is generated from these models (`mmrag.serving.openapi`).
Limits that come from the config (largest image, `top_k` at most `serving.max_top_k`, ...)
are checked after validation, in `mmrag.serving.request`, and reported by `GET /v1/info`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, Json


class AnswerOptions(BaseModel):
    """Per-request options; omitted ones take the service's defaults (`GET /v1/info`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    top_k: int | None = Field(None, ge=1, description="candidates retrieved and shown to the reranker "
                                                       "(default `index.top_k`, at most `serving.max_top_k`)")
    max_docs: int | None = Field(None, ge=0, description="most evidence documents kept (default and maximum: "
                                                         "the reranker's trained `max_docs`)")
    return_evidence: bool = Field(True, description="include the evidence documents in the reply")


class AnswerBody(BaseModel):
    """`POST /v1/answer` as `application/json`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image: str = Field(description="the image, base64-encoded (PNG, JPEG, ...); a `data:image/...;base64,` "
                                   "prefix is allowed", json_schema_extra={"format": "byte"})
    question: str = Field(description="the question about the image")
    options: AnswerOptions = Field(default_factory=AnswerOptions)


class AnswerUpload(BaseModel):
    """`POST /v1/answer` as `multipart/form-data`: the image as a file part."""

    model_config = ConfigDict(extra="forbid", strict=True)

    image: bytes = Field(description="the image file (PNG, JPEG, ...)", json_schema_extra={"format": "binary"})
    question: str = Field(description="the question about the image")
    options: Json[AnswerOptions] | None = Field(None, description="the options object as JSON text")


class Evidence(BaseModel):
    doc_id: str
    title: str
    snippet: str = Field(description="the document text, cut to `serving.snippet_chars`")
    score: float = Field(description="retrieval score (inner product of unit vectors) against the query")


class Versions(BaseModel):
    """What produced an answer."""

    policy_version: int = Field(description="training version of the exported translator and reranker")
    checkpoint: str
    index_fingerprint: str


class AnswerReply(BaseModel):
    answer: str
    evidence: list[Evidence] = Field(description="the documents the generator read, in the reranker's order")
    query: str = Field(description="the search query the translator wrote")
    timings_ms: dict[str, float] = Field(description="milliseconds per stage (parse, translate, encode, retrieve, "
                                                     "rerank, generate), between deployments (transfer), and total")
    versions: Versions


class ErrorDetail(BaseModel):
    """OpenAI's error object (`message`, `type`, `param`, `code`), plus `field` and `status`."""

    message: str
    type: str = Field(description="`invalid_request_error`, `authentication_error`, `not_found_error` or "
                                  "`service_unavailable_error`")
    param: str | None = Field(description="the same as `field`")
    code: str | None = Field(description="a machine-readable reason where one applies (`invalid_api_key`, "
                                         "`model_not_found`, ...)")
    field: str | None = Field(description="the request part at fault (`image`, `options.top_k`, `body`, ...); "
                                          "null when the service, not the request, is at fault")
    status: int


class ErrorReply(BaseModel):
    """Every 4xx and 503 reply."""

    error: ErrorDetail


class Health(BaseModel):
    status: str
