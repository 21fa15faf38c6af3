"""Distributed training on a local Ray: the one loop on actor pools and a DeepSpeed learner group.

The small synthetic world, 2 questions per step, 3 x 4 samples. The synchronous run (a session
fixture, 4 steps, a checkpoint every 2) is the yardstick: the single-process mode ends where it
ends, and an asynchronous run keeps its lag within the bound while its ledger balances. A run
interrupted and resumed ends where it ends too: tests/test_run_storage.py, two ranks
checkpointing to S3 and resumed by a second driver on fresh disks.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_same_exported_weights

from mmrag.cluster.resources import PlanDoesNotFit
from mmrag.training.metrics_log import read_metrics, step_records
from mmrag.training.local import train_local
from mmrag.pipelines.train import train_distributed

pytestmark = pytest.mark.slow  # distributed training runs on Ray

Q = 2


def test_sync_run_records_versions_ledger_and_checkpoints(distributed_sync_run):
    records = step_records(distributed_sync_run)
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for r in records:
        assert (r["policy_version"], r["experience_version"], r["policy_lag"]) == (r["step"], r["step"] - 1, 0)
        assert r["sampled_versions"] == {"translator": r["step"] - 1, "reranker": r["step"] - 1}
        assert r["ledger"]["started"] == r["ledger"]["trained"] == r["step"]
        assert r["leaves"] == Q * 3 * 4 and r["leaves_per_s"] > 0
        assert {"translate", "retrieve", "rerank", "answer", "score", "learn"} <= r["stage_seconds"].keys()
    # The weight-sync probe checks every version from 1 on (learner.sync_check_every 1); step 1 sampled version 0.
    assert [sorted(r.get("sync", {})) for r in records] == [[]] + [["max_logprob_diff", "max_score_diff"]] * 3
    assert max(value for r in records for value in r.get("sync", {}).values()) <= 1e-2
    assert sum(r["reranker"]["examples"] for r in records) > 0, "some step must carry signal, or comparisons are vacuous"
    assert [r["step"] for r in read_metrics(distributed_sync_run) if "eval" in r] == [0, 4]
    checkpoints = distributed_sync_run / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step_000004"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step_000002", "step_000004"]
    assert '"version": 4' in (distributed_sync_run / "export" / "export.json").read_text()
    assert (distributed_sync_run / "tensorboard").is_dir()


def test_the_single_process_mode_ends_where_the_distributed_sync_run_ends(distributed_sync_run, tiny_config, tmp_path):
    """One loop: the in-process parts draw the same trees and take the same steps as the Ray parts."""
    train_local(tiny_config(tmp_path, "train.checkpoint_every=2"), progress=False)
    local, distributed = step_records(tmp_path), step_records(distributed_sync_run)
    for a, b in zip(local, distributed, strict=True):
        assert a["reward_mean"] == b["reward_mean"]
        for component in ("translator", "reranker"):
            assert a[component]["examples"] == b[component]["examples"]
            assert a[component]["loss"] == pytest.approx(b[component]["loss"], abs=1e-5)
    assert_same_exported_weights(tmp_path, distributed_sync_run)


def test_the_default_trust_region_leaves_a_run_without_lag_bit_identical(tiny_config, tmp_path):
    """`train.behaviour_kl_coef` is on by default, and exactly 0, gradient included, on experience drawn by the
    weights being trained: a run without lag ends where it ends with the penalty off (so the learning benchmark's
    `local-reference` figures stand)."""
    default, off = tiny_config(tmp_path / "default"), tiny_config(tmp_path / "off", "train.behaviour_kl_coef=0")
    assert default.train.behaviour_kl_coef > 0
    train_local(default, progress=False)
    train_local(off, progress=False)
    with_penalty, without = step_records(tmp_path / "default"), step_records(tmp_path / "off")
    assert any(r["reranker"]["examples"] for r in with_penalty), "the test needs reranker updates"
    for a, b in zip(with_penalty, without, strict=True):
        assert a["reranker"]["loss"] == b["reranker"]["loss"] and a["reranker"]["behaviour_kl"] == 0.0
    assert_same_exported_weights(tmp_path / "default", tmp_path / "off", atol=0.0, rtol=0.0)


def test_an_asynchronous_run_keeps_its_lag_within_the_bound(ray_session, tiny_config, tmp_path):
    summary = train_distributed(tiny_config(tmp_path, "train.max_policy_lag=1", "train.steps=5"), progress=False)
    records = step_records(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    assert all(r["policy_lag"] <= 1 for r in records)
    assert any(r["policy_lag"] == 1 for r in records), "rollouts ran while the learner trained"
    assert summary["trained_rollouts"] == [1, 2, 3, 4, 5]
    assert Path(tmp_path / "export" / "export.json").is_file()


LVLM_AND_REWARD_MODEL = ["generator.backend=hf", "generator.model=zoo:tiny-lvlm-reader",
                         "reward.backend=hf_classifier", "reward.model=zoo:reward-classifier"]
"""The frozen models the paper trains around: a Qwen2-VL generator and a learned reward model (the GPU preset's
kinds, at zoo size), in place of the grounded rule reader and exact match."""


def test_training_runs_with_the_lvlm_generator_and_the_reward_model(ray_session, tiny_config, tmp_path):
    """Batching, padding and evidence of the `hf` generator and the `hf_classifier` reward under training: every
    step's leaves are answered and scored, both components see signal, and evaluation reports the reward model's
    score beside exact match."""
    cfg = tiny_config(tmp_path, *LVLM_AND_REWARD_MODEL, "train.max_policy_lag=1", "train.steps=3",
                      "train.eval_every=3")
    summary = train_distributed(cfg, progress=False)
    records = step_records(tmp_path)
    assert [r["step"] for r in records] == [1, 2, 3] and summary["trained_rollouts"] == [1, 2, 3]
    assert all(r["leaves"] == Q * 3 * 4 and 0.0 <= r["reward_mean"] <= 1.0 for r in records)
    assert {"answer", "score"} <= records[0]["stage_seconds"].keys()
    evals = [r["eval"] for r in read_metrics(tmp_path) if "eval" in r]
    assert len(evals) == 2 and all({"reward_mean", "exact_match_mean"} <= e.keys() for e in evals)
    assert sum(r["translator"]["examples"] + r["reranker"]["examples"] for r in records) > 0


def test_a_plan_the_cluster_cannot_hold_fails_before_anything_is_placed(ray_session, tiny_config, tmp_path):
    with pytest.raises(PlanDoesNotFit, match=r"^generator_pool: needs 100 x 0.5 CPU = 50 CPU, but only"):
        train_distributed(tiny_config(tmp_path, "generator.num_replicas=100"), progress=False)
    assert not (tmp_path / "metrics.jsonl").exists()
