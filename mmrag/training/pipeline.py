"""LocalPipeline: every stage of the MM-RAG pipeline loaded in this process.

translate (image, question -> queries) -> retrieve (query -> top-K documents) -> rerank
(-> ordered selection, possibly empty) -> answer (frozen generator) -> score (frozen
reward model). It implements `mmrag.training.stages.Stages`, the interface the trainer
loop, the rollout stream and evaluation call; `mmrag.actors.stage_pools.ActorPools` implements the
same interface over Ray actors. The single-process mode trains this pipeline's translator
and reranker in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from mmrag.config import Config
from mmrag.cpu_threads import fit_threads_to_models
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.models.generator import build_generator
from mmrag.models.reranker import AdaptiveReranker, candidates_of
from mmrag.models.reward import build_reward
from mmrag.models.translator import QueryTranslator
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import LocalRetriever
from mmrag.rl.plackett_luce import Selection
from mmrag.training.export import load_reranker_weights, with_exported_reranker, with_exported_translator
from mmrag.training.learner import Weights, load_trainable_components
from mmrag.training.seeding import sample_queries
from mmrag.training.stages import QuestionTable, SampledQueries, SampledSelections


@dataclass
class LocalPipeline:
    """Every component loaded in this process (single-process training, evaluation, serving checks)."""

    cfg: Config
    translator: QueryTranslator
    encoder: ClipEncoder
    retriever: LocalRetriever
    reranker: AdaptiveReranker
    generator: object
    reward: object
    policy_version: int = field(default=0)
    """The weights version the translator and reranker sample with."""

    @classmethod
    def from_config(cls, cfg: Config, device: str = "cpu", checkpoint: str | None = None) -> LocalPipeline:
        """Load every component; `checkpoint` (RUN_DIR/export) replaces the untrained translator and reranker.

        The trainable components start where every learner starts (`load_trainable_components`: seeded).
        """
        cache = cfg.zoo.cache_dir
        if not (Path(cfg.index.dir) / "manifest.json").exists():
            raise FileNotFoundError(f"index.dir: no index at {cfg.index.dir} (build it with `mmrag index`)")
        if checkpoint is not None:
            cfg = with_exported_reranker(with_exported_translator(cfg, checkpoint), checkpoint)
        encoder = ClipEncoder(cfg.encoder.model_name, cfg.encoder.pretrained, cache, device, cfg.encoder.batch_size)
        retriever = LocalRetriever(cfg.index.dir, cfg.index)
        retriever.manifest.check_encoder(encoder.identity, encoder.dim)
        translator, reranker = load_trainable_components(cfg, device)
        pipeline = cls(
            cfg=cfg,
            translator=translator,
            encoder=encoder,
            retriever=retriever,
            reranker=reranker,
            generator=build_generator(cfg.generator, cache, device),
            reward=build_reward(cfg.reward, cache, device),
        )
        if checkpoint is not None:
            load_reranker_weights(pipeline.reranker, checkpoint)
        fit_threads_to_models(vars(pipeline).values())
        return pipeline

    def install(self, weights: Weights) -> None:
        """Load published trainable weights (None: the learner trained these very modules in place)."""
        if weights.translator is not None:
            self.translator.load_trainable_state_dict(weights.translator)
        if weights.reranker is not None:
            self.reranker.load_trainable_state_dict(weights.reranker)
        self.policy_version = weights.version

    def translate(self, table: QuestionTable, n: int, seed: int) -> SampledQueries:
        return SampledQueries(sample_queries(self.translator, table, n, seed), self.policy_version)

    def translate_greedy(self, table: QuestionTable) -> list[str]:
        return self.translator.greedy(table.images, table.questions)

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        return self.retriever.search(self.encoder.encode_texts(queries), self.cfg.index.top_k)

    def rerank(self, table: QuestionTable, rows: list[int], queries: list[str], hits: list[list[Hit]], m: int,
               seed: int) -> SampledSelections:
        selections, logprobs = sample_selections(self.reranker, table, rows, queries, hits, m, seed,
                                                 self.cfg.reranker.temperature)
        return SampledSelections(selections, logprobs, self.policy_version, self.reranker.gate is not None)

    def rerank_greedy(self, table: QuestionTable, rows: list[int], queries: list[str],
                      hits: list[list[Hit]]) -> list[Selection]:
        return greedy_selections(self.reranker, table, rows, queries, hits)

    def answer(self, table: QuestionTable, rows: list[int], evidence: list[list[str]]) -> list[str]:
        return self.generator.answer(table.images_of(rows), table.questions_of(rows), evidence)

    def score(self, table: QuestionTable, rows: list[int], answers: list[str]) -> list[float]:
        return self.reward.score(table.questions_of(rows), answers, table.references_of(rows))


def sample_selections(reranker: AdaptiveReranker, table: QuestionTable, rows: list[int], queries: list[str],
                      hits: list[list[Hit]], m: int, seed: int,
                      temperature: float) -> tuple[list[list[Selection]], list[list[float]]]:
    """m selections per query row at `temperature`, from a generator seeded with `seed` alone."""
    batch = reranker.featurize(table.images_of(rows), table.questions_of(rows), queries, candidates_of(hits))
    return reranker.sample(batch, m, temperature, torch.Generator().manual_seed(seed))


def greedy_selections(reranker: AdaptiveReranker, table: QuestionTable, rows: list[int], queries: list[str],
                      hits: list[list[Hit]]) -> list[Selection]:
    """The inference selection of each query row."""
    return reranker.greedy(reranker.featurize(table.images_of(rows), table.questions_of(rows), queries,
                                              candidates_of(hits)))
