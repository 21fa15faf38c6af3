"""The OpenAI chat-completions dialect of the serving API: `POST /v1/chat/completions` in, its reply shapes out.

What a stock OpenAI client sends (as to vLLM or SGLang serving an LVLM): `model`, and
`messages` whose last one is the user's, with one `image_url` part (a `data:image/...;base64,`
URL: nothing is fetched, so an http(s) URL is refused) and text parts (joined, they are the
question). Earlier messages are not read: the pipeline answers one question about one image.
Sampling parameters (`temperature`, `max_tokens`, ...) are accepted and ignored: the pipeline
answers greedily. `top_k` and `max_docs` (the `/v1/answer` options; `extra_body` in the
client) may be given at the top level. The reply is a `chat.completion` (or, with
`stream: true`, `chat.completion.chunk` server-sent events ending with `data: [DONE]`), with
the pipeline's query and evidence in the extra fields `query` and `evidence`, and `usage` of
zero tokens (`UNCOUNTED_USAGE`). Errors are
`RequestError`s naming the parameter (`messages.0.content.1.image_url.url`), sent with OpenAI's
error body. No Ray here.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mmrag.serving.request import (AnswerRequest, RequestError, RequestLimits, answer_request, base64_image,
                                   checked_image)
from mmrag.serving.schema import AnswerOptions, Evidence

IMAGE_URL_HELP = "expected a data URL (data:image/png;base64,...)"
UNCOUNTED_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
"""A reply's `usage`: the answer comes from two models with tokenizers of their own (the translator writing the
query, the generator reading the evidence), so no one token count stands for it; zeros, not a made-up figure, for
clients that require the field."""


class ChatRequest(BaseModel):
    """The fields of a chat-completions body that are read; others (sampling parameters) are ignored."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    top_k: int | None = None
    max_docs: int | None = None


@dataclass(frozen=True)
class ChatQuestion:
    request: AnswerRequest
    model: str
    stream: bool


def parse_chat_request(body: bytes, limits: RequestLimits, model_name: str) -> ChatQuestion:
    """The pipeline request in a chat-completions body (the image checked to decode), or a `RequestError` (400)."""
    try:
        chat = ChatRequest.model_validate_json(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        param = ".".join(str(part) for part in error["loc"]) or "body"
        message = error["msg"].removeprefix("Invalid JSON: ")
        raise RequestError(param, message if param == "body" else f"{message}, got {error['input']!r:.60}",
                           400) from None
    if chat.model != model_name:
        raise RequestError("model", f"the model {chat.model!r} is not served here (GET /v1/models: {model_name!r})",
                           404, code="model_not_found")
    image, question = _image_and_question(chat.messages, limits)
    # Unvalidated here: `answer_request` checks the ranges against the limits, as for `/v1/answer`.
    options = AnswerOptions.model_construct(top_k=chat.top_k, max_docs=chat.max_docs)
    try:
        request = answer_request(image, question, options, limits)
    except RequestError as error:
        param = {"question": _last_param(chat.messages, "content"), "options.top_k": "top_k",
                 "options.max_docs": "max_docs"}.get(error.field, error.field)
        raise RequestError(param, error.message, 400) from None
    return ChatQuestion(request, chat.model, chat.stream)


def _image_and_question(messages: list[dict[str, Any]], limits: RequestLimits) -> tuple[bytes, str]:
    """The one image and the joined text of the last message, which must be the user's."""
    last = len(messages) - 1
    message = messages[last]
    if message.get("role") != "user":
        raise RequestError(f"messages.{last}.role", f"the last message must be the user's, got {message.get('role')!r}",
                           400)
    content = message.get("content")
    if not isinstance(content, list):
        raise RequestError(f"messages.{last}.content", "expected a list of content parts: one image_url part "
                                                       "(a data URL) and text parts", 400)
    images, texts = [], []
    for number, part in enumerate(content):
        param = f"messages.{last}.content.{number}"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            images.append(_image_of(part.get("image_url"), f"{param}.image_url", limits))
        else:
            raise RequestError(param, "expected {\"type\": \"text\", \"text\": ...} or {\"type\": \"image_url\", "
                                      f"\"image_url\": {{\"url\": ...}}}}, got {part!r:.60}", 400)
    if len(images) != 1:
        raise RequestError(f"messages.{last}.content", f"expected one image_url part, got {len(images)}", 400)
    if not texts:
        raise RequestError(f"messages.{last}.content", "expected a text part: the question", 400)
    return images[0], "\n".join(texts)


def _image_of(image_url: Any, param: str, limits: RequestLimits) -> bytes:
    url = image_url.get("url") if isinstance(image_url, dict) else None
    if not isinstance(url, str):
        raise RequestError(param, f"expected an object with a `url` string ({IMAGE_URL_HELP})", 400)
    if not url.startswith("data:"):
        scheme = url.split(":", 1)[0] if ":" in url else "no scheme"
        raise RequestError(f"{param}.url", f"{IMAGE_URL_HELP}, got a {scheme} URL: this server fetches nothing",
                           400, code="image_url_not_supported")
    if ";base64," not in url.split(",", 1)[0] + ",":
        raise RequestError(f"{param}.url", f"{IMAGE_URL_HELP}: the data URL is not base64", 400)
    try:
        return checked_image(base64_image(url, f"{param}.url", limits), limits, f"{param}.url")
    except RequestError as error:
        raise RequestError(error.field, error.message, 413 if error.status == 413 else 400) from None


def _last_param(messages: list[dict[str, Any]], name: str) -> str:
    return f"messages.{len(messages) - 1}.{name}"


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def chat_completion(answer: str, query: str, evidence: list[Evidence], model: str) -> dict[str, Any]:
    """A `chat.completion` object with the pipeline's answer, and its query and evidence in extra fields."""
    return {"id": completion_id(), "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "logprobs": None,
                         "finish_reason": "stop"}],
            "usage": dict(UNCOUNTED_USAGE), "query": query, "evidence": [item.model_dump() for item in evidence]}


def chat_completion_events(answer: str, query: str, evidence: list[Evidence], model: str) -> Iterator[str]:
    """The same reply as server-sent `chat.completion.chunk` events: the answer whole, then the stop, then [DONE]."""
    head = {"id": completion_id(), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": answer}, "logprobs": None,
                              "finish_reason": None}],
         "query": query, "evidence": [item.model_dump() for item in evidence]},
        {**head, "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]},
    ]
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def model_list(model: str, created: int) -> dict[str, Any]:
    """The `GET /v1/models` body: the one pipeline served."""
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "mmrag"}]}
