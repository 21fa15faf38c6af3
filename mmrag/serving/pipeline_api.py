"""`mmrag.Pipeline`: a trained export answering questions about images in this process, without Ray.

  from mmrag import Pipeline
  pipeline = Pipeline.from_pretrained("runs/local/export")           # device="cuda" on a GPU
  result = pipeline.answer("photo.png", "When was this built?")      # a path, PIL image or encoded bytes
  result.answer, result.query, [(e.doc_id, e.title, e.score) for e in result.evidence]
  pipeline.answer_batch(images, questions)                            # one model call per stage per batch

The greedy inference path is the one `mmrag serve` runs (`mmrag.serving.greedy_stages.GreedyStages`,
all five stages in one process), so an answer here equals the endpoint's. The export's
export.json carries the run's whole config (index, encoder, generator); pass `config=` (a
`Config` or a YAML path) to load an export written without it, or `overrides=` to change keys.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from PIL import Image

from mmrag.config import Config, config_from_dict, config_to_dict, load_config
from mmrag.cpu_threads import fit_threads_to_models, use_owned_cpus
from mmrag.data.dataset import decode_image
from mmrag.serving.greedy_stages import GreedyStages
from mmrag.serving.state import STAGES, StageState
from mmrag.training.export_meta import export_meta

ImageInput = Union[Image.Image, bytes, str, os.PathLike]
"""A PIL image, encoded image bytes (PNG, JPEG, ...), or the path of an image file."""


@dataclass(frozen=True)
class Evidence:
    """One document the generator read."""

    doc_id: str
    title: str
    text: str
    score: float
    """Retrieval score (inner product of unit vectors) against the query."""


@dataclass(frozen=True)
class PipelineAnswer:
    answer: str
    query: str
    """The search query the translator wrote."""
    evidence: list[Evidence]
    """The documents the reranker kept, in its order."""


class Pipeline:
    """Translator, encoder, index, reranker and generator of one export, loaded on one device."""

    def __init__(self, stages: GreedyStages, cfg: Config, policy_version: int):
        self.stages = stages
        self.cfg = cfg
        self.policy_version = policy_version

    @classmethod
    def from_pretrained(cls, export_dir: str | os.PathLike, device: str = "cpu", config: Config | str | None = None,
                        overrides: Sequence[str] = ()) -> Pipeline:
        """Load RUN_DIR/export of `mmrag train` onto `device` ("cpu", "cuda", "cuda:1", ...).

        Sets this process's torch threads from the CPUs it owns and the models' size (`mmrag.cpu_threads`;
        `OMP_NUM_THREADS` overrides).
        """
        use_owned_cpus("mmrag.Pipeline")
        meta = export_meta(export_dir)
        if isinstance(config, Config):
            cfg = config_from_dict(config_to_dict(config), list(overrides)) if overrides else config
        elif config is not None:
            cfg = load_config(config, list(overrides))
        elif "config" in meta:
            cfg = config_from_dict(meta["config"], list(overrides))
        else:
            raise ValueError(f"{Path(export_dir) / 'export.json'}: no `config` recorded (an export written before "
                             "mmrag.Pipeline): pass config= (the run's config or its YAML path)")
        stages = GreedyStages.from_config(cfg, str(export_dir), list(STAGES), device)
        fit_threads_to_models(stages.components.values())
        return cls(stages, cfg, int(meta["version"]))

    def answer(self, image: ImageInput, question: str, top_k: int | None = None,
               max_docs: int | None = None) -> PipelineAnswer:
        """The answer to `question` about `image`, with the query written and the evidence read."""
        (result,) = self.answer_batch([image], [question], top_k, max_docs)
        return result

    def answer_batch(self, images: Sequence[ImageInput], questions: Sequence[str], top_k: int | None = None,
                     max_docs: int | None = None, batch_size: int = 32) -> list[PipelineAnswer]:
        """`answer` for each (image, question) pair, `batch_size` pairs per model call.

        `top_k`: candidates retrieved for the reranker (default `index.top_k`); `max_docs`: most
        documents kept (default and maximum: the reranker's trained `reranker.max_docs`).
        """
        if len(images) != len(questions):
            raise ValueError(f"answer_batch: {len(images)} images but {len(questions)} questions")
        top_k = self.cfg.index.top_k if top_k is None else top_k
        max_docs = self.cfg.reranker.max_docs if max_docs is None else max_docs
        if top_k < 1:
            raise ValueError(f"top_k: expected at least 1, got {top_k}")
        if not 0 <= max_docs <= self.cfg.reranker.max_docs:
            raise ValueError(f"max_docs: expected 0..{self.cfg.reranker.max_docs} (reranker.max_docs), got {max_docs}")
        results = []
        for start in range(0, len(questions), batch_size):
            decoded = [_rgb(image) for image in images[start:start + batch_size]]
            states = [StageState(image, question, top_k, max_docs)
                      for image, question in zip(decoded, questions[start:start + batch_size])]
            results += [_answer_of(state) for state in self.stages.run(states, decoded)]
        return results


def _rgb(image: ImageInput) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, bytes):
        return decode_image(image)
    return decode_image(Path(image).read_bytes())


def _answer_of(state: StageState) -> PipelineAnswer:
    evidence = [Evidence(hit.doc_id, hit.title, hit.text, float(hit.score)) for hit in state.evidence]
    return PipelineAnswer(state.answer, state.query, evidence)
