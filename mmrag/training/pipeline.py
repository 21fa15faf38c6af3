"""The MM-RAG pipeline as five stage calls, in one process.

translate (image, question -> queries) -> retrieve (query -> top-K documents) ->
rerank (-> ordered selection, possibly empty) -> answer (frozen generator) -> score
(frozen reward model). The rollout and evaluation code talks only to these stage
methods, so the distributed driver can hand it actor-backed stages with the same
signatures instead of this in-process `LocalPipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from mmrag.config import Config
from mmrag.models.reranker import AdaptiveReranker, Candidate
from mmrag.models.translator import QuerySample, QueryTranslator
from mmrag.retrieval.merge import Hit

Selection = tuple[int, ...]


@dataclass
class LocalPipeline:
    """Every component loaded in this process (the single-process reference trainer, evaluation)."""

    cfg: Config
    translator: QueryTranslator
    encoder: object
    retriever: object
    reranker: AdaptiveReranker
    generator: object
    reward: object

    @classmethod
    def from_config(cls, cfg: Config, device: str = "cpu", checkpoint: str | None = None) -> LocalPipeline:
        """Load every component; `checkpoint` (RUN_DIR/export) replaces the untrained translator and reranker."""
        from mmrag.models.clip_encoder import ClipEncoder
        from mmrag.models.generator import build_generator
        from mmrag.models.reward import build_reward
        from mmrag.retrieval.merge import LocalRetriever
        from mmrag.training.export import load_reranker_weights, with_exported_translator

        cache = cfg.zoo.cache_dir
        if not (Path(cfg.index.dir) / "manifest.json").exists():
            raise FileNotFoundError(f"index.dir: no index at {cfg.index.dir} (build it with `mmrag index`)")
        if checkpoint is not None:
            cfg = with_exported_translator(cfg, checkpoint)
        encoder = ClipEncoder(cfg.encoder.model_name, cfg.encoder.pretrained, cache, device, cfg.encoder.batch_size)
        retriever = LocalRetriever(cfg.index.dir, cfg.index)
        retriever.manifest.check_encoder(encoder.identity, encoder.dim)
        pipeline = cls(
            cfg=cfg,
            translator=QueryTranslator.from_config(cfg.translator, cache, device),
            encoder=encoder,
            retriever=retriever,
            reranker=AdaptiveReranker.from_config(cfg.reranker, cache, device),
            generator=build_generator(cfg.generator, cache, device),
            reward=build_reward(cfg.reward, cache, device),
        )
        if checkpoint is not None:
            load_reranker_weights(pipeline.reranker, checkpoint)
        return pipeline

    def translate(self, images: list[Image.Image], questions: list[str], n: int) -> list[list[QuerySample]]:
        return self.translator.sample(images, questions, n, self.cfg.translator.temperature)

    def translate_greedy(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        return self.translator.greedy(images, questions)

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        return self.retriever.search(self.encoder.encode_texts(queries), self.cfg.index.top_k)

    def rerank(self, images, questions, queries, hits: list[list[Hit]], m: int
               ) -> tuple[list[list[Selection]], list[list[float]]]:
        batch = self.reranker.featurize(images, questions, queries, candidates_of(hits))
        return self.reranker.sample(batch, m, self.cfg.reranker.temperature)

    def rerank_greedy(self, images, questions, queries, hits: list[list[Hit]]) -> list[Selection]:
        batch = self.reranker.featurize(images, questions, queries, candidates_of(hits))
        return self.reranker.greedy(batch)

    def answer(self, images, questions, evidence: list[list[str]]) -> list[str]:
        return self.generator.answer(images, questions, evidence)

    def score(self, questions, answers, references) -> list[float]:
        return self.reward.score(questions, answers, references)


def candidates_of(hits: list[list[Hit]]) -> list[list[Candidate]]:
    """Retrieval hits as the reranker's candidates (images decoded)."""
    return [[Candidate.from_hit(hit) for hit in row] for row in hits]
