"""Ray Serve endpoint: a tiny trained checkpoint answers over HTTP exactly as the offline greedy path does,
and malformed requests get a 4xx JSON error naming the field while the server keeps answering."""

from __future__ import annotations

import base64
import importlib
import io
from pathlib import Path

import numpy as np
import pytest
import requests
import yaml
from PIL import Image

from mmrag.config import config_to_dict, load_config
from mmrag.data.dataset import KB_FILE, encode_image, load_kb, load_questions

ROOT = Path(__file__).resolve().parents[1]
URL = "http://127.0.0.1:8000"
TINY_MODELS = ["encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
               "translator.model=zoo:tiny-lvlm"]
LIMITS = ["serving.max_image_bytes=30000", "serving.max_image_side=256", "serving.max_question_chars=200",
          "serving.max_top_k=20"]
STAGES = {"translate", "encode", "retrieve", "rerank", "generate", "total"}


@pytest.fixture(scope="module")
def trained_run(synth_dir, zoo_dir, tmp_path_factory):
    """(cfg, checkpoint, config file) of a 1-step reference training run over the 24-entity synthetic data."""
    from mmrag.retrieval.build import build_index
    from mmrag.training.reference import train_reference

    work = tmp_path_factory.mktemp("serve_run")
    cfg = load_config(ROOT / "configs/local.yaml", [
        f"data.dir={synth_dir}", f"index.dir={work / 'index'}", f"zoo.cache_dir={zoo_dir}",
        f"train.run_dir={work / 'run'}", "train.steps=1", "train.questions_per_step=2", "train.eval_questions=2",
        "translator.num_samples=2", "reranker.num_samples=2", *TINY_MODELS, *LIMITS])
    build_index(Path(synth_dir) / KB_FILE, cfg.index.dir, cfg.index, cfg.encoder, zoo_dir)
    train_reference(cfg, progress=False)
    config_path = work / "serve_config.yaml"
    config_path.write_text(yaml.safe_dump(config_to_dict(cfg)))
    return cfg, str(work / "run" / "export"), config_path


@pytest.fixture(scope="module")
def endpoint(ray_session, trained_run):
    """The application of configs/serve/local.yaml (its builder, HTTP options and route) serving the tiny checkpoint."""
    from ray import serve

    _, checkpoint, config_path = trained_run
    serve_config = yaml.safe_load((ROOT / "configs/serve/local.yaml").read_text())
    (spec,) = serve_config["applications"]
    module_name, builder_name = spec["import_path"].split(":")
    builder = getattr(importlib.import_module(module_name), builder_name)
    serve.start(http_options=serve_config["http_options"])
    serve.run(builder({**spec["args"], "config": str(config_path), "checkpoint": checkpoint}),
              name=spec["name"], route_prefix=spec["route_prefix"])
    yield URL
    serve.shutdown()


@pytest.fixture(scope="module")
def test_questions(synth_dir):
    return load_questions(synth_dir, "test")[:2]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def ask(question, options: dict | None = None) -> requests.Response:
    body = {"image": b64(encode_image(question.image)), "question": question.question}
    if options is not None:
        body["options"] = options
    return requests.post(f"{URL}/v1/answer", json=body, timeout=60)


def test_answers_over_http_as_the_offline_greedy_path(endpoint, trained_run, test_questions, synth_dir):
    from mmrag.training.pipeline import LocalPipeline
    from mmrag.training.rollout_batch import greedy_batch

    cfg, checkpoint, _ = trained_run
    offline = greedy_batch(LocalPipeline.from_config(cfg, checkpoint=checkpoint), test_questions)
    kb_ids = {doc.doc_id for doc in load_kb(synth_dir)}
    for question, expected in zip(test_questions, offline):
        reply = ask(question)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert (body["answer"], body["query"]) == (expected["answer"], expected["query"])
        assert [e["doc_id"] for e in body["evidence"]] == expected["selected"]
        assert {e["doc_id"] for e in body["evidence"]} <= kb_ids
        assert all(e["title"] and e["snippet"] and -1.0 <= e["score"] <= 1.0 for e in body["evidence"])
        assert set(body["timings_ms"]) == STAGES
        assert body["timings_ms"]["total"] >= sum(v for k, v in body["timings_ms"].items() if k != "total")
        assert body["versions"]["policy_version"] == 1

        upload = requests.post(f"{URL}/v1/answer", files={"image": ("q.png", encode_image(question.image))},
                               data={"question": question.question}, timeout=60)
        assert upload.status_code == 200, upload.text
        assert (upload.json()["answer"], upload.json()["evidence"]) == (body["answer"], body["evidence"])


def test_options_limit_and_hide_the_evidence(endpoint, test_questions):
    question = test_questions[0]
    full = ask(question).json()["evidence"]
    assert len(full) >= 1
    assert ask(question, {"max_docs": 1}).json()["evidence"] == full[:1]
    assert ask(question, {"max_docs": 0}).json()["evidence"] == []
    assert len(ask(question, {"top_k": 1}).json()["evidence"]) <= 1
    hidden = ask(question, {"return_evidence": False}).json()
    assert hidden["evidence"] == [] and hidden["answer"] == ask(question).json()["answer"]


def png_bytes(width: int, height: int, noise: bool = False) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8) if noise \
        else np.full((height, width, 3), 128, dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def malformed_corpus(good_image: bytes) -> list[tuple[str, dict, int, str]]:
    """(case, requests.post kwargs, expected status, expected error field)."""
    image = b64(good_image)

    def body(**fields) -> dict:
        return {"json": {"image": image, "question": "When was this built?", **fields}}

    def without(name: str) -> dict:
        payload = body()["json"]
        del payload[name]
        return {"json": payload}

    def form(files: dict, data: dict) -> dict:
        return {"files": files, "data": data}

    json_type = {"headers": {"content-type": "application/json"}}
    big_noise = png_bytes(128, 128, noise=True)
    assert len(big_noise) > 30000
    return [
        ("broken JSON", {"data": b'{"image": ', **json_type}, 400, "body"),
        ("not UTF-8", {"data": b"\xff\xfe\x00", **json_type}, 400, "body"),
        ("JSON array", {"json": [1, 2]}, 422, "body"),
        ("JSON string", {"json": "hello"}, 422, "body"),
        ("JSON null", {"data": b"null", **json_type}, 422, "body"),
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
        ("max_docs over the trained limit", body(options={"max_docs": 4}), 422, "options.max_docs"),
        ("return_evidence is a string", body(options={"return_evidence": "yes"}), 422, "options.return_evidence"),
        ("upload without image", form({"question": (None, "why?")}, {}), 422, "image"),
        ("upload image as text", form({"x": (None, "")}, {"image": "abc", "question": "why?"}), 422, "x"),
        ("upload non-image file", form({"image": ("a.png", b"GIF89a?")}, {"question": "why?"}), 422, "image"),
        ("upload bad options JSON", form({"image": ("a.png", good_image)}, {"question": "why?", "options": "{"}),
         422, "options"),
        ("upload without question", form({"image": ("a.png", good_image)}, {}), 422, "question"),
    ]


def test_malformed_requests_get_a_4xx_naming_the_field(endpoint, test_questions):
    question = test_questions[0]
    before = ask(question)
    assert before.status_code == 200
    corpus = malformed_corpus(encode_image(question.image))
    assert len(corpus) >= 30
    wrong = []
    for case, kwargs, status, field in corpus:
        reply = requests.post(f"{URL}/v1/answer", timeout=60, **kwargs)
        error = reply.json().get("error", {}) if reply.headers.get("content-type") == "application/json" else {}
        if (reply.status_code, error.get("field")) != (status, field) or not error.get("message"):
            wrong.append((case, reply.status_code, reply.text[:200]))
    assert wrong == []
    after = ask(question)
    assert after.status_code == 200 and after.json()["answer"] == before.json()["answer"]


def test_health_info_and_openapi(endpoint, trained_run, synth_dir):
    cfg, checkpoint, _ = trained_run
    assert requests.get(f"{URL}/healthz", timeout=10).json() == {"status": "ok"}
    info = requests.get(f"{URL}/v1/info", timeout=10).json()
    assert info["kb_size"] == len(load_kb(synth_dir)) == 144
    assert info["checkpoint"]["policy_version"] == 1 and info["index"]["num_shards"] == cfg.index.num_shards
    assert info["defaults"] == {"top_k": cfg.index.top_k, "max_docs": cfg.reranker.max_docs, "return_evidence": True}
    schema = requests.get(f"{URL}/openapi.json", timeout=10).json()
    content = schema["paths"]["/v1/answer"]["post"]["requestBody"]["content"]
    assert set(content) == {"application/json", "multipart/form-data"}
    assert {"/healthz", "/v1/info"} <= set(schema["paths"])


def test_builder_names_bad_args():
    from actors.serving.app import build_app

    with pytest.raises(ValueError, match="`checkpoint` is required"):
        build_app({"config": "configs/local.yaml"})
    with pytest.raises(ValueError, match="unknown key 'replicas'"):
        build_app({"checkpoint": "x", "replicas": 2})
    with pytest.raises(FileNotFoundError, match="no index manifest"):
        build_app({"checkpoint": "/nonexistent/export", "set": [f"index.dir={ROOT / 'nope'}"]})
