"""QueryEncoderDeployment: the frozen CLIP text encoder that turns translated queries into vectors.

Between the translator and the retrieval shards: query text -> unit vector [dim], the
same `ClipEncoder.encode_texts` the offline pipeline and the index build use.
"""

from __future__ import annotations

import numpy as np
from ray import serve

from actors.serving import configure_batching, prepare_replica
from mmrag.config import Config


@serve.deployment
class QueryEncoderDeployment:
    def __init__(self, cfg: Config):
        from mmrag.models.clip_encoder import ClipEncoder

        self.encoder = ClipEncoder(cfg.encoder.model_name, cfg.encoder.pretrained, cfg.zoo.cache_dir,
                                   prepare_replica(cfg), cfg.encoder.batch_size)
        configure_batching(self.encode_text, cfg.serving)

    @serve.batch
    async def encode_text(self, queries: list[str]) -> list[np.ndarray]:
        """One float32 unit vector per query."""
        return list(self.encoder.encode_texts(queries))
