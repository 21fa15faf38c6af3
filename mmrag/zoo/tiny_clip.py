"""`mmrag-tiny-clip`: a tiny open_clip architecture, and `zoo:tiny-clip-init`, its random weights.

The frozen retriever and the reranker backbone load CLIP through
`open_clip.create_model_and_transforms(model_name, pretrained=...)`. Registering the
tiny architecture under a model name and saving its weights as a checkpoint file
makes the tiny model go through that same call a real `ViT-L-14` / `openai` does.
`mmrag.zoo.fit_clip` fits these weights into `zoo:tiny-clip`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import open_clip
import torch
from safetensors.torch import save_file

TINY_CLIP_MODEL_NAME = "mmrag-tiny-clip"
CHECKPOINT_FILE = "open_clip_model.safetensors"

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
    partial_path = config_dir / f".{TINY_CLIP_MODEL_NAME}.{os.getpid()}.json"
    partial_path.write_text(json.dumps(TINY_CLIP_CONFIG, indent=2))
    os.replace(partial_path, config_path)
    open_clip.add_model_config(config_path)


def create_tiny_clip(pretrained: str | None = None) -> tuple[torch.nn.Module, Callable]:
    """The open_clip model `mmrag-tiny-clip` (random, or loaded from a checkpoint file) and
    its evaluation preprocessing, through the same call the retriever makes."""
    register_tiny_clip_config()
    model, _, preprocess = open_clip.create_model_and_transforms(TINY_CLIP_MODEL_NAME, pretrained=pretrained)
    return model, preprocess


def save_checkpoint(model: torch.nn.Module, path: str | Path) -> None:
    """Write a checkpoint `open_clip.create_model(..., pretrained=path)` loads strictly."""
    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    save_file(state, str(path))


def build_tiny_clip_init(out_dir: Path, cache_dir: str, seed: int) -> dict:
    """Random `mmrag-tiny-clip` weights for `seed`; figures for zoo.json."""
    torch.manual_seed(seed)
    model, _ = create_tiny_clip()
    save_checkpoint(model, out_dir / CHECKPOINT_FILE)
    return {"parameters": sum(p.numel() for p in model.parameters())}
