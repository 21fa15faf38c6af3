"""Read a request body off the wire, bounded in size and time, and turn it into an `AnswerRequest`.

The API (mmrag/serving/api.py) passes the request's headers and its body stream here. The body is read in full before anything parses it, whether it came with a
`Content-Length` or chunked without one: past `RequestLimits.max_body_bytes` it is a 413,
not arriving in full within `serving.body_timeout_s` a 408. Then the content type picks the
parser of `mmrag.serving.request`: JSON, or multipart (which must end with its closing
boundary: a truncated upload is a 400, not a request missing its later fields).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from mmrag.serving.request import AnswerRequest, RequestError, RequestLimits, parse_form, parse_json_body

JSON_TYPE = "application/json"
MULTIPART_TYPE = "multipart/form-data"
# The parser logs every malformed body at warning level before raising; the client gets the
# error as a 400 instead, and the server log stays free of clients' mistakes.
logging.getLogger("python_multipart.multipart").setLevel(logging.ERROR)

MAX_PARTS = 8
"""More parts than a request has fields (image, question, options) plus slack: refused before decoding any."""


async def read_answer_request(headers: Mapping[str, str], chunks: AsyncIterator[bytes], limits: RequestLimits,
                              timeout_s: float) -> AnswerRequest:
    """Validate the content type, read the body, and parse it into an `AnswerRequest` (or raise `RequestError`)."""
    content_type = headers.get("content-type", "")
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type not in (JSON_TYPE, MULTIPART_TYPE):
        raise RequestError("content-type", f"expected {JSON_TYPE} or {MULTIPART_TYPE}, got {content_type or 'none'!r}",
                           415)
    body = await read_body(headers, chunks, limits.max_body_bytes, timeout_s)
    # Parsing decodes the image (to check it): in a worker thread, so the event loop keeps serving.
    if media_type == JSON_TYPE:
        return await asyncio.to_thread(parse_json_body, body, limits)
    return await asyncio.to_thread(lambda: parse_form(multipart_fields(content_type, body), limits))


def check_json_type(headers: Mapping[str, str]) -> None:
    """415 unless the body is declared `application/json`."""
    content_type = headers.get("content-type", "")
    if content_type.split(";", 1)[0].strip().lower() != JSON_TYPE:
        raise RequestError("content-type", f"expected {JSON_TYPE}, got {content_type or 'none'!r}", 415)


async def read_body(headers: Mapping[str, str], chunks: AsyncIterator[bytes], max_bytes: int,
                    timeout_s: float) -> bytes:
    """The whole body, at most `max_bytes` (413), within `timeout_s` (408)."""
    length = headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise RequestError("content-length", f"expected a number of bytes, got {length!r}", 400)
        if int(length) > max_bytes:
            raise RequestError("body", f"{int(length)} bytes, over the limit of {max_bytes}", 413)
    received = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in chunks:
                received += chunk
                if len(received) > max_bytes:
                    raise RequestError("body", f"more than {max_bytes} bytes, over the limit", 413)
    except TimeoutError:
        raise RequestError("body", f"not received in full within {timeout_s:g} s ({len(received)} bytes arrived)",
                           408) from None
    except ClientDisconnect:
        # Nobody reads this reply; raising it ends the request without an error traceback.
        raise RequestError("body", f"the client disconnected after {len(received)} bytes", 400) from None
    return bytes(received)


def multipart_fields(content_type: str, body: bytes) -> dict[str, bytes | str]:
    """Multipart parts by name: file parts as bytes, text parts as UTF-8 str; a repeated name is an error."""
    boundary = _boundary(content_type)
    if f"--{boundary}--".encode() not in body:
        raise RequestError("body", "truncated multipart/form-data body: its closing boundary is missing", 400)
    parts: list[_Part] = []
    header: list[bytes] = [b"", b""]

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header[0] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header[1] += data[start:end]

    def on_header_end() -> None:
        if header[0].lower() == b"content-disposition":
            parts[-1].disposition = header[1]
        header[:] = [b"", b""]

    def on_part_data(data: bytes, start: int, end: int) -> None:
        parts[-1].data += data[start:end]

    parser = MultipartParser(boundary, {
        "on_part_begin": lambda: parts.append(_Part()), "on_part_data": on_part_data,
        "on_header_field": on_header_field, "on_header_value": on_header_value, "on_header_end": on_header_end})
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as exc:
        raise RequestError("body", f"not a valid multipart/form-data body ({exc})", 400) from None
    if len(parts) > MAX_PARTS:
        raise RequestError("body", f"{len(parts)} parts, more than the {MAX_PARTS} a request can use", 400)
    fields: dict[str, bytes | str] = {}
    for part in parts:
        name, value = part.field()
        if name in fields:
            raise RequestError(name, "given more than once")
        fields[name] = value
    return fields


@dataclass
class _Part:
    disposition: bytes = b""
    data: bytes = b""

    def field(self) -> tuple[str, bytes | str]:
        """(name, value): file parts (with a filename) as bytes, text parts decoded as UTF-8."""
        _, options = parse_options_header(self.disposition)
        if b"name" not in options:
            raise RequestError("body", "a multipart part without a name (Content-Disposition: form-data; name=...)",
                               400)
        name = _utf8(options[b"name"], "body", "a multipart part name")
        if b"filename" in options:
            return name, self.data
        return name, _utf8(self.data, name, "the text")


def _boundary(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary" and value.strip('"'):
            return value.strip('"')
    raise RequestError("content-type", f"multipart/form-data without a boundary parameter: {content_type!r}", 400)


def _utf8(data: bytes, field: str, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(field, f"{what} is not valid UTF-8 ({exc.reason} at byte {exc.start})", 400) from None
