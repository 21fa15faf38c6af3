"""RerankerActor: one adaptive-reranker policy replica in its own Ray process.

Sits between the retrieval router and the generator actors in the rollout loop: the driver
sends each translator query's candidates here and gets back M sampled selections (training)
or the greedy one (evaluation). The learner publishes new trainable weights with a version;
`set_weights` installs them and every sample reports the version that drew it, so the driver
can drop rollouts that lag the learner by more than `train.max_policy_lag`.
The caller places it, e.g. `RerankerActor.options(num_gpus=cfg.reranker.num_gpus).remote(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
import torch
from PIL import Image

from mmrag.config import RerankerConfig
from mmrag.models.reranker import AdaptiveReranker, Candidate
from mmrag.rl.plackett_luce import Selection


@dataclass
class SampledSelections:
    """What one `sample` call drew: per row, m selections and their log-probs under the sampling policy."""

    selections: list[list[Selection]]
    logprobs: list[list[float]]
    policy_version: int


@ray.remote
class RerankerActor:
    def __init__(self, cfg: RerankerConfig, cache_dir: str, seed: int = 0):
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.policy = AdaptiveReranker.from_config(cfg, cache_dir, device).eval()
        self.generator = torch.Generator().manual_seed(seed)
        self.policy_version = 0

    def sample(self, images: list[Image.Image], questions: list[str], queries: list[str],
               candidates: list[list[Candidate]], m: int, temperature: float) -> SampledSelections:
        """m Plackett-Luce selections per (image, question, query, candidates) row."""
        batch = self.policy.featurize(images, questions, queries, candidates)
        selections, logprobs = self.policy.sample(batch, m, temperature, self.generator)
        return SampledSelections(selections, logprobs, self.policy_version)

    def greedy(self, images: list[Image.Image], questions: list[str], queries: list[str],
               candidates: list[list[Candidate]]) -> list[Selection]:
        """The inference selection of each row."""
        return self.policy.greedy(self.policy.featurize(images, questions, queries, candidates))

    def set_weights(self, version: int, state: dict[str, torch.Tensor]) -> None:
        """Install the learner's `trainable_state_dict()` published as `version`."""
        self.policy.load_trainable_state_dict(state)
        self.policy_version = version

    def version(self) -> int:
        """The weights version this replica samples with (0: initial weights)."""
        return self.policy_version

    def reseed(self, seed: int) -> None:
        """Make the next samples a function of `seed` alone (resumable, reproducible rollouts)."""
        self.generator.manual_seed(seed)
