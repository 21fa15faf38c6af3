"""TranslatorDeployment: the exported query translator, writing the greedy search query of each request.

First stage behind the ingress: (image, question) -> query text, which goes to the encoder.
Loads RUN_DIR/export exactly as `LocalPipeline.from_config(cfg, checkpoint=...)` does.
"""

from __future__ import annotations

from PIL import Image
from ray import serve

from actors.serving import configure_batching, prepare_replica
from mmrag.config import Config


@serve.deployment
class TranslatorDeployment:
    def __init__(self, cfg: Config, checkpoint: str):
        from mmrag.models.translator import QueryTranslator
        from mmrag.training.export import with_exported_translator

        cfg = with_exported_translator(cfg, checkpoint)
        self.translator = QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, prepare_replica(cfg))
        configure_batching(self.greedy, cfg.serving)

    @serve.batch
    async def greedy(self, images: list[Image.Image], questions: list[str]) -> list[str]:
        """One greedy query per (image, question); concurrent requests share one generate call."""
        return self.translator.greedy(images, questions)
