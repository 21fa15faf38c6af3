"""Frozen reward models: score each final answer of a rollout in [0, 1].

The last stage of the pipeline: (question, generated answer, reference answers) ->
reward r_ij, which the rollout tree backpropagates to the translator and reranker.
`build_reward(cfg.reward, cache_dir)` picks the backend named by `reward.backend`:

* `rule`: the answer metric named by `reward.metric` (see `mmrag.metrics.answers`);
* `hf_classifier`: a sequence classifier reading "question: .. answer: .. reference: ..";
* `lvlm_judge`: a frozen LVLM asked whether the candidate answer is correct,
  scored as P(yes) / (P(yes) + P(no)) over the first tokens of its reply.

The two model backends live in `mmrag.models.reward_models`, imported only when one is built: the rule reward
(every preset's) needs neither torch nor transformers, so a reward actor starts in about a second.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from mmrag.config import RewardConfig
from mmrag.metrics.answers import METRICS
from mmrag.model_refs import resolve
from mmrag.models.batches import check_batch_lengths


class RewardScorer(Protocol):
    """What `build_reward` returns: one reward in [0, 1] per (question, answer, references) example."""

    def score(
        self, questions: Sequence[str], answers: Sequence[str], references: Sequence[Sequence[str]]
    ) -> list[float]: ...


class RuleReward:
    """The answer metric named by `reward.metric`; the question is not read."""

    def __init__(self, metric: str):
        if metric not in METRICS:
            raise ValueError(f"reward.metric: unknown metric {metric!r} (valid: {', '.join(METRICS)})")
        self.metric = METRICS[metric]

    def score(self, questions, answers, references) -> list[float]:
        check_batch_lengths(questions=questions, answers=answers, references=references)
        return [self.metric(answer, refs) for answer, refs in zip(answers, references)]


def build_reward(cfg: RewardConfig, cache_dir: str, device: str = "cpu") -> RewardScorer:
    """The scorer for `cfg.backend`; model references may be HF ids, paths or `zoo:NAME`."""
    if cfg.backend == "rule":
        return RuleReward(cfg.metric)
    if cfg.backend not in ("hf_classifier", "lvlm_judge"):
        raise ValueError(f"reward.backend: unknown backend {cfg.backend!r} (valid: rule, hf_classifier, lvlm_judge)")
    if not cfg.model:
        raise ValueError(f"reward.model: the {cfg.backend} backend needs a model (HF id, local path or zoo:NAME)")
    # torch and transformers: seconds of import, needed by the model backends only.
    from mmrag.models.reward_models import ClassifierReward, LvlmJudgeReward

    if cfg.backend == "hf_classifier":
        return ClassifierReward(resolve(cfg.model, cache_dir), cfg.batch_size, cfg.dtype, device)
    return LvlmJudgeReward(cfg.model, cache_dir, cfg.batch_size, cfg.dtype, device)
