"""The OpenAPI document of the serving API, generated from the pydantic models of `mmrag.serving.schema`.

FastAPI documents the replies from each route's `response_model` and `responses`; the
`POST /v1/answer` body it cannot infer, because the endpoint reads the body itself to accept
JSON and multipart alike and to bound its size and arrival time (`mmrag.serving.body`).
`request_body_openapi` declares that body from `AnswerBody` and `AnswerUpload`, and
`openapi_with_request_models` adds their JSON schemas to the document's components.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from mmrag.serving.schema import AnswerBody, AnswerUpload

REF = "#/components/schemas/{model}"


def request_body_openapi() -> dict[str, Any]:
    """The `openapi_extra` of `POST /v1/answer`: its two body encodings, by reference to the models."""
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": REF.format(model=AnswerBody.__name__)}},
        "multipart/form-data": {"schema": {"$ref": REF.format(model=AnswerUpload.__name__)}},
    }}}


def openapi_with_request_models(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document for `app` plus the request models' schemas (cached on the app, as FastAPI does)."""
    if app.openapi_schema is None:
        document = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        _, definitions = models_json_schema([(AnswerBody, "validation"), (AnswerUpload, "validation")],
                                            ref_template=REF)
        document.setdefault("components", {}).setdefault("schemas", {}).update(definitions["$defs"])
        app.openapi_schema = document
    return app.openapi_schema
