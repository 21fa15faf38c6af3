"""benchmarks.simulated_device: benchmarks place subclasses of the production actors that also spend
simulated device time; the production classes stay as they are."""

from __future__ import annotations

import time

import pytest

from mmrag.actors.actor_classes import ActorClasses
from mmrag.actors.learner import LearnerRank
from benchmarks.simulated_device import DeviceTime, simulated_actors
from mmrag.config import RewardConfig
from mmrag.training.stages import QuestionTable


def test_only_the_roles_given_a_cost_are_replaced_and_the_learner_keeps_its_three_returns():
    classes = simulated_actors({"learn": DeviceTime(0.5, 0.0)})
    assert classes.translate is ActorClasses().translate and issubclass(classes.learn, LearnerRank)
    assert classes.learn is not LearnerRank
    assert classes.learn.update.__ray_num_returns__ == 3


def test_an_unknown_stage_is_named():
    with pytest.raises(ValueError, match="'generate'"):
        simulated_actors({"generate": DeviceTime(0.1, 0.0)})


def test_a_simulated_reward_actor_scores_as_the_real_one_and_sleeps_its_cost(ray_session):
    cost = DeviceTime(per_call_s=0.3, per_item_s=0.1)  # 0.3 + 3 x 0.1 = 0.6 s for three leaves
    actor = ray_session.remote(simulated_actors({"score": cost}).score).remote(
        RewardConfig(backend="rule", metric="exact_match"), "unused")
    table = QuestionTable(image_sources=[None] * 3, questions=["q1", "q2", "q3"], references=[["a"], ["b"], ["c"]])
    ray_session.get(actor.__ray_ready__.remote())
    start = time.perf_counter()
    scores = ray_session.get(actor.score.remote(table, [0, 1, 2], ["a", "x", "c"]))
    assert scores == [1.0, 0.0, 1.0]
    assert time.perf_counter() - start >= 0.6
