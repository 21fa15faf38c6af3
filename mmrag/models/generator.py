"""The frozen generator G: (image, question, selected evidence) -> answer, one leaf of the rollout tree.

The reranker's selection of documents arrives here as `evidence` (possibly empty);
the answer goes to the reward model. Three backends share one `.answer` signature (`Generator`):

* `hf`: a frozen LVLM answering from a prompt that lists the evidence (GPU presets;
  `mmrag.models.lvlm_generator`, imported only when this backend is built: it alone needs transformers);
* `grounded`: `GroundedReader`, world v2's local-mode generator: the image through a frozen
  visual reader, overridden by evidence that states the asked attribute; facts from the
  evidence, in order; a two-fact answer needs both passages (its visual reader, imported when this
  backend is built, is the one reader that needs torch);
* `extractive`: `ExtractiveReader`, world v1's, which can only answer from the evidence it is
  given, so retrieval quality decides the reward.
"""

from __future__ import annotations

from typing import Protocol

from PIL import Image

from mmrag.config import GeneratorConfig
from mmrag.model_refs import resolve
from mmrag.models.batches import check_batch_lengths
from mmrag.models.extractive_reader import ExtractiveReader
from mmrag.models.grounded_reader import GroundedReader


class Generator(Protocol):
    """What `build_generator` returns: one answer per (image, question, evidence) row."""

    def answer(self, images: list[Image.Image | None], questions: list[str],
               evidence: list[list[str]]) -> list[str]: ...


class ExtractiveGenerator:
    """`ExtractiveReader` behind the generator signature; the image is not used."""

    def __init__(self):
        self.reader = ExtractiveReader()

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        check_batch_lengths(images=images, questions=questions, evidence=evidence)
        return self.reader.answer_batch(questions, evidence)


class GroundedGenerator:
    """`GroundedReader` behind the generator signature."""

    def __init__(self, visual_reader_path: str):
        # torch: seconds of import in every generator process, and only this backend's visual reader needs it
        from mmrag.models.visual_reader import load_visual_reader

        self.reader = GroundedReader(load_visual_reader(visual_reader_path))

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        check_batch_lengths(images=images, questions=questions, evidence=evidence)
        return self.reader.answer_batch(images, questions, evidence)


def build_generator(cfg: GeneratorConfig, cache_dir: str, device: str = "cpu") -> Generator:
    """The backend named by `generator.backend`."""
    if cfg.backend == "grounded":
        return GroundedGenerator(resolve(cfg.visual_reader, cache_dir))
    if cfg.backend == "extractive":
        return ExtractiveGenerator()
    if cfg.backend == "hf":
        from mmrag.models.lvlm_generator import LVLMGenerator  # transformers: seconds of import, hf backend only

        return LVLMGenerator.load(cfg, cache_dir, device)
    raise ValueError(f"generator.backend: expected 'grounded', 'extractive' or 'hf', got {cfg.backend!r}")
