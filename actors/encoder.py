"""EncoderActor: the frozen CLIP encoder in its own Ray process.

Sits between the translator and the retrieval shards in the rollout stream: each call encodes
a micro-batch's translated queries, and the shards search the returned vectors (passed to
them as an object ref, without a trip through the driver). All logic is in `mmrag.models.clip_encoder.ClipEncoder`.
Placed by `mmrag.actors.stage_pools.ActorPools` as `ray.remote(EncoderActor).options(num_gpus=...)`: a plain
class, so that a benchmark can place a subclass instead (`benchmarks.simulated_device`).
"""

from __future__ import annotations

import numpy as np
import ray
from PIL import Image

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.config import EncoderConfig
from mmrag.models.clip_encoder import ClipEncoder, Fusion


class EncoderActor:
    def __init__(self, cfg: EncoderConfig, cache_dir: str):
        use_actor_cpus("EncoderActor")
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

    @ray.method(num_returns=2)
    def encode_queries(self, texts: list[str]) -> tuple[int, np.ndarray]:
        """(their count, vectors as `encode_texts`): the rollout waits on the count alone and passes the vectors
        to the shards by reference, so they never reach the driver."""
        vectors = self.encoder.encode_texts(texts)
        return len(vectors), vectors

    def encode_images(self, images: list[Image.Image]) -> np.ndarray:
        """[n, dim] float32 unit vectors."""
        return self.encoder.encode_images(images)

    def encode_documents(self, texts: list[str], images: list[Image.Image | None], fusion: Fusion = "mean") -> np.ndarray:
        """[n, dim] float32 unit vectors of KB documents (text fused with the image, if any)."""
        return self.encoder.encode_documents(texts, images, fusion)
