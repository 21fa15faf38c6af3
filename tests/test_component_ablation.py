"""Ablations train one component alone: the other's weights must come out bit-identical.

The single-process mode on the small world (`tiny_config`), a few steps each: a run with
`train.train_translator: false` must export the reranker it trained and exactly the
translator it started from, and the other way round. A 0-step run exports the start.
The same runs show each component's learning signals reaching metrics.jsonl and TensorBoard.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from mmrag.training.export import exported_trainable_weights
from mmrag.training.metrics_log import read_metrics
from mmrag.training.local import train_local


@pytest.fixture(scope="module")
def run_ablation(tiny_config, tmp_path_factory):
    root = tmp_path_factory.mktemp("ablation")

    @functools.cache
    def run(name: str, *extra: str) -> Path:
        train_local(tiny_config(root / name, "train.steps=3", *extra), progress=False)
        return root / name

    return run


def exported(run_dir: Path) -> dict[str, dict[str, torch.Tensor]]:
    weights = exported_trainable_weights(run_dir / "export")
    return {component: {name: tensor for name, tensor in weights.items() if name.startswith(f"{component}/")}
            for component in ("translator", "reranker")}


def identical(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.parametrize("trained, frozen", [("translator", "reranker"), ("reranker", "translator")])
def test_training_one_component_leaves_the_other_bit_identical(run_ablation, trained, frozen):
    start = exported(run_ablation("start", "train.steps=0"))
    ablated = exported(run_ablation(f"only-{trained}", f"train.train_{frozen}=false"))
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
