"""AnswerIngress: the HTTP front of the Serve application (FastAPI; OpenAPI at /openapi.json, /docs).

`POST /v1/answer` validates the request (`mmrag.serving.request`: a 4xx JSON error naming
the field on bad input), then runs the greedy inference path over the model deployments in
the order `greedy_batch` uses offline: translator -> encoder -> every retrieval shard
(merged with `merge_topk`) -> reranker -> generator, timing each stage.
`GET /healthz` and `GET /v1/info` report liveness and what is being served.

No `from __future__ import annotations` here: FastAPI must see the real `Request` class
in the route signatures to inject the request.
"""

import asyncio
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve
from starlette.datastructures import UploadFile

from mmrag.config import Config
from mmrag.retrieval.merge import Hit, merge_topk
from mmrag.serving.openapi import ANSWER_OPENAPI
from mmrag.serving.request import AnswerRequest, RequestError, RequestLimits, parse_form, parse_json_body
from mmrag.serving.response import answer_body, evidence_of

api = FastAPI(title="mmrag", version="1",
              description="Knowledge-based visual question answering: image + question in, "
                          "answer + evidence + translated query out.")


class _StageClock:
    """Milliseconds per stage of one request, and the total."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.ms: dict[str, float] = {}

    async def run(self, stage: str, pending) -> Any:
        begin = time.perf_counter()
        result = await pending
        self.ms[stage] = (time.perf_counter() - begin) * 1000
        return result

    def totals(self) -> dict[str, float]:
        return {**self.ms, "total": (time.perf_counter() - self.start) * 1000}


async def _form_fields(request: Request) -> dict[str, bytes | str]:
    """Multipart parts by name: file parts as bytes, text parts as str; a repeated name is an error."""
    try:
        form = await request.form(max_files=2, max_fields=8)
    except Exception as exc:  # Starlette raises several parser exception types for malformed bodies.
        raise RequestError("body", f"not a valid multipart/form-data body ({exc})", 400) from None
    fields: dict[str, bytes | str] = {}
    for name, value in form.multi_items():
        if name in fields:
            raise RequestError(name, "given more than once")
        fields[name] = await value.read() if isinstance(value, UploadFile) else value
    return fields


@serve.deployment
@serve.ingress(api)
class AnswerIngress:
    def __init__(self, translator, encoder, shards: list, reranker, generator, cfg: Config,
                 info: dict[str, Any], versions: dict[str, Any]):
        self.translator, self.encoder, self.shards = translator, encoder, shards
        self.reranker, self.generator = reranker, generator
        self.limits = RequestLimits.from_config(cfg)
        self.snippet_chars = cfg.serving.snippet_chars
        # Base64 inflates by 4/3; leave room for the question and the JSON around them.
        self.max_body_bytes = cfg.serving.max_image_bytes * 4 // 3 + cfg.serving.max_question_chars * 4 + 65536
        self.info_body, self.versions = info, versions

    @api.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/v1/info")
    async def info(self) -> dict[str, Any]:
        return self.info_body

    @api.post("/v1/answer", openapi_extra=ANSWER_OPENAPI)
    async def answer(self, request: Request) -> JSONResponse:
        try:
            parsed = await self._parse(request)
        except RequestError as err:
            return JSONResponse(err.body(), status_code=err.status)
        return JSONResponse(await self._greedy_path(parsed))

    async def _parse(self, request: Request) -> AnswerRequest:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise RequestError("body", f"{length} bytes, over the limit of {self.max_body_bytes}", 413)
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            return parse_json_body(await request.body(), self.limits)
        if content_type.startswith("multipart/form-data"):
            return parse_form(await _form_fields(request), self.limits)
        raise RequestError("content-type", f"expected application/json or multipart/form-data, "
                                           f"got {content_type or 'none'!r}", 415)

    async def _greedy_path(self, req: AnswerRequest) -> dict[str, Any]:
        clock = _StageClock()
        query = await clock.run("translate", self.translator.greedy.remote(req.image, req.question))
        vector = await clock.run("encode", self.encoder.encode_text.remote(query))
        hits = await clock.run("retrieve", self._search(vector, req.options.top_k))
        selection = await clock.run("rerank", self.reranker.greedy.remote(req.image, req.question, query, hits))
        # Greedy selection keeps candidates in descending order until STOP, so a smaller
        # max_docs is exactly a prefix of the selection at the trained limit.
        selection = tuple(selection[:req.options.max_docs])
        answer = await clock.run("generate", self.generator.answer.remote(
            req.image, req.question, [hits[j].text for j in selection]))
        evidence = evidence_of(hits, selection, self.snippet_chars) if req.options.return_evidence else []
        return answer_body(answer, query, evidence, clock.totals(), self.versions)

    async def _search(self, vector, k: int) -> list[Hit]:
        per_shard = await asyncio.gather(*(shard.search.remote(vector, k) for shard in self.shards))
        return merge_topk([[hits] for hits in per_shard], k)[0]

