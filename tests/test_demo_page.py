"""The demo page at `/`: open HTML whose every data request needs the API key; served by `mmrag serve`'s application on
a tiny export and driven in headless Chromium over the DevTools protocol, it asks for the key, then shows the answer,
the translator's query and the kept passages with their knowledge base images and scores, as `POST /v1/answer`
gives them. Chromium is Debian's `chromium` package; without it the browser test skips."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import requests
from PIL import Image
from websockets.sync.client import ClientConnection, connect

from mmrag.config import load_config
from mmrag.data.dataset import KB_FILE, encode_image, load_questions

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "sk-demo-" + "fedcba9876543210"
CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--remote-debugging-port=0", "--hide-scrollbars"]
WIDTH, HEIGHT = 1280, 1100


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kb_images(synth_dir: str) -> dict[str, bytes | None]:
    """Each KB document's image bytes as the KB file stores them (None: a text-only document)."""
    table = pq.read_table(Path(synth_dir) / KB_FILE, columns=["doc_id", "image"])
    return dict(zip(table.column("doc_id").to_pylist(), table.column("image").to_pylist()))


def page_api(index_dir: str):
    """The serving API of an index with an API key, whose pipeline no test here reaches (every request that would
    run it lacks the key)."""
    from mmrag.serving.api import ApiSettings, answer_api

    async def unreachable(state):
        raise AssertionError("a request without the API key reached the pipeline")

    cfg = load_config(ROOT / "mmrag/configs/local.yaml", [f"index.dir={index_dir}", f"serving.api_key={API_KEY}"])
    return answer_api(unreachable, ApiSettings.from_config(cfg, {"kb_size": 0}, {}))


def test_the_page_is_open_html_and_every_route_it_calls_needs_the_key(tiny_index):
    from starlette.testclient import TestClient

    client = TestClient(page_api(tiny_index))
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    # One self-contained file: nothing loaded from another origin.
    assert "<script>" in html and "src=\"http" not in html and "href=\"http" not in html
    for path in ("v1/info", "v1/answer", "v1/kb/"):
        assert f'"{path}' in html or f"`{path}" in html, path
    for method, path in [("get", "/v1/info"), ("post", "/v1/answer"), ("get", "/v1/kb/entity-0/image")]:
        reply = client.request(method, path)
        assert (reply.status_code, reply.json()["error"]["code"]) == (401, "invalid_api_key"), path


def test_kb_images_are_served_by_doc_id_as_the_kb_stores_them(tiny_index, synth_dir):
    from starlette.testclient import TestClient

    client = TestClient(page_api(tiny_index), headers={"Authorization": f"Bearer {API_KEY}"})
    stored = kb_images(synth_dir)
    with_image = [doc_id for doc_id, image in stored.items() if image is not None]
    text_only = [doc_id for doc_id, image in stored.items() if image is None]
    assert with_image and text_only, "the synthetic KB has documents of both kinds"
    for doc_id in with_image[:3]:
        reply = client.get(f"/v1/kb/{doc_id}/image")
        assert (reply.status_code, reply.headers["content-type"]) == (200, "image/png"), doc_id
        assert reply.content == stored[doc_id]
    missing, unknown = client.get(f"/v1/kb/{text_only[0]}/image"), client.get("/v1/kb/no-such-doc/image")
    assert (missing.status_code, missing.json()["error"]["field"]) == (404, "doc_id")
    assert "has no image" in missing.json()["error"]["message"]
    assert (unknown.status_code, unknown.json()["error"]["message"]) == (
        404, "no document 'no-such-doc' in the knowledge base")
    route = client.get("/openapi.json").json()["paths"]["/v1/kb/{doc_id}/image"]["get"]
    assert {"200", "401", "404"} <= set(route["responses"]) and "/" not in client.get("/openapi.json").json()["paths"]


def test_kb_images_of_an_index_the_server_cannot_read_are_a_503_naming_the_manifest(tmp_path):
    from starlette.testclient import TestClient

    client = TestClient(page_api(str(tmp_path)), headers={"Authorization": f"Bearer {API_KEY}"})
    reply = client.get("/v1/kb/d000001/image")
    assert reply.status_code == 503 and f"{tmp_path}/manifest.json: no index manifest" in reply.json()["error"]["message"]


@pytest.fixture(scope="module")
def demo_endpoint(ray_session, tiny_export):
    """The tiny export served as `mmrag serve` serves it (application + HTTP front), with an API key."""
    from ray import serve

    from mmrag.actors.serving.app import api_settings, pipeline_app
    from mmrag.actors.serving.front import HttpFront

    cfg, export, _ = tiny_export
    cfg = dataclasses.replace(cfg, serving=dataclasses.replace(cfg.serving, port=free_port(), api_key=API_KEY))
    serve.start(proxy_location="Disabled")
    front = HttpFront(cfg.serving)
    front.start(serve.run(pipeline_app(cfg, export), name="demo", route_prefix=None), api_settings(cfg, export))
    yield f"http://127.0.0.1:{cfg.serving.port}"
    front.stop()
    serve.shutdown()


class DevTools:
    """One page of a headless Chromium, driven by DevTools protocol commands over its websocket."""

    def __init__(self, socket: ClientConnection):
        self.socket = socket
        self.last_id = 0

    def call(self, method: str, **params) -> dict:
        self.last_id += 1
        self.socket.send(json.dumps({"id": self.last_id, "method": method, "params": params}))
        while True:  # events (none enabled here) and late replies are skipped
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.last_id:
                assert "error" not in message, f"{method}: {message['error']}"
                return message["result"]

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, f"{expression}: {result['exceptionDetails']}"
        return result["result"].get("value")

    def wait_for_state(self, *states: str, timeout_s: float = 120) -> str:
        """The page's `body[data-state]` once it is one of `states`."""
        deadline = time.monotonic() + timeout_s
        while (state := self.evaluate("document.body?.dataset.state")) not in states:  # no body while loading
            assert time.monotonic() < deadline, f"page state {state!r}, not {states} after {timeout_s} s: " + \
                self.evaluate("document.getElementById('error').textContent")
            time.sleep(0.2)
        return state

    def set_value(self, element_id: str, value: str) -> None:
        self.evaluate(f"document.getElementById({json.dumps(element_id)}).value = {json.dumps(value)}")

    def click(self, element_id: str) -> None:
        self.evaluate(f"document.getElementById({json.dumps(element_id)}).click()")

    def text(self, element_id: str) -> str:
        return self.evaluate(f"document.getElementById({json.dumps(element_id)}).textContent")


@contextlib.contextmanager
def headless_chromium(profile: Path) -> Iterator[DevTools]:
    """Chromium with a fresh profile, its blank page under DevTools; stopped (its process group) afterwards."""
    profile.mkdir()
    process = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=(profile.parent / "chromium.log").open("w"),
                               start_new_session=True)
    try:
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().count("\n") >= 1):
            assert process.poll() is None, (profile.parent / "chromium.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "Chromium did not open its DevTools port within 60 s"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        with connect(next(t for t in targets if t["type"] == "page")["webSocketDebuggerUrl"], max_size=None) as socket:
            yield DevTools(socket)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def question_with_an_image_in_its_evidence(url: str, synth_dir: str, stored: dict[str, bytes | None]):
    """A test question whose kept passages include one with an image, and the API's reply to it."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    for question in load_questions(synth_dir, "test")[:12]:
        reply = requests.post(f"{url}/v1/answer", headers=headers, timeout=120, json={
            "image": base64.b64encode(encode_image(question.image)).decode(), "question": question.question})
        assert reply.status_code == 200, reply.text
        if any(stored[item["doc_id"]] is not None for item in reply.json()["evidence"]):
            return question, reply.json()
    pytest.fail("none of 12 test questions kept a passage with an image")


PASSAGES_JS = """[...document.querySelectorAll('#evidence .passage')].map(li => {
  const img = li.querySelector('img.passage-image');
  const box = (img || li).getBoundingClientRect();
  return {doc_id: li.dataset.docId, title: li.querySelector('.title').textContent,
          score: li.querySelector('.score').textContent, snippet: li.querySelector('.snippet').textContent,
          image_width: img ? img.naturalWidth : null, no_image: li.querySelector('.no-image') !== null,
          box: [box.left, box.top, box.right, box.bottom]};
})"""


@pytest.mark.skipif(CHROMIUM is None, reason="no `chromium` on PATH (Debian: apt-get install chromium)")
def test_the_page_asks_for_the_key_then_renders_the_answer_query_and_kept_passages_with_images(
        demo_endpoint, synth_dir, tmp_path):
    stored = kb_images(synth_dir)
    question, expected = question_with_an_image_in_its_evidence(demo_endpoint, synth_dir, stored)
    image_file = tmp_path / "question.png"
    image_file.write_bytes(encode_image(question.image))

    with headless_chromium(tmp_path / "profile") as page:
        page.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False)
        page.call("Page.navigate", url=f"{demo_endpoint}/")
        page.wait_for_state("needs-key", timeout_s=60)
        assert "needs an API key" in page.text("key-status")
        page.set_value("api-key", "sk-wrong")
        page.evaluate("document.getElementById('key-form').requestSubmit()")
        page.wait_for_state("needs-key", timeout_s=60)
        assert "refused" in page.text("key-status")
        page.set_value("api-key", API_KEY)
        page.evaluate("document.getElementById('key-form').requestSubmit()")
        page.wait_for_state("ready", timeout_s=60)
        assert page.text("key-status") == "Key accepted."

        # Pick the image (as the file chooser would) and ask.
        file_input = page.call("DOM.querySelector", nodeId=page.call("DOM.getDocument")["root"]["nodeId"],
                               selector="#image")["nodeId"]
        page.call("DOM.setFileInputFiles", nodeId=file_input, files=[str(image_file)])
        page.set_value("question", question.question)
        page.click("ask")
        assert page.wait_for_state("answered", "error") == "answered", page.text("error")

        assert page.text("answer") == expected["answer"]
        assert page.text("query") == expected["query"]
        passages = page.evaluate(PASSAGES_JS)
        assert [(p["doc_id"], p["title"], p["snippet"], p["score"]) for p in passages] == [
            (e["doc_id"], e["title"], e["snippet"], f"score {e['score']:.3f}") for e in expected["evidence"]]
        for shown in passages:
            image = stored[shown["doc_id"]]
            if image is None:
                assert shown["no_image"] and shown["image_width"] is None, shown
            else:
                assert shown["image_width"] == Image.open(io.BytesIO(image)).width, shown
        shot = base64.b64decode(page.call("Page.captureScreenshot", format="png")["data"])
    (tmp_path / "demo_page.png").write_bytes(shot)

    pixels = np.asarray(Image.open(io.BytesIO(shot)).convert("RGB"))
    assert pixels.shape == (HEIGHT, WIDTH, 3)
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 200, "the screenshot is nearly blank"
    for shown in passages:
        if shown["image_width"]:
            left, top, right, bottom = (round(v) for v in shown["box"])
            assert pixels[top:bottom, left:right].std() > 10, f"the image of {shown['doc_id']} is not painted"
