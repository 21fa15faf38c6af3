"""`mmrag.Pipeline`, the Python API, and the export it loads: `Pipeline.from_pretrained(RUN_DIR/export)` answers
as the offline greedy path does, alone or in batches, from a path, PIL image or bytes; the reranker exports as
safetensors with a JSON config (an older pickled `reranker.pt` still loads); an export replaces the previous one
whole; the model card names the base models, the data and the held-out metrics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from mmrag.data.dataset import encode_image, load_questions

def test_pipeline_from_pretrained_answers_as_the_offline_greedy_path(tiny_export, synth_dir, monkeypatch, tmp_path):
    from mmrag import Pipeline
    from mmrag.training.evaluate import greedy_batch

    cfg, export, offline_pipeline = tiny_export
    questions = load_questions(synth_dir, "test")[:3]
    offline = greedy_batch(offline_pipeline, questions)
    monkeypatch.chdir(tmp_path)  # the export loads from any directory (its paths are relative to itself)
    pipeline = Pipeline.from_pretrained(export, device="cpu")
    assert pipeline.policy_version == 3
    image_file = tmp_path / "q.png"
    image_file.write_bytes(encode_image(questions[0].image))
    for image in (questions[0].image, encode_image(questions[0].image), str(image_file)):
        one = pipeline.answer(image, questions[0].question)
        assert (one.answer, one.query) == (offline[0]["answer"], offline[0]["query"])
        assert [e.doc_id for e in one.evidence] == offline[0]["selected"]
        assert all(e.title and e.text and -1.0 <= e.score <= 1.0 for e in one.evidence)
    batch = pipeline.answer_batch([q.image for q in questions], [q.question for q in questions], batch_size=2)
    assert [(r.answer, r.query, [e.doc_id for e in r.evidence]) for r in batch] == [
        (row["answer"], row["query"], row["selected"]) for row in offline]
    assert pipeline.answer(questions[0].image, questions[0].question, max_docs=0).evidence == []
    most = cfg.reranker.max_docs
    with pytest.raises(ValueError, match=f"max_docs: expected 0..{most}"):
        pipeline.answer(questions[0].image, questions[0].question, max_docs=most + 1)
    with pytest.raises(ValueError, match="2 images but 1 questions"):
        pipeline.answer_batch([questions[0].image] * 2, ["why?"])


def test_the_reranker_exports_as_safetensors_with_a_config_and_an_older_pickle_still_loads(tiny_export, tmp_path):
    from safetensors.torch import load_file

    from mmrag.models.reranker import AdaptiveReranker
    from mmrag.training.export import exported_reranker_state, load_reranker_weights

    cfg, export, pipeline = tiny_export
    names = {path.relative_to(export).as_posix() for path in export.rglob("*") if path.is_file()}
    assert {"reranker/model.safetensors", "reranker/config.json", "export.json"} <= names
    assert "reranker.pt" not in names and not any(".writing-" in name for name in names)
    trained = pipeline.reranker.trainable_state_dict()
    stored = load_file(export / "reranker" / "model.safetensors")
    assert stored.keys() == trained.keys() and all(torch.equal(stored[k], trained[k]) for k in trained)
    config = json.loads((export / "reranker" / "config.json").read_text())
    assert config["policy_version"] == 3 and config["reranker"]["max_docs"] == cfg.reranker.max_docs
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "export.json").write_text((export / "export.json").read_text())
    torch.save(trained, legacy / "reranker.pt")
    fresh = AdaptiveReranker.from_config(cfg.reranker, cfg.zoo.cache_dir, "cpu")
    load_reranker_weights(fresh, legacy)
    assert all(torch.equal(exported_reranker_state(legacy)[k], trained[k]) for k in trained)
    assert all(torch.equal(fresh.trainable_state_dict()[k], trained[k]) for k in trained)


def test_an_export_replaces_the_previous_one_whole_or_not_at_all(tmp_path):
    from mmrag.atomic import atomic_directory

    final = tmp_path / "export"
    with atomic_directory(final) as staging:
        (staging / "a").write_text("first")
    with pytest.raises(RuntimeError):
        with atomic_directory(final) as staging:
            (staging / "a").write_text("half")
            raise RuntimeError("the writer failed")
    assert (final / "a").read_text() == "first"
    with atomic_directory(final) as staging:
        (staging / "b").write_text("second")
    assert [p.name for p in tmp_path.iterdir()] == ["export"] and [p.name for p in final.iterdir()] == ["b"]


def test_the_model_card_names_base_models_data_config_and_held_out_metrics(tiny_export, tmp_path):
    from mmrag.training.model_card import write_model_card

    cfg, _, _ = tiny_export
    card = Path(write_model_card(tmp_path, cfg, {0: {"reward_mean": 0.125, "recall_at_k": 0.5},
                                                 4: {"reward_mean": 0.375, "recall_at_k": 0.75}})).read_text()
    assert card.startswith("---\nlibrary_name: mmrag\n")
    assert "| reward_mean | 0.1250 | 0.3750 |" in card and "| recall_at_k | 0.5000 | 0.7500 |" in card
    assert "| metric | step 0 | step 4 |" in card
    for name in (cfg.translator.model, cfg.reranker.backbone_pretrained, cfg.encoder.pretrained,
                 os.path.relpath(cfg.data.dir, tmp_path)):
        assert name in card
    assert "Pipeline.from_pretrained" in card


def test_loading_an_export_takes_the_reranker_it_was_trained_as(tiny_export, synth_dir, tmp_path):
    import dataclasses

    from mmrag.models.reranker import AdaptiveReranker
    from mmrag.training.evaluate import greedy_batch
    from mmrag.training.export import save_export
    from mmrag.training.pipeline import LocalPipeline

    cfg, _, pipeline = tiny_export
    gated_cfg = dataclasses.replace(cfg, reranker=dataclasses.replace(cfg.reranker, gate=True, max_docs=3))
    gated = AdaptiveReranker.from_config(gated_cfg.reranker, cfg.zoo.cache_dir, "cpu")
    with torch.no_grad():
        gated.gate.linear.bias.fill_(5.0)  # skips every question
    export = save_export(tmp_path / "export", pipeline.translator, gated, 4, gated_cfg)
    ungated_cfg = dataclasses.replace(cfg, reranker=dataclasses.replace(cfg.reranker, gate=False))
    loaded = LocalPipeline.from_config(ungated_cfg, checkpoint=str(export))
    assert loaded.reranker.gate is not None and loaded.cfg.reranker.max_docs == 3
    assert loaded.reranker.gate.linear.bias.item() == 5.0
    assert [row["selected"] for row in greedy_batch(loaded, load_questions(synth_dir, "test")[:2])] == [[], []]
