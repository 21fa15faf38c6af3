"""RewardActor: one frozen reward scorer in its own Ray process.

Last stage of the rollout stream: it scores each leaf's answer against its question's
reference answers (from the micro-batch's question table); the driver backpropagates the
scores up the rollout trees.
Placed by `mmrag.actors.stage_pools.ActorPools` as `ray.remote(RewardActor).options(num_gpus=...)`: a plain
class, so that a benchmark can place a subclass instead (`benchmarks.simulated_device`).
"""

from __future__ import annotations

import ray

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.config import RewardConfig
from mmrag.models.reward import build_reward
from mmrag.training.stages import QuestionTable


class RewardActor:
    def __init__(self, cfg: RewardConfig, cache_dir: str):
        use_actor_cpus("RewardActor")
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.scorer = build_reward(cfg, cache_dir, device=device)

    def score(self, table: QuestionTable, rows: list[int], answers: list[str]) -> list[float]:
        """One reward in [0, 1] per leaf."""
        rewards = self.scorer.score(table.questions_of(rows), answers, table.references_of(rows))
        return rewards
