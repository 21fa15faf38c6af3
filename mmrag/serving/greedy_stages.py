"""The greedy inference path, run by stage group: what one serving deployment computes in its own process.

Between request validation and the reply: each deployment of `serving.stage_groups` runs its
`GreedyStages` on a batch of `StageState`s (translate -> encode -> retrieve -> rerank ->
generate, the calls `LocalPipeline` + `greedy_batch` make offline) and returns them with its
stages' outputs filled in, the milliseconds each stage took, and the inputs no later stage
reads dropped (so pixels and KB documents do not travel back). No Ray here: a group is
plain components, testable in one process.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch
from PIL import Image

from mmrag.config import Config
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.models.generator import build_generator
from mmrag.models.reranker import AdaptiveReranker, candidates_of
from mmrag.models.translator import QueryTranslator
from mmrag.retrieval.manifest import Manifest
from mmrag.retrieval.merge import LocalRetriever
from mmrag.serving.state import STAGES, StageState, without_spent_inputs
from mmrag.training.export import load_reranker_weights, with_exported_translator

class GreedyStages:
    """The components of some consecutive stages, loaded in this process, run greedily on batches of states."""

    def __init__(self, stages: list[str], components: dict[str, Any]):
        self.stages = stages
        self.components = components

    @classmethod
    def from_config(cls, cfg: Config, checkpoint: str, stages: list[str], device: str = "cpu") -> GreedyStages:
        """Load what `stages` need: the exported translator and reranker, the frozen encoder, index and generator."""
        unknown = [stage for stage in stages if stage not in STAGES]
        if unknown:
            raise ValueError(f"unknown stage {unknown[0]!r} (valid: {', '.join(STAGES)})")
        return cls(list(stages), {stage: _load(stage, cfg, checkpoint, device) for stage in stages})

    def run(self, states: list[StageState], images: list[Image.Image]) -> list[StageState]:
        """Run this group's stages on a batch; `images` are the states' decoded images (their refs resolved)."""
        states = [dataclasses.replace(state, stage_ms=dict(state.stage_ms)) for state in states]
        with torch.no_grad():
            for stage in self.stages:
                begin = time.perf_counter()
                getattr(self, f"_{stage}")(self.components[stage], states, images)
                elapsed = (time.perf_counter() - begin) * 1000
                for state in states:
                    state.stage_ms[stage] = elapsed
        return [without_spent_inputs(state, self.stages[-1]) for state in states]

    @staticmethod
    def _translate(translator, states: list[StageState], images: list[Image.Image]) -> None:
        for state, query in zip(states, translator.greedy(images, [s.question for s in states])):
            state.query = query

    @staticmethod
    def _encode(encoder, states: list[StageState], images: list[Image.Image]) -> None:
        for state, vector in zip(states, encoder.encode_texts([s.query for s in states])):
            state.vector = vector

    @staticmethod
    def _retrieve(retriever, states: list[StageState], images: list[Image.Image]) -> None:
        # One search at the batch's largest k: the global ranking's prefix is each request's top-k.
        rows = retriever.search(np.stack([s.vector for s in states]), max(s.top_k for s in states))
        for state, hits in zip(states, rows):
            state.hits = hits[:state.top_k]

    @staticmethod
    def _rerank(reranker, states: list[StageState], images: list[Image.Image]) -> None:
        hits = [s.hits for s in states]
        batch = reranker.featurize(images, [s.question for s in states], [s.query for s in states],
                                   candidates_of(hits))
        # Greedy selection keeps candidates in descending order until STOP, so a smaller
        # max_docs is exactly a prefix of the selection at the trained limit.
        for state, row, selection in zip(states, hits, reranker.greedy(batch)):
            state.evidence = [dataclasses.replace(row[j], image=None) for j in selection[:state.max_docs]]

    @staticmethod
    def _generate(generator, states: list[StageState], images: list[Image.Image]) -> None:
        evidence = [[hit.text for hit in s.evidence] for s in states]
        for state, answer in zip(states, generator.answer(images, [s.question for s in states], evidence)):
            state.answer = answer


def _load(stage: str, cfg: Config, checkpoint: str, device: str) -> Any:
    cache = cfg.zoo.cache_dir
    if stage == "translate":
        return QueryTranslator.from_config(with_exported_translator(cfg, checkpoint).translator, cache, device)
    if stage == "encode":
        encoder = ClipEncoder(cfg.encoder.model_name, cfg.encoder.pretrained, cache, device, cfg.encoder.batch_size)
        Manifest.read(cfg.index.dir).check_encoder(encoder.identity, encoder.dim)
        return encoder
    if stage == "retrieve":
        return LocalRetriever(cfg.index.dir, cfg.index)
    if stage == "rerank":
        reranker = AdaptiveReranker.from_config(cfg.reranker, cache, device).eval()
        load_reranker_weights(reranker, checkpoint)
        return reranker
    return build_generator(cfg.generator, cache, device)
