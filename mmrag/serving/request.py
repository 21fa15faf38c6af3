"""Validate one `POST /v1/answer` request and decode its image, before any model sees it.

First step of serving: the API (mmrag/serving/api.py) reads the body
(`mmrag.serving.body`) and hands the raw JSON bytes, or the fields of a multipart upload, to
`parse_json_body` / `parse_form`. They validate against the pydantic models of
`mmrag.serving.schema`, then the limits of the config, and return an `AnswerRequest` (the
encoded image, checked to decode, the question, the options with defaults filled in) or raise
`RequestError` naming the offending field, which the API sends as a 4xx JSON error. The
image goes on encoded: the replica that runs the models decodes it (pixels are 10-100x the
bytes); the API runs these parsers in a worker thread, off its event loop.
JSON is parsed by pydantic's parser, which bounds nesting depth and number size and rejects
invalid UTF-8, so no body reaches Python's recursive decoder. No Ray and no models here.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image
from pydantic import BaseModel, ValidationError

from mmrag.config import Config
from mmrag.data.dataset import decode_image
from mmrag.serving.schema import AnswerBody, AnswerOptions, AnswerUpload


ERROR_TYPES = {401: "authentication_error", 404: "not_found_error", 503: "service_unavailable_error"}
"""OpenAI's error `type` by status; every other 4xx is an `invalid_request_error`."""


class RequestError(ValueError):
    """A request the endpoint cannot answer; `field` names the part at fault, `status` is the HTTP code."""

    def __init__(self, field: str | None, message: str, status: int = 422, code: str | None = None):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON error body sent to the client (`mmrag.serving.schema.ErrorReply`): OpenAI's error object
        (message, type, param, code) plus this API's `field` and `status`."""
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.field, "code": self.code, "field": self.field, "status": self.status}}


@dataclass(frozen=True)
class RequestLimits:
    """What a request may contain, and the option defaults; from the `serving`, `index` and `reranker` sections."""

    max_image_bytes: int
    max_image_side: int
    max_question_chars: int
    max_top_k: int
    default_top_k: int
    max_docs: int
    """Largest `options.max_docs` and its default: the reranker's trained limit (`reranker.max_docs`)."""

    @classmethod
    def from_config(cls, cfg: Config) -> RequestLimits:
        return cls(cfg.serving.max_image_bytes, cfg.serving.max_image_side, cfg.serving.max_question_chars,
                   cfg.serving.max_top_k, cfg.index.top_k, cfg.reranker.max_docs)

    @property
    def max_body_bytes(self) -> int:
        """Largest body worth reading: a base64 image at the limit (4/3 inflation), the question, and room around."""
        return self.max_image_bytes * 4 // 3 + self.max_question_chars * 4 + 65536


@dataclass(frozen=True)
class AnswerRequest:
    image: bytes
    """The encoded image as sent (PNG, JPEG, ...), within the limits and known to decode."""
    question: str
    top_k: int
    """Candidates retrieved and shown to the reranker."""
    max_docs: int
    """Most documents the reranker may keep as evidence."""
    return_evidence: bool
    """Include the evidence documents in the response."""


def parse_json_body(body: bytes, limits: RequestLimits) -> AnswerRequest:
    """An `AnswerRequest` from a raw `application/json` body."""
    data = _validated(AnswerBody, body, json=True)
    image = checked_image(base64_image(data.image, "image", limits), limits)
    return answer_request(image, data.question, data.options, limits)


def parse_form(fields: Mapping[str, bytes | str], limits: RequestLimits) -> AnswerRequest:
    """An `AnswerRequest` from multipart fields: `image` as file bytes, `question` and `options` as text."""
    data = _validated(AnswerUpload, fields, json=False)
    return answer_request(checked_image(data.image, limits), data.question, data.options or AnswerOptions(), limits)


def checked_image(data: bytes, limits: RequestLimits, field: str = "image") -> bytes:
    """`data`, once it is known to be an image within the byte and side limits that decodes in full."""
    if not data:
        raise RequestError(field, "empty: expected encoded image bytes (PNG, JPEG, ...)")
    if len(data) > limits.max_image_bytes:
        raise RequestError(field, f"{len(data)} bytes, over the limit of {limits.max_image_bytes}", 413)
    try:
        # Opening only reads the header: check the size before decoding the pixels.
        with Image.open(io.BytesIO(data)) as probe:
            width, height = probe.size
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise RequestError(field, f"not a decodable image ({exc})") from None
    if max(width, height) > limits.max_image_side:
        raise RequestError(field, f"{width}x{height} pixels, over the limit of {limits.max_image_side} "
                                  "per side", 413)
    try:
        decode_image(data)
    except ValueError as exc:
        raise RequestError(field, str(exc)) from None
    return data


def validation_error(exc: ValidationError, model: type[BaseModel]) -> RequestError:
    """The first error of a pydantic validation as a `RequestError` naming its field (dotted path).

    Unknown fields come first: a misspelt name also makes the field it stands for missing.
    """
    errors = exc.errors(include_url=False)
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    field = ".".join(str(part) for part in error["loc"]) or "body"
    kind = error["type"]
    if kind == "json_invalid":
        # Not parseable at all (syntax, nesting depth, number range, encoding): the body, or a JSON text part.
        return RequestError(field, f"not valid JSON ({error['msg'].removeprefix('Invalid JSON: ')})",
                            400 if field == "body" else 422)
    if kind == "missing":
        return RequestError(field, "required")
    if kind == "extra_forbidden":
        parent = model if len(error["loc"]) == 1 else AnswerOptions
        return RequestError(field, f"unknown field (valid: {', '.join(parent.model_fields)})")
    if kind in ("model_type", "model_attributes_type", "dict_type") and field == "body":
        return RequestError(field, f"expected a JSON object with keys {', '.join(model.model_fields)}, "
                                   f"got {_json_type(error['input'])}")
    return RequestError(field, f"{error['msg']}, got {_short_repr(error['input'])}")


def _validated(model: type[BaseModel], data: Any, json: bool) -> Any:
    try:
        return model.model_validate_json(data) if json else model.model_validate(dict(data))
    except ValidationError as exc:
        raise validation_error(exc, model) from None


def answer_request(image: bytes, question: str, options: AnswerOptions, limits: RequestLimits) -> AnswerRequest:
    """The request for a checked image: the question within its limits, the options' defaults filled in."""
    if not question.strip():
        raise RequestError("question", "empty: expected a non-empty string")
    if len(question) > limits.max_question_chars:
        raise RequestError("question", f"{len(question)} characters, over the limit of {limits.max_question_chars}")
    top_k = _in_range("options.top_k", options.top_k, limits.default_top_k, 1, limits.max_top_k)
    max_docs = _in_range("options.max_docs", options.max_docs, limits.max_docs, 0, limits.max_docs)
    return AnswerRequest(image, question, top_k, max_docs, options.return_evidence)


def _in_range(field: str, value: int | None, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    if not low <= value <= high:
        raise RequestError(field, f"{_short_repr(value)} is out of range: expected an integer in [{low}, {high}]")
    return value


def base64_image(value: str, field: str, limits: RequestLimits) -> bytes:
    """The bytes of a base64 image, a `data:...;base64,` prefix allowed (not yet checked to be an image)."""
    if value.startswith("data:") and "," in value:
        value = value.split(",", 1)[1]
    # Reject oversized payloads before decoding them: 4 base64 characters carry 3 bytes.
    if len(value) // 4 * 3 > limits.max_image_bytes + 3:
        raise RequestError(field, f"about {len(value) // 4 * 3} bytes, over the limit of "
                                  f"{limits.max_image_bytes}", 413)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError(field, f"not valid base64 ({exc})") from None


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
