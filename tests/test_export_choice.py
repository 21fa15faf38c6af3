"""`train.export`: which step's weights RUN_DIR/export holds, the last or the best-validated one."""

from __future__ import annotations

from pathlib import Path

import pytest

from mmrag.config import load_config
from mmrag.training import loop
from mmrag.training.export_choice import best_validation_step
from mmrag.training.model_card import CARD
from mmrag.training.pipeline import LocalPipeline
from mmrag.training.streaming import InlinePools
from test_trainer_loop import CountingLearner

VAL_REWARD_BY_STEP = {0: 0.50, 1: 0.70, 2: 0.60, 3: 0.70, 4: 0.65}
"""A run that peaks at step 1, ties the peak at step 3 and declines after it."""


def test_the_best_validation_step_is_the_highest_reward_and_a_tie_keeps_the_earlier_step():
    evaluations = {step: {"reward_mean": reward} for step, reward in VAL_REWARD_BY_STEP.items()}
    assert best_validation_step(evaluations) == 1
    assert best_validation_step({0: {"reward_mean": 0.5}, 25: {"reward_mean": 0.4}}) == 0, "untrained stays best"


def test_no_evaluation_has_no_best_step():
    with pytest.raises(ValueError, match="best_val"):
        best_validation_step({})


class ExportRecorder(CountingLearner):
    """Notes the weights version of every export."""

    def __init__(self):
        super().__init__()
        self.exported: list[int] = []

    def export(self, directory) -> None:
        super().export(directory)
        self.exported.append(self.version)


@pytest.fixture(scope="module")
def pipeline(tiny_config, tmp_path_factory) -> LocalPipeline:
    return LocalPipeline.from_config(tiny_config(tmp_path_factory.mktemp("unused")))


@pytest.fixture
def scripted_val_rewards(monkeypatch):
    """Every evaluation scores VAL_REWARD_BY_STEP[step] (the loop's own evaluation replaced, nothing else)."""
    def evaluate(pools, questions, metrics, step, rollout_samples):
        result = {"reward_mean": VAL_REWARD_BY_STEP[step]}
        metrics.log(step, {"eval": result})
        return result

    monkeypatch.setattr(loop, "_evaluate", evaluate)


@pytest.mark.slow
@pytest.mark.parametrize("policy, exports, exported_step", [("best_val", [0, 1], 1), ("last", [4], 4)])
def test_the_export_holds_the_step_the_policy_names_and_the_summary_says_which(
        policy, exports, exported_step, pipeline, tiny_config, tmp_path, scripted_val_rewards):
    learner = ExportRecorder()
    cfg = tiny_config(tmp_path, "train.eval_every=1", f"train.export={policy}")
    summary = loop.train(cfg, InlinePools(pipeline), learner, progress=False)
    assert learner.exported == exports
    assert summary["exported_step"] == exported_step
    assert summary["exported"] == {"reward_mean": VAL_REWARD_BY_STEP[exported_step]}
    card = (tmp_path / "export" / CARD).read_text()
    assert f"| step 0 | step {exported_step} |" in card, "the card shows the exported step's metrics"


@pytest.mark.slow
def test_a_resumed_best_val_run_knows_the_step_its_export_holds(pipeline, tiny_config, tmp_path, scripted_val_rewards):
    settings = ("train.eval_every=1", "train.export=best_val")
    first = ExportRecorder()
    loop.train(tiny_config(tmp_path, *settings, "train.steps=2"), InlinePools(pipeline), first, progress=False)
    assert first.exported == [0, 1]
    resumed = ExportRecorder()
    summary = loop.train(tiny_config(tmp_path, *settings), InlinePools(pipeline), resumed, resume=True, progress=False)
    assert resumed.exported == [], "steps 3 and 4 do not beat step 1's 0.70"
    assert summary["exported_step"] == 1


def test_world_v2_exports_the_best_validated_step_and_the_v1_preset_its_last():
    assert load_config(None).train.export == "best_val"
    v1 = Path(__file__).resolve().parents[1] / "mmrag/configs/local-v1.yaml"
    assert load_config(v1).train.export == "last", "the v1 figures and the tests' tiny config are last-step exports"
