"""`zoo:tiny-clip-init`: random weights of the tiny open_clip architecture `mmrag-tiny-clip`.

The architecture lives in `mmrag.models.clip_architectures`; this builder saves its
random initialisation as a checkpoint file that `open_clip.create_model_and_transforms`
loads through its own `pretrained=PATH` route, like any released CLIP checkpoint.
`mmrag.zoo.fit_clip` fits these weights into `zoo:tiny-clip`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import open_clip
import torch
from safetensors.torch import save_file

from mmrag.models.clip_architectures import TINY_CLIP_CONFIG, TINY_CLIP_MODEL_NAME, register_tiny_clip_config

CHECKPOINT_FILE = "open_clip_model.safetensors"


def random_tiny_clip() -> open_clip.CLIP:
    """A freshly initialised `mmrag-tiny-clip` (draws from torch's global generator).

    Built from the architecture directly: open_clip's loader, given no checkpoint, warns
    that the model was initialised randomly, which here is the intent, not a problem.
    """
    return open_clip.CLIP(**TINY_CLIP_CONFIG)


def create_tiny_clip(checkpoint: str) -> tuple[torch.nn.Module, Callable]:
    """`mmrag-tiny-clip` loaded from a checkpoint file, and its evaluation preprocessing,
    through the same call the retriever makes."""
    register_tiny_clip_config()
    model, _, preprocess = open_clip.create_model_and_transforms(TINY_CLIP_MODEL_NAME, pretrained=checkpoint)
    return model, preprocess


def save_checkpoint(model: torch.nn.Module, path: str | Path) -> None:
    """Write a checkpoint `open_clip.create_model(..., pretrained=path)` loads strictly."""
    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    save_file(state, str(path))


def build_tiny_clip_init(out_dir: Path, cache_dir: str, seed: int) -> dict:
    """Random `mmrag-tiny-clip` weights for `seed`; figures for zoo.json."""
    torch.manual_seed(seed)
    model = random_tiny_clip()
    save_checkpoint(model, out_dir / CHECKPOINT_FILE)
    return {"parameters": sum(p.numel() for p in model.parameters())}
