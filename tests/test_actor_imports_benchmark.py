"""benchmarks/actor_imports.py: what an actor process imports, measured in a fresh interpreter, and its report."""

from __future__ import annotations

import pytest

from benchmarks.actor_imports import import_cost, report
from benchmarks.results import REPOSITORY


def test_a_fresh_interpreter_reports_the_cpu_and_the_model_libraries_of_one_import():
    shard = import_cost("mmrag.actors.retrieval", REPOSITORY)
    learner = import_cost("mmrag.actors.learner", REPOSITORY)
    assert shard["libraries"] == [] and shard["cpu_s"] > 0
    assert {"torch", "open_clip"} <= set(learner["libraries"])
    assert learner["cpu_s"] > shard["cpu_s"]


def test_an_import_from_another_checkout_is_refused(tmp_path):
    (tmp_path / "actors").mkdir()
    with pytest.raises(RuntimeError, match="imported from outside"):
        import_cost("pytest", tmp_path)


def test_the_report_sets_the_baseline_beside_each_actor_and_gives_the_ratio_of_the_totals():
    now = {"RewardActor": {"module": "mmrag.actors.reward", "cpu_s": 1.0, "libraries": []},
           "EncoderActor": {"module": "mmrag.actors.encoder", "cpu_s": 5.0, "libraries": ["torch", "open_clip"]}}
    base = {"RewardActor": {"module": "mmrag.actors.reward", "cpu_s": 7.0, "libraries": ["torch"]},
            "EncoderActor": {"module": "mmrag.actors.encoder", "cpu_s": 5.0, "libraries": ["torch", "open_clip"]}}
    text = report({"date": "2026-12-06", "machine": "m", "repeats": 3, "now": now,
                   "baseline": {"ref": "abc1234", "actors": base}})
    assert "| RewardActor | `mmrag.actors.reward` | 7.00 | 1.00 | none |" in text
    assert "| EncoderActor | `mmrag.actors.encoder` | 5.00 | 5.00 | torch, open_clip |" in text
    assert "6.0 CPU s against 12.0 at abc1234 (0.50x)" in text
