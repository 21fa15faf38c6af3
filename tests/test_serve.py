"""Ray Serve endpoint: a tiny trained checkpoint answers over HTTP exactly as the offline greedy path does;
malformed requests get a 4xx JSON error naming the field while the server keeps answering; requests beyond
the queue bound are refused with 503 and Retry-After; a killed replica of any deployment, the ingress's
included, is replaced without a 500 or a hang; the same application answers alike behind Serve's own proxy
(`serve run mmrag/configs/serve/local.yaml`); `mmrag serve` stops cleanly on SIGTERM as on Ctrl-C; the OpenAI
dialect answers a stock `openai` client; an API key guards every route but /healthz; two fronts share one
application and either stops without taking it from the other."""

from __future__ import annotations

import base64
import contextlib
import http.client
import importlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import requests
import yaml
from PIL import Image
from pydantic.json_schema import models_json_schema

from mmrag.config import config_to_dict, load_config
from mmrag.data.dataset import KB_FILE, encode_image, load_kb, load_questions

pytestmark = pytest.mark.slow  # runs mmrag serve (Ray Serve) in processes of its own

ROOT = Path(__file__).resolve().parents[1]
APP = "mmrag"
TINY_MODELS = ["encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
               "translator.model=zoo:tiny-lvlm"]
LIMITS = ["serving.max_image_bytes=30000", "serving.max_image_side=256", "serving.max_question_chars=200",
          "serving.max_top_k=20", "serving.body_timeout_s=2", "serving.retry_after_s=2",
          "index.top_k=20", "reranker.max_docs=5"]
# Small bounds, so that a few concurrent requests overflow the queue: the ingress works on 2
# requests and the front's handle holds 2 more.
BOUNDS = ["serving.max_ongoing_requests=2", "serving.max_batch_size=2", "serving.max_queued_requests=2",
          "serving.health_check_period_s=1", "serving.request_timeout_s=40"]
TIMINGS = {"parse", "translate", "encode", "retrieve", "rerank", "generate", "transfer", "total"}
GROUP = "translate+encode+retrieve+rerank+generate"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def trained_run(synth_dir, zoo_dir, tmp_path_factory):
    """(cfg, checkpoint, config file) of a 1-step single-process training run over the 24-entity synthetic data,
    exporting its last step (policy version 1: two held-out questions cannot choose a best checkpoint)."""
    from mmrag.retrieval.build import build_index
    from mmrag.training.local import train_local

    work = tmp_path_factory.mktemp("serve_run")
    cfg = load_config(ROOT / "mmrag/configs/local.yaml", [
        f"data.dir={synth_dir}", f"index.dir={work / 'index'}", f"zoo.cache_dir={zoo_dir}",
        f"train.run_dir={work / 'run'}", "train.steps=1", "train.questions_per_step=2", "train.eval_questions=2",
        "train.export=last", "translator.num_samples=2", "reranker.num_samples=2", f"serving.port={free_port()}",
        *TINY_MODELS, *LIMITS, *BOUNDS])
    build_index(Path(synth_dir) / KB_FILE, cfg.index.dir, cfg.index, cfg.encoder, zoo_dir)
    train_local(cfg, progress=False)
    config_path = work / "serve_config.yaml"
    config_path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return cfg, str(work / "run" / "export"), config_path


@pytest.fixture(scope="module")
def serve_config() -> dict:
    """mmrag/configs/serve/local.yaml, its proxy on a free port."""
    config = yaml.safe_load((ROOT / "mmrag/configs/serve/local.yaml").read_text())
    config["http_options"]["port"] = free_port()
    return config


@pytest.fixture(scope="module")
def endpoint(ray_session, trained_run, serve_config):
    """The tiny checkpoint served as `mmrag serve` serves it: the application, and the HTTP front calling its
    ingress by handle. (Serve's proxy runs too, on another port, for the `serve run` test.)"""
    from ray import serve

    from mmrag.actors.serving.app import api_settings, pipeline_app
    from mmrag.actors.serving.front import HttpFront

    cfg, checkpoint, _ = trained_run
    serve.start(http_options=serve_config["http_options"])
    front = HttpFront(cfg.serving)
    front.start(serve.run(pipeline_app(cfg, checkpoint), name=APP, route_prefix=None), api_settings(cfg, checkpoint))
    yield f"http://127.0.0.1:{cfg.serving.port}"
    front.stop()
    serve.shutdown()


@pytest.fixture(scope="module")
def test_questions(synth_dir):
    return load_questions(synth_dir, "test")[:2]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def answer_body(question) -> dict:
    return {"image": b64(encode_image(question.image)), "question": question.question}


def ask(url: str, question, options: dict | None = None) -> requests.Response:
    body = answer_body(question)
    if options is not None:
        body["options"] = options
    return requests.post(f"{url}/v1/answer", json=body, timeout=60)


def test_answers_over_http_as_the_offline_greedy_path(endpoint, trained_run, test_questions, synth_dir):
    from mmrag.training.pipeline import LocalPipeline
    from mmrag.training.evaluate import greedy_batch

    cfg, checkpoint, _ = trained_run
    offline = greedy_batch(LocalPipeline.from_config(cfg, checkpoint=checkpoint), test_questions)
    kb_ids = {doc.doc_id for doc in load_kb(synth_dir)}
    for question, expected in zip(test_questions, offline):
        reply = ask(endpoint, question)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert (body["answer"], body["query"]) == (expected["answer"], expected["query"])
        assert [e["doc_id"] for e in body["evidence"]] == expected["selected"]
        assert {e["doc_id"] for e in body["evidence"]} <= kb_ids
        assert all(e["title"] and e["snippet"] and -1.0 <= e["score"] <= 1.0 for e in body["evidence"])
        assert set(body["timings_ms"]) == TIMINGS
        assert body["timings_ms"]["total"] >= sum(v for k, v in body["timings_ms"].items() if k != "total")
        assert body["versions"]["policy_version"] == 1

        upload = requests.post(f"{endpoint}/v1/answer", files={"image": ("q.png", encode_image(question.image))},
                               data={"question": question.question}, timeout=60)
        assert upload.status_code == 200, upload.text
        assert (upload.json()["answer"], upload.json()["evidence"]) == (body["answer"], body["evidence"])

        # A chunked body, sent without a Content-Length, is read in full like any other.
        payload = json.dumps(answer_body(question)).encode()
        chunked = requests.post(f"{endpoint}/v1/answer", data=iter([payload[:100], payload[100:]]),
                                headers={"content-type": "application/json"}, timeout=60)
        assert chunked.status_code == 200, chunked.text
        assert chunked.json()["answer"] == body["answer"]


def test_options_limit_and_hide_the_evidence(endpoint, test_questions):
    question = test_questions[0]
    full = ask(endpoint, question).json()["evidence"]
    assert len(full) >= 1
    assert ask(endpoint, question, {"max_docs": 1}).json()["evidence"] == full[:1]
    assert ask(endpoint, question, {"max_docs": 0}).json()["evidence"] == []
    assert len(ask(endpoint, question, {"top_k": 1}).json()["evidence"]) <= 1
    hidden = ask(endpoint, question, {"return_evidence": False}).json()
    assert hidden["evidence"] == [] and hidden["answer"] == ask(endpoint, question).json()["answer"]


def png_bytes(width: int, height: int, noise: bool = False) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8) if noise \
        else np.full((height, width, 3), 128, dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def raw_request(head: str, body: bytes = b"", content_type: str = "application/json") -> dict:
    """A request written byte for byte (lying lengths, unfinished chunks): `head` holds its length headers."""
    headers = ["POST /v1/answer HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {content_type}", *([head] if head else [])]
    return {"raw": "\r\n".join(headers).encode() + b"\r\n\r\n" + body}


def send_raw(url: str, data: bytes) -> tuple[int, dict, bytes]:
    """(status, headers, body) of the reply to raw request bytes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(data)
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status, dict(reply.getheaders()), reply.read()


def multipart(parts: list[bytes], close: bool = True) -> bytes:
    return b"".join(b"--xyz\r\n" + part + b"\r\n" for part in parts) + (b"--xyz--\r\n" if close else b"")


def text_part(name: str, value: bytes) -> bytes:
    return f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode() + value


def file_part(name: str, value: bytes) -> bytes:
    return f'Content-Disposition: form-data; name="{name}"; filename="q.png"\r\n\r\n'.encode() + value


def malformed_corpus(good_image: bytes) -> list[tuple[str, dict, int, str]]:
    """(case, requests.post kwargs or {"raw": request bytes}, expected status, expected error field)."""
    image = b64(good_image)

    def body(**fields) -> dict:
        return {"json": {"image": image, "question": "When was this built?", **fields}}

    def without(name: str) -> dict:
        payload = body()["json"]
        del payload[name]
        return {"json": payload}

    def json_bytes(text: bytes) -> dict:
        return {"data": text, "headers": {"content-type": "application/json"}}

    def with_raw(field_json: bytes) -> dict:
        """The good body with one more raw JSON member (for what `json=` cannot write)."""
        return json_bytes(b'{"image": "' + image.encode() + b'", "question": "why?", ' + field_json + b"}")

    def form(files: dict, data: dict) -> dict:
        return {"files": files, "data": data}

    upload = [text_part("question", b"why?"), file_part("image", good_image)]
    not_utf8 = multipart([text_part("question", b"\xff"), upload[1]])
    form_type = "multipart/form-data; boundary=xyz"
    big_noise = png_bytes(128, 128, noise=True)
    assert len(big_noise) > 30000
    return [
        ("broken JSON", json_bytes(b'{"image": '), 400, "body"),
        ("not UTF-8", json_bytes(b"\xff\xfe\x00"), 400, "body"),
        ("invalid UTF-8 inside a string", with_raw(b'"options": {}, "x": "\xff\xfe"'), 400, "body"),
        ("lone surrogate escape", json_bytes(b'{"image": "a", "question": "\\ud800"}'), 400, "body"),
        ("50,000 nested arrays", json_bytes(b"[" * 50_000 + b"]" * 50_000), 400, "body"),
        ("5,000 nested objects", json_bytes(b'{"a":' * 5000 + b"1" + b"}" * 5000), 400, "body"),
        ("deep nesting inside a field", with_raw(b'"options": ' + b"[" * 3000 + b"]" * 3000), 400, "body"),
        ("a number of 5,000 digits", with_raw(b'"options": {"top_k": ' + b"9" * 5000 + b"}"), 400, "body"),
        ("top_k of 30 digits", body(options={"top_k": 10 ** 30}), 422, "options.top_k"),
        ("top_k 1e999", with_raw(b'"options": {"top_k": 1e999}'), 422, "options.top_k"),
        ("top_k NaN", with_raw(b'"options": {"top_k": NaN}'), 422, "options.top_k"),
        ("max_docs -1e308", with_raw(b'"options": {"max_docs": -1e308}'), 422, "options.max_docs"),
        ("JSON array", {"json": [1, 2]}, 422, "body"),
        ("JSON string", {"json": "hello"}, 422, "body"),
        ("JSON null", json_bytes(b"null"), 422, "body"),
        ("empty JSON body", json_bytes(b""), 400, "body"),
        ("no content type", {"data": b"{}"}, 415, "content-type"),
        ("text/plain", {"data": b"hi", "headers": {"content-type": "text/plain"}}, 415, "content-type"),
        ("missing image", without("image"), 422, "image"),
        ("missing question", without("question"), 422, "question"),
        ("unknown top-level field", body(extra=1), 422, "extra"),
        ("image is a number", body(image=12), 422, "image"),
        ("image is a list", body(image=[1, 2]), 422, "image"),
        ("image is not base64", body(image="!!not base64!!"), 422, "image"),
        ("image is empty", body(image=""), 422, "image"),
        ("image bytes are text", body(image=b64(b"hello, I am not an image")), 422, "image"),
        ("image is a truncated PNG", body(image=b64(good_image[:60])), 422, "image"),
        ("bad base64 in a data URL", body(image="data:image/png;base64,@@@"), 422, "image"),
        ("image over the byte limit", body(image=b64(big_noise)), 413, "image"),
        ("image over the side limit", body(image=b64(png_bytes(300, 8))), 413, "image"),
        ("question is a number", body(question=7), 422, "question"),
        ("question is a list", body(question=["a"]), 422, "question"),
        ("question is null", body(question=None), 422, "question"),
        ("question is empty", body(question=""), 422, "question"),
        ("question is blank", body(question="   "), 422, "question"),
        ("question too long", body(question="why " * 60), 422, "question"),
        ("options is a string", body(options="fast"), 422, "options"),
        ("options is a list", body(options=[1]), 422, "options"),
        ("unknown option", body(options={"temperature": 0.5}), 422, "options.temperature"),
        ("top_k is a string", body(options={"top_k": "5"}), 422, "options.top_k"),
        ("top_k is a float", body(options={"top_k": 2.5}), 422, "options.top_k"),
        ("top_k is a bool", body(options={"top_k": True}), 422, "options.top_k"),
        ("top_k is zero", body(options={"top_k": 0}), 422, "options.top_k"),
        ("top_k over the limit", body(options={"top_k": 21}), 422, "options.top_k"),
        ("max_docs negative", body(options={"max_docs": -1}), 422, "options.max_docs"),
        ("max_docs over the trained limit", body(options={"max_docs": 6}), 422, "options.max_docs"),
        ("return_evidence is a string", body(options={"return_evidence": "yes"}), 422, "options.return_evidence"),
        ("upload without image", form({"question": (None, "why?")}, {}), 422, "image"),
        ("upload image as text", form({"x": (None, "")}, {"image": "abc", "question": "why?"}), 422, "x"),
        ("upload non-image file", form({"image": ("a.png", b"GIF89a?")}, {"question": "why?"}), 422, "image"),
        ("upload bad options JSON", form({"image": ("a.png", good_image)}, {"question": "why?", "options": "{"}),
         422, "options"),
        ("upload options nested deep", form({"image": ("a.png", good_image)},
                                            {"question": "why?", "options": "[" * 5000 + "]" * 5000}), 422, "options"),
        ("upload option out of range", form({"image": ("a.png", good_image)},
                                            {"question": "why?", "options": '{"top_k": 1e999}'}), 422, "options.top_k"),
        ("upload without question", form({"image": ("a.png", good_image)}, {}), 422, "question"),
        ("upload question not UTF-8", raw_request(f"Content-Length: {len(not_utf8)}", not_utf8, form_type), 400,
         "question"),
        ("upload given twice", form({"image": ("a.png", good_image)}, {"question": ["why?", "how?"]}), 422,
         "question"),
        ("truncated upload", raw_request(f"Content-Length: {len(multipart(upload, close=False))}",
                                         multipart(upload, close=False), form_type), 400, "body"),
        ("upload cut inside the image", raw_request(f"Content-Length: {len(multipart(upload)[:-40])}",
                                                    multipart(upload)[:-40], form_type), 400, "body"),
        ("upload without a boundary", {"data": b"x", "headers": {"content-type": "multipart/form-data"}}, 400,
         "content-type"),
        ("upload that is not multipart", {"data": b"hello --xyz--", "headers": {"content-type": form_type}}, 400,
         "body"),
        ("body longer than the limit, chunked", {"data": iter([b"[" * 8192] * 16), "headers": {
            "content-type": "application/json"}}, 413, "body"),
        ("Content-Length over the limit", raw_request("Content-Length: 1000000000", b"{}"), 413, "body"),
        ("body shorter than its Content-Length", raw_request("Content-Length: 1000", b'{"image": '), 408, "body"),
        ("chunked body that stops mid-way", raw_request("Transfer-Encoding: chunked", b'9\r\n{"image":\r\n'),
         408, "body"),
        ("no length and no body", raw_request(""), 400, "body"),
    ]


def test_malformed_requests_get_a_4xx_naming_the_field(endpoint, test_questions):
    question = test_questions[0]
    before = ask(endpoint, question)
    assert before.status_code == 200
    corpus = malformed_corpus(encode_image(question.image))
    assert len(corpus) >= 60
    wrong = []
    for case, kwargs, status, field in corpus:
        if "raw" in kwargs:
            got, headers, content = send_raw(endpoint, kwargs["raw"])
        else:
            reply = requests.post(f"{endpoint}/v1/answer", timeout=60, **kwargs)
            got, headers, content = reply.status_code, reply.headers, reply.content
        error = json.loads(content).get("error", {}) if headers.get("content-type") == "application/json" else {}
        if (got, error.get("field")) != (status, field) or not error.get("message"):
            wrong.append((case, got, content[:200]))
    assert wrong == [], "\n".join(map(str, wrong))
    after = ask(endpoint, question)
    assert after.status_code == 200 and after.json()["answer"] == before.json()["answer"]


def test_health_info_and_an_openapi_document_generated_from_the_models(endpoint, trained_run, synth_dir):
    from mmrag.serving.schema import AnswerBody, AnswerReply, AnswerUpload

    cfg, checkpoint, _ = trained_run
    assert requests.get(f"{endpoint}/healthz", timeout=10).json() == {"status": "ok"}
    info = requests.get(f"{endpoint}/v1/info", timeout=10).json()
    assert info["kb_size"] == len(load_kb(synth_dir)) == 144
    assert info["checkpoint"]["policy_version"] == 1 and info["index"]["num_shards"] == cfg.index.num_shards
    assert info["defaults"] == {"top_k": cfg.index.top_k, "max_docs": cfg.reranker.max_docs, "return_evidence": True}
    document = requests.get(f"{endpoint}/openapi.json", timeout=10).json()
    answer = document["paths"]["/v1/answer"]["post"]
    content = answer["requestBody"]["content"]
    assert content == {"application/json": {"schema": {"$ref": "#/components/schemas/AnswerBody"}},
                       "multipart/form-data": {"schema": {"$ref": "#/components/schemas/AnswerUpload"}}}
    _, models = models_json_schema([(AnswerBody, "validation"), (AnswerUpload, "validation")],
                                   ref_template="#/components/schemas/{model}")
    schemas = document["components"]["schemas"]
    assert {name: schemas[name] for name in models["$defs"]} == models["$defs"]
    assert answer["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{AnswerReply.__name__}"}
    assert {"400", "413", "422", "503"} <= set(answer["responses"])
    assert {"/healthz", "/v1/info"} <= set(document["paths"])
    missing = requests.get(f"{endpoint}/v2/answer", timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["field"] == "path"


def test_requests_beyond_the_queue_bound_get_503_with_retry_after(endpoint, trained_run, test_questions):
    cfg, _, _ = trained_run
    body = answer_body(test_questions[0])
    replies: list[requests.Response] = []

    def send() -> None:
        replies.append(requests.post(f"{endpoint}/v1/answer", json=body, timeout=60))

    # 4 admitted (2 worked on by the ingress, 2 queued in the front's handle): most of 24 at once are refused.
    clients = [threading.Thread(target=send) for _ in range(24)]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    statuses = [reply.status_code for reply in replies]
    assert len(statuses) == 24 and set(statuses) == {200, 503}, statuses
    assert all(reply.headers.get("Retry-After") == str(cfg.serving.retry_after_s)
               for reply in replies if reply.status_code == 503)
    assert ask(endpoint, test_questions[0]).status_code == 200


def replica_pid(deployment: str) -> int:
    from mmrag.actors.serving.app import replica_pids

    (pid,) = replica_pids(APP, deployment)
    return pid


@pytest.mark.parametrize("deployment", [GROUP, "AnswerIngress"])
def test_a_killed_replica_is_replaced_and_requests_in_flight_are_retried_or_refused(endpoint, test_questions,
                                                                                    deployment):
    before = [ask(endpoint, question).json()["answer"] for question in test_questions]
    outcomes: list[tuple[float, float, int, str | None]] = []
    stop = threading.Event()

    def keep_asking() -> None:
        session = requests.Session()
        while not stop.is_set():
            begin = time.monotonic()
            reply = session.post(f"{endpoint}/v1/answer", json=answer_body(test_questions[0]), timeout=90)
            outcomes.append((begin, time.monotonic(), reply.status_code, reply.headers.get("Retry-After")))

    clients = [threading.Thread(target=keep_asking) for _ in range(2)]
    for client in clients:
        client.start()
    time.sleep(1.0)
    killed = replica_pid(deployment)
    killed_at = time.monotonic()
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 90
    while not any(begin > killed_at and status == 200 for begin, _, status, _ in outcomes):
        assert time.monotonic() < deadline, "no answer within 90 s of the kill"
        time.sleep(0.5)
    stop.set()
    for client in clients:
        client.join()
    assert replica_pid(deployment) != killed
    assert any(begin < killed_at < end for begin, end, _, _ in outcomes), "no request was in flight at the kill"
    assert {status for _, _, status, _ in outcomes} <= {200, 503}, outcomes
    assert all(retry_after for _, _, status, retry_after in outcomes if status == 503)
    assert [ask(endpoint, question).json()["answer"] for question in test_questions] == before


def test_serve_run_config_behind_serves_proxy_with_the_stages_split_answers_as_the_front(endpoint, trained_run,
                                                                                         serve_config, test_questions):
    """mmrag/configs/serve/local.yaml's application (its builder, route and proxy) answers as `mmrag serve`'s front does,
    here with the first group in the ingress, the retrieval shards in deployments of their own, then one more
    group, and the image by reference to its two readers."""
    from ray import serve

    _, checkpoint, config_path = trained_run
    (spec,) = serve_config["applications"]
    module_name, builder_name = spec["import_path"].split(":")
    builder = getattr(importlib.import_module(module_name), builder_name)
    split = ["serving.stage_groups=[[translate, encode], [retrieve], [rerank, generate]]",
             "serving.first_group_in_ingress=true", "serving.image_reference_min_bytes=0"]
    serve.run(builder({**spec["args"], "config": str(config_path), "checkpoint": checkpoint, "set": split}),
              name="proxied", route_prefix=spec["route_prefix"])
    proxied = f"http://127.0.0.1:{serve_config['http_options']['port']}"
    try:
        for question in test_questions:
            front, proxy = ask(endpoint, question).json(), ask(proxied, question).json()
            assert (proxy["answer"], proxy["query"], proxy["evidence"]) == (front["answer"], front["query"],
                                                                           front["evidence"])
            assert proxy["timings_ms"]["transfer"] > 0
        assert requests.get(f"{proxied}/v2/answer", timeout=10).json()["error"]["field"] == "path"
    finally:
        serve.delete("proxied")


def test_builder_names_bad_args():
    from mmrag.actors.serving.app import build_app

    with pytest.raises(ValueError, match="`checkpoint` is required"):
        build_app({"config": "mmrag/configs/local.yaml"})
    with pytest.raises(ValueError, match="unknown key 'replicas'"):
        build_app({"checkpoint": "x", "replicas": 2})
    with pytest.raises(FileNotFoundError, match="no index manifest"):
        build_app({"checkpoint": "/nonexistent/export", "set": [f"index.dir={ROOT / 'nope'}"]})
    with pytest.raises(ValueError, match="serving.stage_groups: expected non-empty groups"):
        build_app({"checkpoint": "x", "set": ["serving.stage_groups=[[translate], [generate]]"]})
    with pytest.raises(ValueError, match=r"group \['rerank', 'generate'\] needs 1.5 GPUs"):
        build_app({"checkpoint": "x", "set": ["serving.stage_groups=[[translate, encode, retrieve], [rerank, generate]]",
                                              "reranker.num_gpus=0.5", "generator.num_gpus=1"]})


@contextlib.contextmanager
def serving_process(config_path: Path, checkpoint: str, logs: Path, *options: str,
                    env_vars: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """`python -m mmrag.pipelines.serve` in its own session (so only the signals sent here reach it), logs to files;
    whatever happens in the test, its process group (and a Ray it started) is gone afterwards."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_vars or {})}
    env.pop("RAY_ADDRESS", None)
    process = subprocess.Popen([sys.executable, "-m", "mmrag.pipelines.serve", "--config", str(config_path),
                                "--checkpoint", checkpoint, *options], cwd=ROOT, env=env, start_new_session=True,
                               stdout=(logs / "stdout").open("w"), stderr=(logs / "stderr").open("w"))
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_healthy(process: subprocess.Popen, url: str, logs: Path) -> None:
    deadline = time.monotonic() + 240
    while True:
        assert process.poll() is None, (logs / "stderr").read_text()[-3000:]
        assert time.monotonic() < deadline, "mmrag serve did not come up within 240 s"
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or still starting up
            pass
        time.sleep(1)


STOP_GRACE_S = 30
"""How long a stop may take: Kubernetes' default termination grace period, after which it sends SIGKILL. (10 s
failed once on 2 cores shared with two training jobs and the suite: the Ray this command started took longer to
shut down.)"""


def stop_within_grace(process: subprocess.Popen, signum: int, logs: Path,
                      limit_s: float = STOP_GRACE_S) -> tuple[str, str]:
    """Send `signum`; the command must exit 0 within `limit_s` without a stack dump. Its (stdout, stderr)."""
    begin = time.monotonic()
    process.send_signal(signum)
    status = process.wait(timeout=limit_s)
    elapsed = time.monotonic() - begin
    out, err = (logs / "stdout").read_text(), (logs / "stderr").read_text()
    assert status == 0 and elapsed < limit_s, (status, elapsed, err[-3000:])
    assert "Traceback" not in err and "*** SIG" not in err, err[-3000:]
    return out, err


def test_sigterm_stops_serve_deletes_the_application_and_shuts_down_the_ray_it_started(trained_run, tmp_path):
    cfg, checkpoint, config_path = trained_run
    port = free_port()
    with serving_process(config_path, checkpoint, tmp_path, "--set", f"serving.port={port}") as process:
        wait_healthy(process, f"http://127.0.0.1:{port}/healthz", tmp_path)
        out, _ = stop_within_grace(process, signal.SIGTERM, tmp_path)
    assert "deleting the application 'mmrag'; then shutting down the Ray this command started" in out
    # The front ended with the command; Ray's processes (started in the command's session) end as it shuts down.
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
    deadline = time.monotonic() + 10
    while remaining := session_processes(process.pid):
        assert time.monotonic() < deadline, f"Ray still runs 10 s after mmrag serve exited: {remaining}"
        time.sleep(0.5)


def session_processes(session_id: int) -> list[str]:
    """Names of the live processes of a session (from /proc: the session id is the 6th field of stat)."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
            if int(fields[3]) == session_id and fields[0] != "Z":
                names.append(name)
    return names


def test_ctrl_c_stops_serve_on_a_joined_cluster_and_leaves_the_cluster_running(endpoint, trained_run, tmp_path):
    import ray
    from ray import serve

    _, checkpoint, config_path = trained_run
    port = free_port()
    with serving_process(config_path, checkpoint, tmp_path, "--address", ray.get_runtime_context().gcs_address,
                         "--name", "signal-test", "--set", f"serving.port={port}") as process:
        wait_healthy(process, f"http://127.0.0.1:{port}/healthz", tmp_path)
        out, _ = stop_within_grace(process, signal.SIGINT, tmp_path)
    assert "deleting the application 'signal-test'; the cluster keeps running" in out
    assert "signal-test" not in serve.status().applications
    assert requests.get(f"{endpoint}/healthz", timeout=10).status_code == 200


def test_a_port_in_use_fails_at_once_before_ray_starts(trained_run):
    _, checkpoint, config_path = trained_run
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "mmrag.pipelines.serve", "--config", str(config_path), "--checkpoint",
                                 checkpoint, "--set", f"serving.port={port}"], cwd=ROOT, env=env, capture_output=True,
                                text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"serve: cannot listen on 127.0.0.1:{port}" in result.stderr and "serving.port" in result.stderr
    assert "Started a local Ray" not in result.stderr


def data_url(image_bytes: bytes) -> str:
    return f"data:image/png;base64,{b64(image_bytes)}"


def chat_body(image_url: str, text: str, **fields) -> dict:
    return {"model": "mmrag", "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": image_url}}]},
    ], **fields}


def test_replicas_start_with_the_offline_switches_in_their_environment(endpoint):
    """Set when the process starts (its runtime_env), not after it has imported transformers: /proc shows the
    environment a process began with."""
    start_env = dict(item.split("=", 1) for item in
                     Path(f"/proc/{replica_pid(GROUP)}/environ").read_text().split("\0") if "=" in item)
    assert {key: start_env.get(key) for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                                               "HF_HUB_DISABLE_PROGRESS_BARS")} == dict.fromkeys(
        ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_PROGRESS_BARS"), "1")


def test_chat_completions_answer_as_v1_answer_and_malformed_messages_get_openai_errors(endpoint, test_questions):
    question = test_questions[0]
    image = encode_image(question.image)
    expected = ask(endpoint, question).json()
    reply = requests.post(f"{endpoint}/v1/chat/completions", json=chat_body(data_url(image), question.question,
                                                                            temperature=0.7), timeout=60)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["object"] == "chat.completion" and body["model"] == "mmrag" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected["answer"]}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert (body["query"], body["evidence"]) == (expected["query"], expected["evidence"])
    models = requests.get(f"{endpoint}/v1/models", timeout=10).json()
    assert [model["id"] for model in models["data"]] == ["mmrag"] and models["object"] == "list"

    def user(*parts) -> dict:
        return {"model": "mmrag", "messages": [{"role": "user", "content": list(parts)}]}

    text = {"type": "text", "text": "why?"}
    picture = {"type": "image_url", "image_url": {"url": data_url(image)}}
    noise = png_bytes(128, 128, noise=True)
    last = "messages.0.content"
    cases = [
        ("an http URL", user(text, {"type": "image_url", "image_url": {"url": "http://example.com/a.png"}}), 400,
         f"{last}.1.image_url.url", "image_url_not_supported"),
        ("no image", user(text), 400, last, None),
        ("two images", user(text, picture, picture), 400, last, None),
        ("no text", user(picture), 400, last, None),
        ("blank question", user({"type": "text", "text": "  "}, picture), 400, last, None),
        ("content is a string", {"model": "mmrag", "messages": [{"role": "user", "content": "why?"}]}, 400, last,
         None),
        ("last message is the assistant's", {"model": "mmrag", "messages": [
            user(text, picture)["messages"][0], {"role": "assistant", "content": "no"}]}, 400, "messages.1.role", None),
        ("no messages", {"model": "mmrag", "messages": []}, 400, "messages", None),
        ("no model", {"messages": user(text, picture)["messages"]}, 400, "model", None),
        ("another model", {**user(text, picture), "model": "gpt-4o"}, 404, "model", "model_not_found"),
        ("unknown part type", user(text, {"type": "input_audio", "input_audio": {}}), 400, f"{last}.1", None),
        ("image_url without url", user(text, {"type": "image_url", "image_url": {}}), 400, f"{last}.1.image_url",
         None),
        ("data URL not base64", user(text, {"type": "image_url", "image_url": {"url": "data:image/png,abc"}}), 400,
         f"{last}.1.image_url.url", None),
        ("bad base64", user(text, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}), 400,
         f"{last}.1.image_url.url", None),
        ("truncated PNG", user(text, {"type": "image_url", "image_url": {"url": data_url(image[:60])}}), 400,
         f"{last}.1.image_url.url", None),
        ("image over the byte limit", user(text, {"type": "image_url", "image_url": {"url": data_url(noise)}}), 413,
         f"{last}.1.image_url.url", None),
        ("stream is a string", {**user(text, picture), "stream": "yes"}, 400, "stream", None),
        ("top_k zero", {**user(text, picture), "top_k": 0}, 400, "top_k", None),
    ]
    wrong = []
    for case, payload, status, param, code in cases:
        got = requests.post(f"{endpoint}/v1/chat/completions", json=payload, timeout=60)
        error = got.json().get("error", {})
        if (got.status_code, error.get("param"), error.get("code")) != (status, param, code) or not (
                error.get("message") and error.get("type")):
            wrong.append((case, got.status_code, got.text[:300]))
    broken = requests.post(f"{endpoint}/v1/chat/completions", data=b'{"model": ',
                           headers={"content-type": "application/json"}, timeout=10)
    plain = requests.post(f"{endpoint}/v1/chat/completions", data=b"hi", headers={"content-type": "text/plain"},
                          timeout=10)
    assert (broken.status_code, broken.json()["error"]["param"]) == (400, "body")
    assert (plain.status_code, plain.json()["error"]["type"]) == (415, "invalid_request_error")
    assert wrong == [], "\n".join(map(str, wrong))


API_KEY = "sk-test-" + "0123456789abcdef"


@pytest.mark.slow
def test_two_fronts_share_one_application_and_either_stops_without_taking_it_from_the_other(endpoint, trained_run,
                                                                                            test_questions, tmp_path):
    """The first `mmrag serve` deploys, the second attaches; SIGTERM of the first (its creator) under load
    leaves every answer of the second 200 and the application deployed; a stock `openai` client, with the
    API key both fronts take from $MMRAG_API_KEY, gets answers (and a stream) from the second."""
    import ray
    from ray import serve

    _, checkpoint, config_path = trained_run
    address, ports = ray.get_runtime_context().gcs_address, (free_port(), free_port())
    logs = [tmp_path / "first", tmp_path / "second"]
    for log in logs:
        log.mkdir()
    question = test_questions[0]
    headers = {"Authorization": f"Bearer {API_KEY}"}

    def front(number: int):
        return serving_process(config_path, checkpoint, logs[number], "--address", address, "--name", "replicated",
                               "--set", f"serving.port={ports[number]}", env_vars={"MMRAG_API_KEY": API_KEY})

    second_url = f"http://127.0.0.1:{ports[1]}"
    try:
        with front(0) as first:
            wait_healthy(first, f"http://127.0.0.1:{ports[0]}/healthz", logs[0])
            with front(1) as second:
                wait_healthy(second, f"{second_url}/healthz", logs[1])
                while "serving " not in (logs[1] / "stdout").read_text():  # printed just after the front starts
                    time.sleep(0.1)
                assert "attached to the running application 'replicated'" in (logs[1] / "stdout").read_text()
                statuses: list[int] = []
                stop = threading.Event()

                def keep_asking() -> None:
                    session = requests.Session()
                    while not stop.is_set() and len(statuses) < 400:
                        try:
                            statuses.append(session.post(f"{second_url}/v1/answer", json=answer_body(question),
                                                         headers=headers, timeout=60).status_code)
                        except requests.ConnectionError:
                            statuses.append(0)

                clients = [threading.Thread(target=keep_asking) for _ in range(2)]
                for client in clients:
                    client.start()
                time.sleep(1.0)
                sent_before = len(statuses)
                # Under load on a busy machine: more than the 10 s of an idle stop.
                out, _ = stop_within_grace(first, signal.SIGTERM, logs[0], limit_s=40)
                after_stop = len(statuses)
                time.sleep(2.0)
                stop.set()
                for client in clients:
                    client.join()
                assert sent_before > 0 and len(statuses) > after_stop, (sent_before, after_stop, len(statuses))
                assert set(statuses) == {200}, statuses
                assert "leaving the application 'replicated' deployed: 1 other front(s) still use it" in out
                assert "replicated" in serve.status().applications

                client = openai.OpenAI(base_url=f"{second_url}/v1", api_key=API_KEY, max_retries=0)
                assert [model.id for model in client.models.list()] == ["mmrag"]
                messages = [{"role": "user", "content": [
                    {"type": "text", "text": question.question},
                    {"type": "image_url", "image_url": {"url": data_url(encode_image(question.image))}}]}]
                expected = requests.post(f"{second_url}/v1/answer", json=answer_body(question), headers=headers,
                                         timeout=60).json()
                completion = client.chat.completions.create(model="mmrag", messages=messages)
                assert completion.choices[0].message.content == expected["answer"]
                assert completion.model_extra["evidence"] == expected["evidence"]
                chunks = list(client.chat.completions.create(model="mmrag", messages=messages, stream=True))
                assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == expected["answer"]
                assert chunks[-1].choices[0].finish_reason == "stop"
                with pytest.raises(openai.BadRequestError, match="fetches nothing"):
                    client.chat.completions.create(model="mmrag", messages=[{"role": "user", "content": [
                        {"type": "text", "text": "why?"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}])
                with pytest.raises(openai.AuthenticationError):
                    openai.OpenAI(base_url=f"{second_url}/v1", api_key="wrong", max_retries=0).models.list()
                for method, path in [("get", "/v1/models"), ("get", "/v1/info"), ("post", "/v1/answer"),
                                     ("post", "/v1/chat/completions"), ("get", "/nowhere")]:
                    for given in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
                        reply = requests.request(method, f"{second_url}{path}", headers=given, json={}, timeout=10)
                        assert reply.status_code == 401, (path, given, reply.status_code)
                        assert reply.json()["error"]["code"] == "invalid_api_key"
                assert requests.get(f"{second_url}/healthz", timeout=10).status_code == 200

                out, _ = stop_within_grace(second, signal.SIGTERM, logs[1], limit_s=40)
                assert "leaving the application 'replicated' deployed (this front attached to it" in out
        assert "replicated" in serve.status().applications
    finally:
        serve.delete("replicated")
