"""TranslatorActor: one query-translator policy replica in its own Ray process.

First stage of the rollout stream: it gets a micro-batch's question table (an object ref)
and returns n sampled queries per question with their log-probs (training), or the greedy
query (evaluation). Every call names the weights version to sample with (`PolicyWeights`);
the replica installs it first if it holds another, and reports the version that drew.
Placed by `mmrag.actors.stage_pools.ActorPools` as `ray.remote(TranslatorActor).options(num_gpus=...)`: a plain
class, so that a benchmark can place a subclass instead (`benchmarks.simulated_device`).
"""

from __future__ import annotations

import functools

import ray

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.policy import InstalledVersion, PolicyWeights
from mmrag.config import TranslatorConfig
from mmrag.models.translator import QueryTranslator
from mmrag.training.seeding import sample_queries
from mmrag.training.stages import QuestionTable, SampledQueries
from mmrag.training.sync_probe import translator_probe_scores


class TranslatorActor:
    def __init__(self, cfg: TranslatorConfig, cache_dir: str):
        use_actor_cpus("TranslatorActor")
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.translator = QueryTranslator.from_config(cfg, cache_dir, device)
        self.installed = InstalledVersion()

    def sample(self, table: QuestionTable, n: int, seed: int, weights: PolicyWeights) -> SampledQueries:
        """n queries per question, drawn with `weights` from a generator seeded with `seed`."""
        version = self._install(weights)
        queries = sample_queries(self.translator, table, n, seed)
        return SampledQueries(queries, version, self.installed.take_checked())

    def greedy(self, table: QuestionTable, weights: PolicyWeights) -> list[str]:
        """The inference query of each question, with `weights`."""
        self._install(weights)
        return self.translator.greedy(table.images, table.questions)

    def _install(self, weights: PolicyWeights) -> int:
        return self.installed.ensure(weights, self.translator.load_trainable_state_dict,
                                     self.translator.trainable_state_dict,
                                     functools.partial(translator_probe_scores, self.translator))

    def join_weight_sync(self, address: str, port: int, rank: int, world: int, timeout_s: float) -> None:
        """Join the weight-sync group of the learner's rank 0 (`learner.weight_sync: broadcast`)."""
        self.installed.join_sync(address, port, rank, world, timeout_s)

    def receive_weights(self, publish_id: str, bucket_mb: int) -> None:
        """Receive the version rank 0 is broadcasting; the next call naming `publish_id` installs it."""
        self.installed.receive(publish_id, self.translator.trainable_state_dict(), bucket_mb << 20)
