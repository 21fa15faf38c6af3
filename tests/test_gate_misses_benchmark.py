"""The gate-misses benchmark's bookkeeping: what its two arms run, and what it reads of a run's val evaluations."""

import argparse
import json

import pytest

from benchmarks.learning import runs_for
from research.retrieval_gate.gate_misses import arm_plan, gate_record


def test_the_two_arms_run_benchmark_learnings_jobs_differing_in_the_gate_flag_alone(tmp_path):
    base, _ = runs_for("mean")
    args = argparse.Namespace(config="mmrag/configs/local.yaml", set=["data.dir=D"], run="async-lag4", seeds=[0, 1],
                              steps=60, eval_every=20, val_count=200)
    counted = arm_plan(args, "misses counted", tmp_path / "counted", base["async-lag4"])
    ignored = arm_plan(args, "misses ignored", tmp_path / "ignored", base["async-lag4"])
    assert list(counted[1]) == list(ignored[1]) == [("async-lag4", 0), ("async-lag4", 1)]
    for key, job in counted[1].items():
        other = ignored[1][key]
        assert job.directory == tmp_path / "counted" / "async-lag4" / f"seed-{key[1]}"
        train, flagged = (" ".join(j.commands[0]).replace(str(j.directory), "RUN") for j in (job, other))
        assert "--set train.gate_learns_from_misses=true" in train, "named, whatever the default"
        assert flagged == train.replace("gate_learns_from_misses=true", "gate_learns_from_misses=false")
        assert "train.max_policy_lag=4" in train and "train.steps=60" in train


def test_a_record_reads_the_lowest_val_after_step_0_and_the_most_fact_questions_kept_none(tmp_path):
    evals = [(0, 0.52, 0.0, 0.0), (20, 0.70, 0.30, 0.10), (40, 0.40, 0.05, 0.60), (60, 0.80, 0.0, 0.0)]
    (tmp_path / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "eval": {"reward_mean": reward, "one-fact/docs_zero_fraction": one,
                                           "two-fact/docs_zero_fraction": two}}) + "\n"
        for step, reward, one, two in evals))
    by_kind = {kind: {"reward": reward, "docs_zero_fraction": 0.0}
               for kind, reward in (("visual", 1.0), ("one-fact", 0.8), ("two-fact", 0.6))}
    learning_record = {"seed": 3, "questions": 650, "entities": 65, "trained": 0.85, "by_kind": by_kind,
                       "val_curve": {str(step): reward for step, reward, *_ in evals},
                       "val_final": {"reward_mean": 0.80}, "train_minutes": 5.0}
    record = gate_record("misses ignored", learning_record, tmp_path)
    assert record["run"] == "misses ignored" and record["seed"] == 3
    assert record["val_final"] == 0.80 and record["val_min"] == 0.40  # step 0 (the untrained model) left out
    assert record["val_kept_none_max"] == pytest.approx({"one-fact": 0.30, "two-fact": 0.60})
    assert record["two-fact reward"] == 0.6
