"""Validate one `POST /v1/answer` request and decode its image, before any model sees it.

First step of serving: the HTTP ingress (actors/serving/ingress.py) hands the raw JSON
body, or the fields of a multipart upload, to `parse_json_body` / `parse_form`; they return
an `AnswerRequest` (a decoded RGB image, the question, the options with defaults filled in)
or raise `RequestError` naming the offending field, which the ingress turns into a 4xx JSON
error. No Ray and no models here, so every rule is unit-testable.

JSON body: {"image": base64 string (a `data:image/...;base64,` prefix is allowed),
            "question": string, "options": {"top_k": int, "max_docs": int, "return_evidence": bool}}
Multipart: an `image` file part, a `question` text part, and an optional `options` part
holding the same options object as JSON text.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from PIL import Image

from mmrag.config import Config
from mmrag.data.dataset import decode_image

REQUEST_FIELDS = ("image", "question", "options")
OPTION_FIELDS = ("top_k", "max_docs", "return_evidence")


class RequestError(ValueError):
    """A request the endpoint cannot answer; `field` names the part at fault, `status` is the HTTP code."""

    def __init__(self, field: str, message: str, status: int = 422):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.status = status

    def body(self) -> dict[str, Any]:
        """The JSON error body sent to the client."""
        return {"error": {"field": self.field, "message": self.message, "status": self.status}}


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


@dataclass(frozen=True)
class AnswerOptions:
    top_k: int
    """Candidates retrieved and shown to the reranker."""
    max_docs: int
    """Most documents the reranker may keep as evidence."""
    return_evidence: bool
    """Include the evidence documents in the response."""


@dataclass(frozen=True)
class AnswerRequest:
    image: Image.Image
    question: str
    options: AnswerOptions


def parse_json_body(body: bytes, limits: RequestLimits) -> AnswerRequest:
    """An `AnswerRequest` from a raw `application/json` body."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError("body", f"not valid JSON ({exc})", 400) from None
    if not isinstance(data, dict):
        raise RequestError("body", f"expected a JSON object with keys {', '.join(REQUEST_FIELDS)}, "
                                   f"got {type(data).__name__}")
    _reject_unknown(data, REQUEST_FIELDS, "")
    if "image" not in data:
        raise RequestError("image", "required: a base64-encoded image string")
    image = decode_request_image(_base64_bytes(data["image"], limits), limits)
    return AnswerRequest(image, _question(data.get("question"), limits), _options(data.get("options"), limits))


def parse_form(fields: Mapping[str, bytes | str], limits: RequestLimits) -> AnswerRequest:
    """An `AnswerRequest` from multipart fields: `image` as file bytes, `question` and `options` as text."""
    _reject_unknown(fields, REQUEST_FIELDS, "")
    image = fields.get("image")
    if not isinstance(image, bytes):
        raise RequestError("image", "required: an image file part (multipart upload)")
    options = fields.get("options")
    if options is not None:
        if not isinstance(options, str):
            raise RequestError("options", "expected a text part holding a JSON object")
        try:
            options = json.loads(options)
        except json.JSONDecodeError as exc:
            raise RequestError("options", f"not valid JSON ({exc})") from None
    question = fields.get("question")
    if isinstance(question, bytes):
        raise RequestError("question", "expected a text part, got a file")
    return AnswerRequest(decode_request_image(image, limits), _question(question, limits), _options(options, limits))


def decode_request_image(data: bytes, limits: RequestLimits) -> Image.Image:
    """An RGB image from encoded bytes, within the byte and side limits."""
    if not data:
        raise RequestError("image", "empty: expected encoded image bytes (PNG, JPEG, ...)")
    if len(data) > limits.max_image_bytes:
        raise RequestError("image", f"{len(data)} bytes, over the limit of {limits.max_image_bytes}", 413)
    try:
        # Opening only reads the header: check the size before decoding the pixels.
        with Image.open(io.BytesIO(data)) as probe:
            width, height = probe.size
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise RequestError("image", f"not a decodable image ({exc})") from None
    if max(width, height) > limits.max_image_side:
        raise RequestError("image", f"{width}x{height} pixels, over the limit of {limits.max_image_side} "
                                    "per side", 413)
    try:
        return decode_image(data)
    except ValueError as exc:
        raise RequestError("image", str(exc)) from None


def _base64_bytes(value: Any, limits: RequestLimits) -> bytes:
    if not isinstance(value, str):
        raise RequestError("image", f"expected a base64 string, got {type(value).__name__}")
    if value.startswith("data:") and "," in value:
        value = value.split(",", 1)[1]
    # Reject oversized payloads before decoding them: 4 base64 characters carry 3 bytes.
    if len(value) // 4 * 3 > limits.max_image_bytes + 3:
        raise RequestError("image", f"about {len(value) // 4 * 3} bytes, over the limit of "
                                    f"{limits.max_image_bytes}", 413)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RequestError("image", f"not valid base64 ({exc})") from None


def _question(value: Any, limits: RequestLimits) -> str:
    if value is None:
        raise RequestError("question", "required: a non-empty string")
    if not isinstance(value, str):
        raise RequestError("question", f"expected a string, got {type(value).__name__}")
    if not value.strip():
        raise RequestError("question", "empty: expected a non-empty string")
    if len(value) > limits.max_question_chars:
        raise RequestError("question", f"{len(value)} characters, over the limit of {limits.max_question_chars}")
    return value


def _options(value: Any, limits: RequestLimits) -> AnswerOptions:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise RequestError("options", f"expected an object with keys {', '.join(OPTION_FIELDS)}, "
                                      f"got {type(value).__name__}")
    _reject_unknown(value, OPTION_FIELDS, "options.")
    top_k = _int_option(value, "top_k", limits.default_top_k, 1, limits.max_top_k)
    max_docs = _int_option(value, "max_docs", limits.max_docs, 0, limits.max_docs)
    return_evidence = value.get("return_evidence", True)
    if not isinstance(return_evidence, bool):
        raise RequestError("options.return_evidence", f"expected true or false, got {return_evidence!r}")
    return AnswerOptions(top_k, max_docs, return_evidence)


def _int_option(options: dict, name: str, default: int, low: int, high: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"options.{name}", f"expected an integer in [{low}, {high}], got {value!r}")
    if not low <= value <= high:
        raise RequestError(f"options.{name}", f"{value} is out of range: expected an integer in [{low}, {high}]")
    return value


def _reject_unknown(data: Mapping, allowed: tuple[str, ...], prefix: str) -> None:
    unknown = [key for key in data if key not in allowed]
    if unknown:
        raise RequestError(f"{prefix}{unknown[0]}", f"unknown field (valid: {', '.join(allowed)})")
