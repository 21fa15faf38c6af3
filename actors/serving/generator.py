"""GeneratorDeployment: the frozen generator answering from the selected evidence.

Last model stage: (image, question, evidence texts) -> answer, the same `build_generator`
backend the offline pipeline uses (an LVLM on GPU presets, the extractive reader locally).
"""

from __future__ import annotations

from PIL import Image
from ray import serve

from actors.serving import configure_batching, prepare_replica
from mmrag.config import Config


@serve.deployment
class GeneratorDeployment:
    def __init__(self, cfg: Config):
        from mmrag.models.generator import build_generator

        self.generator = build_generator(cfg.generator, cfg.zoo.cache_dir, prepare_replica(cfg))
        configure_batching(self.answer, cfg.serving)

    @serve.batch
    async def answer(self, images: list[Image.Image], questions: list[str], evidence: list[list[str]]) -> list[str]:
        """One answer per request."""
        return self.generator.answer(images, questions, evidence)
