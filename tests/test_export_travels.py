"""An export travels: it records no absolute path of the machine that wrote it (config paths relative to the export,
the zoo cache under ~, a LoRA adapter's base as `zoo:NAME`); moved with its index, copied with the index inside it,
or given an index by path, it loads with `mmrag.Pipeline` and serves with `mmrag serve` from any directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import torch

from mmrag.data.dataset import encode_image, load_questions

ROOT = Path(__file__).resolve().parents[1]
TINY_MODELS = ["encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
               "translator.model=zoo:tiny-lvlm"]


@pytest.fixture(scope="module")
def lora_export(synth_dir, zoo_dir, tmp_path_factory):
    """(work dir, offline answers of 2 test questions, the questions): a LoRA export at WORK/run/export of a run
    whose data, index and run directories are absolute paths, its index at WORK/index."""
    from mmrag.config import load_config
    from mmrag.retrieval.build import build_index
    from mmrag.training.evaluate import greedy_batch
    from mmrag.training.export import save_export
    from mmrag.training.model_card import write_model_card
    from mmrag.training.pipeline import LocalPipeline

    work = tmp_path_factory.mktemp("travel")
    cfg = load_config(ROOT / "mmrag/configs/local.yaml", [
        f"data.dir={synth_dir}", f"index.dir={work / 'index'}", f"zoo.cache_dir={zoo_dir}",
        f"train.run_dir={work / 'run'}", "translator.lora.enabled=true", *TINY_MODELS])
    build_index(Path(synth_dir) / "kb.parquet", cfg.index.dir, cfg.index, cfg.encoder, zoo_dir, progress=False)
    pipeline = LocalPipeline.from_config(cfg)
    with torch.no_grad():  # trained-looking weights, so a load that silently falls back to the base shows
        for param in pipeline.translator.model.parameters():
            if param.requires_grad:
                param.add_(0.05)
    save_export(work / "run" / "export", pipeline.translator, pipeline.reranker, 2, cfg)
    write_model_card(work / "run" / "export", cfg, {0: {"reward_mean": 0.25}, 2: {"reward_mean": 0.5}})
    questions = load_questions(synth_dir, "test")[:2]
    offline = greedy_batch(LocalPipeline.from_config(cfg, checkpoint=str(work / "run" / "export")), questions)
    return work, offline, questions


def answers_of(pipeline, questions) -> list[tuple[str, str, list[str]]]:
    return [(r.answer, r.query, [e.doc_id for e in r.evidence])
            for r in pipeline.answer_batch([q.image for q in questions], [q.question for q in questions])]


def expected(offline) -> list[tuple[str, str, list[str]]]:
    return [(row["answer"], row["query"], row["selected"]) for row in offline]


def test_an_export_records_no_absolute_path_of_the_machine_that_wrote_it(lora_export, zoo_dir, synth_dir):
    work, _, _ = lora_export
    export = work / "run" / "export"
    machine_paths = {str(work), str(Path(zoo_dir).resolve()), str(Path(synth_dir).resolve()), str(Path.home())}
    for path in export.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".txt", ".jinja", ".yaml"):
            text = path.read_text()
            assert not [p for p in machine_paths if p in text], f"{path.relative_to(export)} names {machine_paths}"
    config = json.loads((export / "export.json").read_text())["config"]
    assert (config["index"]["dir"], config["train"]["run_dir"]) == ("../../index", "..")
    assert config["zoo"]["cache_dir"].startswith("~/") or config["zoo"]["cache_dir"] == "~/.cache/mmrag/zoo"
    adapter = json.loads((export / "translator" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == "zoo:tiny-lvlm"
    card = (export / "README.md").read_text()
    assert "`../../index`" in card and "index.dir=PATH_OR_URI" in card and "PeftModel.from_pretrained" in card


def test_an_export_moved_with_its_index_loads_from_another_directory(lora_export, tmp_path, monkeypatch):
    from mmrag import Pipeline

    work, offline, questions = lora_export
    moved = tmp_path / "elsewhere"
    shutil.copytree(work, moved)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    (work / "index").rename(work / "index.aside")  # moved, not copied: the original place is gone
    try:
        pipeline = Pipeline.from_pretrained(moved / "run" / "export")
    finally:
        (work / "index.aside").rename(work / "index")
    assert pipeline.cfg.index.dir == str(moved / "index")
    assert answers_of(pipeline, questions) == expected(offline)


def test_an_export_copied_alone_loads_with_the_index_inside_it_or_one_named_by_path(lora_export, tmp_path,
                                                                                      monkeypatch):
    from mmrag import Pipeline

    work, offline, questions = lora_export
    alone = tmp_path / "alone"
    shutil.copytree(work / "run" / "export", alone)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no index manifest for the export .* index.dir=PATH_OR_URI"):
        Pipeline.from_pretrained(alone)
    assert answers_of(Pipeline.from_pretrained(alone, overrides=[f"index.dir={work / 'index'}"]),
                      questions) == expected(offline)
    shutil.copytree(work / "index", alone / "index")
    assert answers_of(Pipeline.from_pretrained("alone"), questions) == expected(offline)


@pytest.mark.slow
def test_mmrag_serve_serves_an_export_moved_to_another_directory_from_a_third(lora_export, tmp_path):
    from tests.test_serve import free_port

    work, offline, questions = lora_export
    moved = tmp_path / "moved"
    shutil.copytree(work / "run" / "export", moved / "export")
    shutil.copytree(work / "index", moved / "export" / "index")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RAY_ADDRESS", None)
    logs = tmp_path / "stderr"
    process = subprocess.Popen([sys.executable, "-m", "mmrag.pipelines.cli", "serve", "--checkpoint",
                                str(moved / "export"), "--host", "127.0.0.1", "--port", str(port)],
                               cwd=cwd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=logs.open("w"))
    try:
        deadline = time.monotonic() + 240
        while True:
            assert process.poll() is None, logs.read_text()[-3000:]
            assert time.monotonic() < deadline, "mmrag serve did not come up within 240 s"
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet
                pass
            time.sleep(1)
        reply = requests.post(f"http://127.0.0.1:{port}/v1/answer", files={"image": encode_image(questions[0].image)},
                              data={"question": questions[0].question}, timeout=120)
        assert reply.status_code == 200, reply.text
        assert (reply.json()["answer"], reply.json()["query"]) == expected(offline)[0][:2]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0, logs.read_text()[-3000:]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_serve_of_an_export_copied_without_its_index_says_where_to_put_one(lora_export, tmp_path, capsys):
    from mmrag.pipelines.cli import main

    work, _, _ = lora_export
    shutil.copytree(work / "run" / "export", tmp_path / "alone")
    assert main(["serve", "--checkpoint", str(tmp_path / "alone")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and error.startswith("serve: ")
    assert f"no index manifest for the export {tmp_path / 'alone'}: put the index in {tmp_path / 'alone' / 'index'}" \
        in error and "index.dir=PATH_OR_URI" in error
