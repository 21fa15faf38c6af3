"""Ablations train one component alone: the other's weights must come out bit-identical.

The reference trainer on random tiny zoo models, a few steps each: a run with
`train.train_translator: false` must export the reranker it trained and exactly the
translator it started from, and the other way round. A 0-step run exports the start.
The same runs show each component's learning signals reaching metrics.jsonl and TensorBoard.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mmrag.config import load_config
from mmrag.training.ledger import read_metrics
from mmrag.training.reference import train_reference

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_ablation(synth_dir, zoo_dir, tmp_path_factory):
    from mmrag.retrieval.build import build_index

    root = tmp_path_factory.mktemp("ablation")
    overrides = [
        f"data.dir={synth_dir}", f"index.dir={root / 'index'}", f"zoo.cache_dir={zoo_dir}",
        "encoder.pretrained=zoo:tiny-clip-init", "reranker.backbone_pretrained=zoo:tiny-clip-init",
        "translator.model=zoo:tiny-lvlm", "translator.max_new_tokens=6", "translator.num_samples=3",
        "reranker.num_samples=3", "reward.metric=relaxed", "index.top_k=4", "train.questions_per_step=4",
        "train.eval_questions=2", "train.eval_every=100", "train.steps=3",
    ]
    cfg = load_config(ROOT / "configs/local.yaml", overrides)
    build_index(Path(synth_dir) / "kb.parquet", cfg.index.dir, cfg.index, cfg.encoder, zoo_dir, progress=False)

    @functools.cache
    def run(name: str, *extra: str) -> Path:
        run_cfg = load_config(ROOT / "configs/local.yaml", [*overrides, f"train.run_dir={root / name}", *extra])
        train_reference(run_cfg, progress=False)
        return root / name

    return run


def exported(export_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    translator = {}
    for path in sorted((export_dir / "translator").glob("*.safetensors")):
        translator.update(load_file(path))
    return {"translator": translator, "reranker": torch.load(export_dir / "reranker.pt")}


def identical(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("trained, frozen", [("translator", "reranker"), ("reranker", "translator")])
def test_training_one_component_leaves_the_other_bit_identical(run_ablation, trained, frozen):
    start = exported(run_ablation("start", "train.steps=0") / "export")
    ablated = exported(run_ablation(f"only-{trained}", f"train.train_{frozen}=false") / "export")
    assert not identical(ablated[trained], start[trained]), f"the {trained} should have learned something"
    assert identical(ablated[frozen], start[frozen])


@pytest.mark.parametrize("component, frozen, signals", [
    ("translator", "reranker", ["reward_margin", "pair_accuracy"]),
    ("reranker", "translator", ["importance_ratio_mean", "importance_ratio_truncated"]),
])
def test_learning_signals_reach_metrics_jsonl_and_tensorboard(run_ablation, component, frozen, signals):
    run_dir = run_ablation(f"only-{component}", f"train.train_{frozen}=false")
    updates = [r[component] for r in read_metrics(run_dir) if component in r]
    with_signal = [update for update in updates if update["examples"] > 0]
    assert with_signal, f"no step gave the {component} a training example"
    assert all(set(signals) <= update.keys() for update in with_signal)
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    assert {f"{component}/{name}" for name in signals} <= set(events.Tags()["scalars"])
