"""open_clip architectures this project defines, registered under their model names.

`mmrag.models.clip_encoder` (the frozen retriever and the reranker backbone) loads CLIP
with `open_clip.create_model_and_transforms(model_name, pretrained=...)`. Registering the
tiny architecture as `mmrag-tiny-clip` makes the tiny model go through that same call a
real `ViT-L-14` does; the zoo (`mmrag.zoo.tiny_clip`, `mmrag.zoo.fit_clip`) makes its weights.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import open_clip

from mmrag.atomic import atomic_write_text

TINY_CLIP_MODEL_NAME = "mmrag-tiny-clip"

TINY_CLIP_CONFIG = {
    "embed_dim": 64,
    "vision_cfg": {"image_size": 64, "patch_size": 8, "width": 128, "head_width": 32, "layers": 3},
    # Vocabulary of open_clip's default (bundled) BPE tokenizer, so nothing is downloaded.
    "text_cfg": {"context_length": 32, "vocab_size": 49408, "width": 128, "heads": 4, "layers": 3},
}


def register_tiny_clip_config() -> None:
    """Make `mmrag-tiny-clip` a model name open_clip knows (idempotent, once per process)."""
    if TINY_CLIP_MODEL_NAME in open_clip.list_models():
        return
    # open_clip reads architectures from JSON files named after the model; the
    # content is fixed, so every process may share (and atomically rewrite) one file.
    config_dir = Path(tempfile.gettempdir()) / "mmrag-open-clip-configs"
    config_dir.mkdir(parents=True, exist_ok=True)
    config_path = config_dir / f"{TINY_CLIP_MODEL_NAME}.json"
    atomic_write_text(config_path, json.dumps(TINY_CLIP_CONFIG, indent=2))
    open_clip.add_model_config(config_path)
