"""The optional API key of the serving API: an ASGI middleware requiring `Authorization: Bearer KEY`.

As vLLM's `--api-key`: every route but `GET /healthz` (what load balancers and `mmrag serve`'s
own start-up probe poll) and the demo page at `/` (static HTML holding no data, which asks for
the key and sends it with each of its requests: `mmrag.serving.demo_page`) answers 401 with
the API's error body when the key is missing or wrong, before the request reaches a route, so
no body is read for it. The key is
`serving.api_key`, else the environment variable `MMRAG_API_KEY` (`api_key_of`).
"""

from __future__ import annotations

import hmac
import os

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from mmrag.config import ServingConfig
from mmrag.serving.demo_page import PAGE_PATH
from mmrag.serving.request import RequestError

API_KEY_ENV = "MMRAG_API_KEY"
OPEN_PATHS = frozenset({"/healthz", PAGE_PATH})


def api_key_of(serving: ServingConfig) -> str:
    """The key requests must carry: `serving.api_key`, else $MMRAG_API_KEY; "" when neither is set (no key)."""
    return serving.api_key or os.environ.get(API_KEY_ENV, "")


class ApiKeyCheck:
    def __init__(self, app: ASGIApp, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in OPEN_PATHS:
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                what = "wrong" if given else "missing"
                error = RequestError("authorization", f"{what} API key: send the header `Authorization: Bearer KEY`",
                                     401, code="invalid_api_key")
                response = JSONResponse(error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
