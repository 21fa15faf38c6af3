"""RerankerActor: one adaptive-reranker policy replica in its own Ray process.

Sits between retrieval and the generator pool in the rollout stream: for each query row of
a micro-batch (its question in the table, the query, its retrieved hits) it returns m
sampled selections and their log-probs (training), or the greedy selection (evaluation).
Every call names the weights version to sample with (`PolicyWeights`); the replica installs
it first if it holds another, and reports the version that drew.
Placed by `mmrag.actors.stage_pools.ActorPools` as `ray.remote(RerankerActor).options(num_gpus=...)`: a plain
class, so that a benchmark can place a subclass instead (`benchmarks.simulated_device`).
"""

from __future__ import annotations

import functools

import ray

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.policy import InstalledVersion, PolicyWeights
from mmrag.config import RerankerConfig
from mmrag.models.reranker import AdaptiveReranker
from mmrag.retrieval.hit import Hit
from mmrag.rl.plackett_luce import Selection
from mmrag.training.pipeline import greedy_selections, sample_selections
from mmrag.training.stages import QuestionTable, SampledSelections
from mmrag.training.sync_probe import reranker_probe_scores


class RerankerActor:
    def __init__(self, cfg: RerankerConfig, cache_dir: str):
        use_actor_cpus("RerankerActor")
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.policy = AdaptiveReranker.from_config(cfg, cache_dir, device).eval()
        self.temperature = cfg.temperature
        self.installed = InstalledVersion()

    def sample(self, table: QuestionTable, rows: list[int], queries: list[str], hits: list[list[Hit]], m: int,
               seed: int, weights: PolicyWeights) -> SampledSelections:
        """m selections per query row (`AdaptiveReranker.sample`), drawn with `weights`, from a generator seeded
        with `seed`."""
        version = self._install(weights)
        selections, logprobs = sample_selections(self.policy, table, rows, queries, hits, m, seed, self.temperature)
        return SampledSelections(selections, logprobs, version, self.policy.gate is not None,
                                 self.installed.take_checked())

    def greedy(self, table: QuestionTable, rows: list[int], queries: list[str], hits: list[list[Hit]],
               weights: PolicyWeights) -> list[Selection]:
        """The inference selection of each query row, with `weights`."""
        self._install(weights)
        return greedy_selections(self.policy, table, rows, queries, hits)

    def _install(self, weights: PolicyWeights) -> int:
        return self.installed.ensure(weights, self.policy.load_trainable_state_dict, self.policy.trainable_state_dict,
                                     functools.partial(reranker_probe_scores, self.policy))

    def join_weight_sync(self, address: str, port: int, rank: int, world: int, timeout_s: float) -> None:
        """Join the weight-sync group of the learner's rank 0 (`learner.weight_sync: broadcast`)."""
        self.installed.join_sync(address, port, rank, world, timeout_s)

    def receive_weights(self, publish_id: str, bucket_mb: int) -> None:
        """Receive the version rank 0 is broadcasting; the next call naming `publish_id` installs it."""
        self.installed.receive(publish_id, self.policy.trainable_state_dict(), bucket_mb << 20)
