"""EncoderActor: the frozen CLIP encoder in its own Ray process.

Sits between the translator and the retrieval router in the rollout loop: the driver sends
each batch of translated queries here and passes the returned vectors to
`RetrievalRouter.search`. All logic is in `mmrag.models.clip_encoder.ClipEncoder`.
The caller places it, e.g. `EncoderActor.options(num_gpus=cfg.encoder.num_gpus).remote(cfg.encoder, cache_dir)`.
"""

from __future__ import annotations

import numpy as np
import ray
from PIL import Image

from mmrag.config import EncoderConfig
from mmrag.models.clip_encoder import ClipEncoder, Fusion


@ray.remote
class EncoderActor:
    def __init__(self, cfg: EncoderConfig, cache_dir: str):
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.encoder = ClipEncoder(cfg.model_name, cfg.pretrained, cache_dir, device, cfg.batch_size)

    def dim(self) -> int:
        return self.encoder.dim

    def identity(self) -> dict[str, str]:
        """Model name and checkpoint (with its content hash), as an index manifest records them."""
        return self.encoder.identity

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """[n, dim] float32 unit vectors."""
        return self.encoder.encode_texts(texts)

    def encode_images(self, images: list[Image.Image]) -> np.ndarray:
        """[n, dim] float32 unit vectors."""
        return self.encoder.encode_images(images)

    def encode_documents(self, texts: list[str], images: list[Image.Image | None], fusion: Fusion = "mean") -> np.ndarray:
        """[n, dim] float32 unit vectors of KB documents (text fused with the image, if any)."""
        return self.encoder.encode_documents(texts, images, fusion)
