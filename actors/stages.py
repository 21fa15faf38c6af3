"""ActorStages: the five pipeline stages backed by Ray actors, with `LocalPipeline`'s method signatures.

The distributed driver hands this object to `rollout_batch` and `evaluate` unchanged: translate
(TranslatorActor) -> retrieve (EncoderActor + RetrievalRouter) -> rerank (RerankerActor) ->
answer (a pool of GeneratorActors) -> score (a pool of RewardActors). It also carries what
only the driver needs: installing published weights on the policy replicas, reseeding
their samplers per rollout (so a resumed run draws what an uninterrupted one would), and
reading the generator pool's own throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import ray

from actors.encoder import EncoderActor
from actors.generator import GeneratorActor
from actors.reranker import RerankerActor
from actors.retrieval import RetrievalRouter
from actors.reward import RewardActor
from actors.translator import TranslatorActor
from mmrag.config import Config
from mmrag.training.pipeline import candidates_of


def _chunks(count: int, parts: int) -> list[slice]:
    """Contiguous slices splitting `count` items over at most `parts` workers."""
    bounds = np.linspace(0, count, min(parts, max(count, 1)) + 1).astype(int)
    return [slice(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


def _pooled(pool: list, method: str, *columns: list) -> list:
    """Call `method` on every actor of `pool`, each on one contiguous chunk of the columns; concatenated."""
    calls = [getattr(actor, method).remote(*(column[part] for column in columns))
             for actor, part in zip(pool, _chunks(len(columns[0]), len(pool)))]
    return [item for chunk in ray.get(calls) for item in chunk]


@dataclass
class ActorStages:
    cfg: Config
    translator: object
    encoder: object
    router: RetrievalRouter
    reranker: object
    generators: list
    rewards: list
    sampled_versions: dict[str, int]
    """The weights version each policy replica reported for its last sample."""

    @classmethod
    def launch(cls, cfg: Config) -> ActorStages:
        """Place every stage's actors as the config says (CPUs from `learner.actor_num_cpus`, GPUs per section)."""
        cache, cpus, seed = cfg.zoo.cache_dir, cfg.learner.actor_num_cpus, cfg.train.seed
        stages = cls(
            cfg=cfg,
            translator=TranslatorActor.options(num_cpus=cpus, num_gpus=cfg.translator.num_gpus)
            .remote(cfg.translator, cache, seed),
            encoder=EncoderActor.options(num_cpus=cpus, num_gpus=cfg.encoder.num_gpus).remote(cfg.encoder, cache),
            router=RetrievalRouter.launch(cfg.index.dir, cfg.index),
            reranker=RerankerActor.options(num_cpus=cpus, num_gpus=cfg.reranker.num_gpus)
            .remote(cfg.reranker, cache, seed),
            generators=[GeneratorActor.options(num_cpus=cpus, num_gpus=cfg.generator.num_gpus)
                        .remote(cfg.generator, cache) for _ in range(cfg.generator.num_replicas)],
            rewards=[RewardActor.options(num_cpus=cpus, num_gpus=cfg.reward.num_gpus).remote(cfg.reward, cache)
                     for _ in range(cfg.reward.num_replicas)],
            sampled_versions={"translator": 0, "reranker": 0},
        )
        # Surface a model that fails to load here, naming the actor, rather than mid-rollout.
        ray.get([stages.translator.version.remote(), stages.reranker.version.remote(), stages.encoder.dim.remote()]
                + [g.throughput.remote() for g in stages.generators]
                + [r.__ray_ready__.remote() for r in stages.rewards])
        return stages

    def reseed(self, seed: int) -> None:
        """Make the policy replicas' next samples a function of `seed` alone."""
        ray.get([self.translator.reseed.remote(seed), self.reranker.reseed.remote(seed)])

    def set_weights(self, version: int, translator_state, reranker_state) -> None:
        """Install published trainable weights (object refs or dicts) on the policy replicas."""
        ray.get([self.translator.set_weights.remote(version, translator_state),
                 self.reranker.set_weights.remote(version, reranker_state)])

    def translate(self, images, questions, n: int):
        drawn = ray.get(self.translator.sample.remote(images, questions, n, self.cfg.translator.temperature))
        self.sampled_versions["translator"] = drawn.policy_version
        return drawn.queries

    def translate_greedy(self, images, questions) -> list[str]:
        return ray.get(self.translator.greedy.remote(images, questions))

    def retrieve(self, queries: list[str]):
        vectors = ray.get(self.encoder.encode_texts.remote(queries))
        return self.router.search(vectors, self.cfg.index.top_k)

    def rerank(self, images, questions, queries, hits, m: int):
        drawn = ray.get(self.reranker.sample.remote(images, questions, queries, candidates_of(hits), m,
                                                    self.cfg.reranker.temperature))
        self.sampled_versions["reranker"] = drawn.policy_version
        return drawn.selections, drawn.logprobs

    def rerank_greedy(self, images, questions, queries, hits):
        return ray.get(self.reranker.greedy.remote(images, questions, queries, candidates_of(hits)))

    def answer(self, images, questions, evidence: list[list[str]]) -> list[str]:
        return _pooled(self.generators, "answer", images, questions, evidence)

    def score(self, questions, answers, references) -> list[float]:
        return _pooled(self.rewards, "score", questions, answers, references)

    def generator_throughput(self) -> dict[str, float]:
        """The generator pool's own batched rate: leaves answered over the busiest replica's answering seconds."""
        reports = ray.get([g.throughput.remote() for g in self.generators])
        leaves = sum(r["leaves"] for r in reports)
        seconds = max(r["seconds"] for r in reports)
        return {"leaves": leaves, "seconds": seconds, "leaves_per_s": leaves / seconds if seconds > 0 else 0.0}

    def shutdown(self) -> None:
        for actor in [self.translator, self.encoder, self.reranker, *self.generators, *self.rewards]:
            ray.kill(actor)
        self.router.shutdown()
