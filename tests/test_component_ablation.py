"""Ablations train one component alone: the other's weights must come out bit-identical.

The reference trainer on random tiny zoo models, a few steps each: a run with
`train.train_translator: false` must export the reranker it trained and exactly the
translator it started from, and the other way round. A 0-step run exports the start.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mmrag.config import load_config
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
    def run(name: str, *extra: str) -> dict[str, dict[str, torch.Tensor]]:
        run_cfg = load_config(ROOT / "configs/local.yaml", [*overrides, f"train.run_dir={root / name}", *extra])
        train_reference(run_cfg, progress=False)
        return exported(root / name / "export")

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
    start = run_ablation("start", "train.steps=0")
    ablated = run_ablation(f"only-{trained}", f"train.train_{frozen}=false")
    assert not identical(ablated[trained], start[trained]), f"the {trained} should have learned something"
    assert identical(ablated[frozen], start[frozen])
