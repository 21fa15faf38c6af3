"""RewardActor: one frozen reward scorer in its own Ray process.

Sits after the generator actors in the rollout loop: the driver sends each batch of
(question, answer, references) leaves here and backpropagates the returned scores.
The caller places it, e.g. `RewardActor.options(num_gpus=cfg.reward.num_gpus).remote(...)`.
"""

from __future__ import annotations

import ray

from mmrag.config import RewardConfig


@ray.remote
class RewardActor:
    def __init__(self, cfg: RewardConfig, cache_dir: str):
        from mmrag.models.reward import build_reward

        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.scorer = build_reward(cfg, cache_dir, device=device)

    def score(self, questions: list[str], answers: list[str], references: list[list[str]]) -> list[float]:
        """One reward in [0, 1] per answer."""
        return self.scorer.score(questions, answers, references)
