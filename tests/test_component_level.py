"""Component-level training (the paper's contrast): fitted on gold labels, exported so that eval keeps exactly k.

Two steps on the small world (`tiny_config`): the export must load as any other (`LocalPipeline.from_config`
with the checkpoint) and its greedy selection keep exactly the k chosen on val, and the translator must have
been fitted (its weights moved).
"""

from __future__ import annotations

import torch

from mmrag.data.dataset import load_questions
from mmrag.training.fixed_k import K_CHOICES
from mmrag.training.component_level import train_component_level
from mmrag.training.evaluate import evaluate
from mmrag.training.export import exported_trainable_weights
from mmrag.training.metrics_log import read_metrics
from mmrag.training.pipeline import LocalPipeline


def test_the_export_keeps_exactly_the_k_chosen_on_val_and_the_translator_was_fitted(tiny_config, tmp_path, synth_dir):
    cfg = tiny_config(tmp_path / "run", "train.method=component-level", "train.steps=2", "train.eval_every=1",
                      "train.eval_questions=4", "train.export=last")
    summary = train_component_level(cfg, progress=False)
    k = summary["chosen_k"]
    assert k in K_CHOICES
    evaluations = [r for r in read_metrics(tmp_path / "run") if "eval" in r]
    assert [r["step"] for r in evaluations] == [0, 1, 2]
    assert evaluations[-1]["eval"]["k"] == k
    assert set(evaluations[-1]["eval"]["reward_by_k"]) == {str(choice) for choice in K_CHOICES}

    trained = LocalPipeline.from_config(cfg, checkpoint=str(tmp_path / "run" / "export"))
    assert trained.reranker.max_docs == k
    _, predictions = evaluate(trained, load_questions(synth_dir, "test")[:3])
    assert [len(p["selected"]) for p in predictions] == [min(k, len(p["retrieved"])) for p in predictions]

    untrained = LocalPipeline.from_config(cfg).translator.trainable_state_dict()
    exported = exported_trainable_weights(tmp_path / "run" / "export")
    moved = [name for name, tensor in untrained.items()
             if f"translator/{name}" in exported and not torch.equal(exported[f"translator/{name}"], tensor)]
    assert moved, "supervised fitting on the gold passages changed no translator weight"
