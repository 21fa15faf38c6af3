"""The HTTP API of a served pipeline (FastAPI): its routes, error bodies and OpenAPI document, defined once.

`answer_api(run_pipeline, settings)` builds the app that both fronts serve: `mmrag serve`'s own
HTTP front (mmrag/actors/serving/front.py) and the ingress deployment behind Serve's proxy
(`serve run mmrag/configs/serve/local.yaml`). They differ only in `run_pipeline`, the coroutine that
takes a validated request's `StageState` through the pipeline and returns the finished
state with the milliseconds spent between processes: the front calls the ingress
deployment, the ingress its stage groups. It raises `ServiceUnavailable` when no
answer can come in time (a 503 with Retry-After).

`POST /v1/answer` reads and validates the body (`mmrag.serving.body`: a 4xx JSON error
naming the field on bad input, bounded in size and arrival time) and replies with the
answer, the evidence and the time each step took. `POST /v1/chat/completions` and
`GET /v1/models` are the same pipeline in the OpenAI dialect (`mmrag.serving.openai_chat`),
for stock OpenAI clients. `GET /healthz` and `GET /v1/info` report liveness and what is being
served. `GET /v1/kb/{doc_id}/image` is a knowledge base document's image
(`mmrag.serving.kb_images`), and `GET /` a demo page over these routes (`mmrag.serving.demo_page`).
Bodies are the pydantic models of `mmrag.serving.schema`; every error, unknown paths
and methods included, has one body: OpenAI's error object plus the field and status. With an
API key (`mmrag.serving.api_key`) every route but /healthz and the page requires it. Images stay encoded;
the parsers that check them run in worker threads. No Ray here.

No `from __future__ import annotations` here: FastAPI must see the real `Request` class
in the route signatures to inject the request.
"""

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from mmrag.config import Config
from mmrag.serving.api_key import ApiKeyCheck, api_key_of
from mmrag.serving.body import check_json_type, read_answer_request, read_body
from mmrag.serving.demo_page import PAGE_PATH, demo_page_html
from mmrag.serving.kb_images import KbImages, media_type
from mmrag.serving.openai_chat import chat_completion, chat_completion_events, model_list, parse_chat_request
from mmrag.serving.openapi import openapi_with_request_models, request_body_openapi
from mmrag.serving.request import RequestError, RequestLimits
from mmrag.serving.response import answer_reply, evidence_of
from mmrag.serving.schema import AnswerReply, ErrorReply, Health
from mmrag.serving.state import StageState

AnswerPath = Callable[[StageState], Awaitable[tuple[StageState, float]]]
"""A validated request's state in; the finished state and the milliseconds spent between processes out."""

ERROR_RESPONSES = {status: {"model": ErrorReply, "description": description} for status, description in {
    400: "the body is not valid JSON or multipart/form-data", 401: "the API key is missing or wrong",
    408: "the body did not arrive in time",
    413: "the body or the image is over its size limit", 415: "neither JSON nor multipart/form-data",
    422: "a field is missing, of the wrong type or out of range",
    503: "the queue is full or the pipeline did not answer in time: retry after `Retry-After` seconds"}.items()}


class ServiceUnavailable(RuntimeError):
    """No answer in time: the queue is full, or replicas are down, restarting or overloaded past the deadline."""


@dataclass(frozen=True)
class ApiSettings:
    limits: RequestLimits
    body_timeout_s: float
    retry_after_s: int
    snippet_chars: int
    info: dict[str, Any]
    """The `GET /v1/info` body (`mmrag.serving.info.service_info`)."""
    versions: dict[str, Any]
    """What every answer's `versions` carries (`mmrag.serving.info.answer_versions`)."""
    api_key: str
    """The Bearer token every route but /healthz and the demo page requires; "" for none."""
    model_name: str
    """The model id of the OpenAI-compatible routes."""
    index_dir: str
    """The index whose doc stores hold the knowledge base's images."""

    @classmethod
    def from_config(cls, cfg: Config, info: dict[str, Any], versions: dict[str, Any]) -> "ApiSettings":
        serving = cfg.serving
        return cls(RequestLimits.from_config(cfg), serving.body_timeout_s, serving.retry_after_s,
                   serving.snippet_chars, info, versions, api_key_of(serving), serving.model_name, cfg.index.dir)


def error_response(error: RequestError, retry_after_s: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def answer_api(run_pipeline: AnswerPath, settings: ApiSettings) -> FastAPI:
    api = FastAPI(title="mmrag", version="1",
                  description="Knowledge-based visual question answering: image + question in, "
                              "answer + evidence + translated query out.")
    api.openapi = lambda: openapi_with_request_models(api)
    if settings.api_key:
        api.add_middleware(ApiKeyCheck, api_key=settings.api_key)
    created = int(time.time())
    kb_images = KbImages(settings.index_dir)

    async def answered(state: StageState) -> StageState | JSONResponse:
        """The finished state, or the 503 to send when no answer can come in time."""
        try:
            state, transfer_ms = await run_pipeline(state)
        except ServiceUnavailable as exc:
            return error_response(RequestError(None, str(exc), 503), settings.retry_after_s)
        state.stage_ms["transfer"] = transfer_ms
        return state

    @api.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """Unknown paths and methods: the API's error body instead of Starlette's."""
        return error_response(RequestError("path", f"{request.method} {request.url.path}: {exc.detail}",
                                           exc.status_code))

    @api.get("/healthz", response_model=Health)
    async def healthz() -> Health:
        return Health(status="ok")

    @api.get("/v1/info")
    async def info() -> dict[str, Any]:
        """Models, knowledge base size, checkpoint, request limits and option defaults."""
        return settings.info

    @api.post("/v1/answer", response_model=AnswerReply, responses=ERROR_RESPONSES,
              openapi_extra=request_body_openapi())
    async def answer(request: Request) -> Any:
        """Answer a question about an image from retrieved evidence (JSON with a base64 image, or a multipart
        upload)."""
        begin = time.perf_counter()
        try:
            req = await read_answer_request(request.headers, request.stream(), settings.limits,
                                            settings.body_timeout_s)
        except RequestError as error:
            return error_response(error)
        parse_ms = (time.perf_counter() - begin) * 1000
        state = await answered(StageState(image=req.image, question=req.question, top_k=req.top_k,
                                          max_docs=req.max_docs))
        if isinstance(state, JSONResponse):
            return state
        timings = {"parse": parse_ms, **state.stage_ms, "total": (time.perf_counter() - begin) * 1000}
        # Built from validated parts already: sent as is, not validated again against `response_model`.
        reply = answer_reply(state, req.return_evidence, timings, settings.snippet_chars, settings.versions)
        return Response(reply.model_dump_json(), media_type="application/json")

    @api.post("/v1/chat/completions", responses=ERROR_RESPONSES)
    async def chat_completions(request: Request) -> Any:
        """OpenAI chat completions: the last user message's image_url (a data URL) and text are the image and the
        question; the reply carries the pipeline's `query` and `evidence` in extra fields."""
        try:
            check_json_type(request.headers)
            body = await read_body(request.headers, request.stream(), settings.limits.max_body_bytes,
                                   settings.body_timeout_s)
            chat = await asyncio.to_thread(parse_chat_request, body, settings.limits, settings.model_name)
        except RequestError as error:
            return error_response(error)
        req = chat.request
        state = await answered(StageState(image=req.image, question=req.question, top_k=req.top_k,
                                          max_docs=req.max_docs))
        if isinstance(state, JSONResponse):
            return state
        evidence = [evidence_of(hit, settings.snippet_chars) for hit in state.evidence]
        if chat.stream:
            return StreamingResponse(chat_completion_events(state.answer, state.query, evidence, chat.model),
                                     media_type="text/event-stream")
        return JSONResponse(chat_completion(state.answer, state.query, evidence, chat.model))

    @api.get("/v1/kb/{doc_id:path}/image", response_class=Response, responses={
        200: {"content": {"image/*": {}}, "description": "the document's image as stored in the knowledge base"},
        401: ERROR_RESPONSES[401], 404: {"model": ErrorReply, "description": "no such document, or it has no image"},
        503: {"model": ErrorReply, "description": "the index's doc stores cannot be read by this server"}})
    async def kb_image(doc_id: str) -> Response:
        """A knowledge base document's image, by the `doc_id` an answer's evidence names."""
        try:
            image = await asyncio.to_thread(kb_images.image, doc_id)
        except KeyError:
            return error_response(RequestError("doc_id", f"no document {doc_id!r} in the knowledge base", 404))
        except (OSError, ValueError) as exc:  # the doc stores are not readable from this process
            return error_response(RequestError(None, f"knowledge base images unavailable: {exc}", 503))
        if image is None:
            return error_response(RequestError("doc_id", f"document {doc_id!r} has no image", 404))
        return Response(image, media_type=media_type(image))

    @api.get(PAGE_PATH, response_class=HTMLResponse, include_in_schema=False)
    async def demo_page() -> HTMLResponse:
        return HTMLResponse(demo_page_html())

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The model served (OpenAI's model list): the pipeline, by `serving.model_name`."""
        return model_list(settings.model_name, created)

    return api
