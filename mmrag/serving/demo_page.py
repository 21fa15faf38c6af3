"""The demo page `mmrag serve` serves at `/`: pick an image, ask a question, see the answer and its evidence.

One static HTML file with plain JavaScript (demo.html, package data beside this module; no
build step, nothing fetched from elsewhere). It holds no data: everything it shows comes from
the API with the page's API key (asked for when `GET /v1/info` answers 401, kept for the
browser tab): `POST /v1/answer` as a multipart upload, then each kept passage's image from
`GET /v1/kb/{doc_id}/image`. So the page itself is open, as /healthz is (`mmrag.serving.api_key`).
"""

from __future__ import annotations

from functools import cache
from importlib import resources

PAGE_PATH = "/"
PAGE_FILE = "demo.html"


@cache
def demo_page_html() -> str:
    return resources.files(__package__).joinpath(PAGE_FILE).read_text(encoding="utf-8")
