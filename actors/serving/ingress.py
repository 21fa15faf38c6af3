"""AnswerIngress: the HTTP front of the Serve application (FastAPI; OpenAPI at /openapi.json, /docs).

`POST /v1/answer` reads and validates the request (`mmrag.serving.body`: a 4xx JSON error
naming the field on bad input, bounded in size and arrival time), then sends it through the
stage groups in the greedy inference order (`StagePath`: translate -> encode -> retrieve ->
rerank -> generate; their deployments, and with `serving.first_group_in_ingress` the first
group right here) and replies with the answer, the evidence and the time each step took. A
request the pipeline cannot answer within `serving.request_timeout_s` (replicas down or
restarting) gets a 503 with Retry-After. `GET /healthz` and `GET /v1/info` report liveness
and what is being served. Request and reply bodies are the pydantic models of
`mmrag.serving.schema`; unknown paths and methods get the same error body as bad input.

No `from __future__ import annotations` here: FastAPI must see the real `Request` class
in the route signatures to inject the request.
"""

import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve
from starlette.exceptions import HTTPException

from actors.serving import configure_batching, prepare_replica
from actors.serving.stage_path import ServiceUnavailable, StageCall, StagePath
from actors.serving.stages import run_group
from mmrag.config import Config
from mmrag.serving.body import read_answer_request
from mmrag.serving.openapi import openapi_with_request_models, request_body_openapi
from mmrag.serving.request import RequestError, RequestLimits
from mmrag.serving.response import answer_reply
from mmrag.serving.schema import AnswerReply, ErrorReply, Health
from mmrag.serving.stages import GreedyStages
from mmrag.serving.state import StageState

api = FastAPI(title="mmrag", version="1",
              description="Knowledge-based visual question answering: image + question in, "
                          "answer + evidence + translated query out.")
api.openapi = lambda: openapi_with_request_models(api)

ERROR_RESPONSES = {status: {"model": ErrorReply, "description": description} for status, description in {
    400: "the body is not valid JSON or multipart/form-data", 408: "the body did not arrive in time",
    413: "the body or the image is over its size limit", 415: "neither JSON nor multipart/form-data",
    422: "a field is missing, of the wrong type or out of range",
    503: "the queue is full or the pipeline did not answer in time: retry after `Retry-After` seconds"}.items()}


def error_response(error: RequestError, retry_after_s: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


@api.exception_handler(HTTPException)
async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Unknown paths and methods: the API's error body instead of Starlette's."""
    return error_response(RequestError("path", f"{request.method} {request.url.path}: {exc.detail}", exc.status_code))


@serve.deployment
@serve.ingress(api)
class AnswerIngress:
    def __init__(self, groups: list[list[str]], handles: list[list], cfg: Config, checkpoint: str,
                 info: dict[str, Any], versions: dict[str, Any]):
        serving = cfg.serving
        calls = [StageCall(stages, group_handles) for stages, group_handles in zip(groups, handles)]
        if serving.first_group_in_ingress:
            self.first_group = GreedyStages.from_config(cfg, checkpoint, groups[0], prepare_replica(cfg))
            configure_batching(self.run_first_group, serving)
            calls[0] = StageCall(groups[0], local=self.run_first_group)
        self.path = StagePath(calls, serving.image_reference_min_bytes, serving.request_timeout_s)
        self.limits = RequestLimits.from_config(cfg)
        self.body_timeout_s, self.retry_after_s = serving.body_timeout_s, serving.retry_after_s
        self.snippet_chars = serving.snippet_chars
        self.info_body, self.versions = info, versions

    @serve.batch
    async def run_first_group(self, states: list[StageState]) -> list[StageState]:
        """The first stage group, run here (`serving.first_group_in_ingress`), batched like a group deployment's."""
        return await run_group(self.first_group, states)

    @api.get("/healthz", response_model=Health)
    async def healthz(self) -> Health:
        return Health(status="ok")

    @api.get("/v1/info")
    async def info(self) -> dict[str, Any]:
        """Models, knowledge base size, checkpoint, request limits and option defaults."""
        return self.info_body

    @api.post("/v1/answer", response_model=AnswerReply, responses=ERROR_RESPONSES,
              openapi_extra=request_body_openapi())
    async def answer(self, request: Request) -> Any:
        """Answer a question about an image from retrieved evidence (JSON with a base64 image, or a multipart upload)."""
        begin = time.perf_counter()
        try:
            req = await read_answer_request(request.headers, request.stream(), self.limits, self.body_timeout_s)
        except RequestError as error:
            return error_response(error)
        parse_ms = (time.perf_counter() - begin) * 1000
        state = StageState(image=req.image, question=req.question, top_k=req.top_k, max_docs=req.max_docs)
        try:
            state, transfer_ms = await self.path.run(state)
        except ServiceUnavailable as exc:
            return error_response(RequestError(None, str(exc), 503), self.retry_after_s)
        timings = {"parse": parse_ms, **state.stage_ms, "transfer": transfer_ms,
                   "total": (time.perf_counter() - begin) * 1000}
        # Built from validated parts already: sent as is, not validated again against `response_model`.
        reply = answer_reply(state, req.return_evidence, timings, self.snippet_chars, self.versions)
        return Response(reply.model_dump_json(), media_type="application/json")
