"""Frozen open_clip encoder: texts, images and whole KB documents -> L2-normalised vectors.

Sits at both ends of retrieval: `mmrag.retrieval.build` embeds the knowledge base with
`encode_documents`, and at query time the translator's text queries go through
`encode_texts` (in-process, or inside `mmrag.actors.encoder.EncoderActor`). The same
`encoder_identity` is written into the index manifest, so an index is never searched with
vectors from a different encoder.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal

import numpy as np
import open_clip
import torch
from PIL import Image

from mmrag.checksum import file_sha256
from mmrag.model_refs import resolve
from mmrag.models.clip_architectures import TINY_CLIP_MODEL_NAME, register_tiny_clip_config

Fusion = Literal["mean", "text", "image"]


def resolve_pretrained(model_name: str, pretrained: str, cache_dir: str) -> str:
    """Turn `zoo:NAME` into a local checkpoint (registering the tiny model config first)."""
    if model_name == TINY_CLIP_MODEL_NAME:
        register_tiny_clip_config()
    return resolve(pretrained, str(Path(cache_dir).expanduser()))


def _checkpoint_sha256(path: Path) -> str:
    """Content hash of a checkpoint file, or of every file under a checkpoint directory."""
    if path.is_file():
        return file_sha256(path)
    listing = [f"{file.relative_to(path)}:{file_sha256(file)}" for file in sorted(path.rglob("*")) if file.is_file()]
    return hashlib.sha256("\n".join(listing).encode()).hexdigest()


def encoder_identity(model_name: str, pretrained: str, cache_dir: str) -> dict[str, str]:
    """What makes two encoders give the same vectors: the model, and the checkpoint's content.

    A local checkpoint is hashed, so a rebuilt `zoo:` model or an overwritten file counts as a
    different encoder; an open_clip tag (e.g. `openai`) is identified by name.
    """
    checkpoint = resolve_pretrained(model_name, pretrained, cache_dir)
    is_local = bool(checkpoint) and Path(checkpoint).exists()
    return {
        "model_name": model_name,
        "pretrained": pretrained,
        "checkpoint": checkpoint,
        "checkpoint_sha256": _checkpoint_sha256(Path(checkpoint)) if is_local else "",
    }


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)


class ClipEncoder:
    """An open_clip model in eval mode; every `encode_*` returns float32 rows of unit norm."""

    def __init__(self, model_name: str, pretrained: str, cache_dir: str, device: str = "cpu",
                 batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError(f"encoder.batch_size: expected a positive integer, got {batch_size}")
        self.identity = encoder_identity(model_name, pretrained, cache_dir)
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.model, _, self.preprocess = open_clip.create_model_and_transforms(
            model_name, pretrained=self.identity["checkpoint"], device=self.device,
            cache_dir=str(Path(cache_dir).expanduser()))
        self.model.eval().requires_grad_(False)
        self.tokenizer = open_clip.get_tokenizer(model_name)
        with torch.inference_mode():
            self.dim = int(self._text_batch([""]).shape[1])

    def _text_batch(self, texts: list[str]) -> np.ndarray:
        tokens = self.tokenizer(list(texts)).to(self.device)
        return self.model.encode_text(tokens).float().cpu().numpy()

    def _image_batch(self, images: list[Image.Image]) -> np.ndarray:
        pixels = torch.stack([self.preprocess(image.convert("RGB")) for image in images]).to(self.device)
        return self.model.encode_image(pixels).float().cpu().numpy()

    @torch.inference_mode()
    def _encode(self, items: list, forward) -> np.ndarray:
        outputs = [forward(items[start:start + self.batch_size]) for start in range(0, len(items), self.batch_size)]
        if not outputs:
            return np.zeros((0, self.dim), np.float32)
        return _normalise(np.concatenate(outputs))

    def _encode_distinct(self, items: list, forward, key) -> np.ndarray:
        """`_encode`, each distinct item (by `key`) once: a reranker call repeats its question's image and text for
        every query row, and retrieval returns the same passages to a question's queries. Which items are encoded
        together depends on the call's inputs alone, so the same call gives the same vectors on any replica."""
        position: dict = {}
        distinct, rows = [], []
        for item in items:
            rows.append(position.setdefault(key(item), len(distinct)))
            if rows[-1] == len(distinct):
                distinct.append(item)
        return self._encode(distinct, forward)[rows] if distinct else self._encode([], forward)

    def encode_texts(self, texts: list[str]) -> np.ndarray:
        """[n, dim] vectors of `texts` (longer texts are truncated to the model's context)."""
        return self._encode_distinct(list(texts), self._text_batch, lambda text: text)

    def encode_images(self, images: list[Image.Image]) -> np.ndarray:
        """[n, dim] vectors of `images` (any PIL mode; converted to RGB)."""
        return self._encode_distinct(list(images), self._image_batch,
                                     lambda image: (image.mode, image.size, image.tobytes()))

    def encode_documents(self, texts: list[str], images: list[Image.Image | None],
                         fusion: Fusion = "mean") -> np.ndarray:
        """[n, dim] vectors of KB documents; a document with an image is fused by `fusion`.

        `mean`: the normalised mean of its text and image vectors; `text`: its text only;
        `image`: its image only. Documents without an image always use their text vector.
        """
        if len(texts) != len(images):
            raise ValueError(f"encode_documents: {len(texts)} texts but {len(images)} images (one per document)")
        if fusion not in ("mean", "text", "image"):
            raise ValueError(f"index.fusion: expected one of ['mean', 'text', 'image'], got {fusion!r}")
        vectors = self.encode_texts(texts)
        with_image = [i for i, image in enumerate(images) if image is not None]
        if fusion == "text" or not with_image:
            return vectors
        image_vectors = self.encode_images([images[i] for i in with_image])
        if fusion == "image":
            vectors[with_image] = image_vectors
        else:
            vectors[with_image] = _normalise(vectors[with_image] + image_vectors)
        return vectors
