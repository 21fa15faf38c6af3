"""TranslatorActor: one query-translator policy replica in its own Ray process.

First stage of the rollout loop: the driver sends (image, question) batches here and
gets N sampled queries per question (training) or the greedy query (evaluation); the
queries go on to the encoder and retrieval shards. The learner publishes new trainable
weights with a version; `set_weights` installs them and every sample reports the version
that drew it, so the driver can drop rollouts that lag by more than `train.max_policy_lag`.
The caller places it, e.g. `TranslatorActor.options(num_gpus=cfg.translator.num_gpus).remote(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray
import torch
from PIL import Image

from mmrag.config import TranslatorConfig
from mmrag.models.translator import QuerySample, QueryTranslator


@dataclass
class SampledQueries:
    """What one `sample` call drew: n queries per question and the policy version that drew them."""

    queries: list[list[QuerySample]]
    policy_version: int


@ray.remote
class TranslatorActor:
    def __init__(self, cfg: TranslatorConfig, cache_dir: str, seed: int = 0):
        # Generation samples from torch's global generator, which this process owns alone.
        torch.manual_seed(seed)
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.translator = QueryTranslator.from_config(cfg, cache_dir, device)
        self.policy_version = 0

    def sample(self, images: list[Image.Image], questions: list[str], n: int | None = None,
               temperature: float | None = None) -> SampledQueries:
        """n queries per question (defaults: `translator.num_samples`, `translator.temperature`)."""
        return SampledQueries(self.translator.sample(images, questions, n, temperature), self.policy_version)

    def greedy(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        """The inference query of each question."""
        return self.translator.greedy(images, questions)

    def set_weights(self, version: int, state: dict[str, torch.Tensor]) -> None:
        """Install the learner's `trainable_state_dict()` published as `version`."""
        self.translator.load_trainable_state_dict(state)
        self.policy_version = version

    def version(self) -> int:
        """The weights version this replica samples with (0: initial weights)."""
        return self.policy_version

    def reseed(self, seed: int) -> None:
        """Make the next samples a function of `seed` alone (resumable, reproducible rollouts)."""
        torch.manual_seed(seed)
