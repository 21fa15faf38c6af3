"""The grounded reader's eye: a frozen CNN that reads a picture's colour, shape, texture and background.

`zoo:visual-reader` (fitted by `mmrag.zoo.fit_visual_reader` on a synthetic world of its own)
is loaded here by the `grounded` generator backend, which answers a visual question from it
when no evidence states the asked attribute. It sees only the image, never text. The reranker
and the translator read with the same eye (`reranker.visual_reader`, `translator.visual_reader`):
`describe` puts what it sees into words.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file, save_file
from torch import nn

from mmrag.data.wording import ATTRIBUTES, GENERIC_WORDING, VOCABULARIES

WEIGHTS_FILE = "visual_reader.safetensors"
CONFIG_FILE = "visual_reader.json"
IMAGE_SIDE = 64


def image_tensor(images: list[Image.Image]) -> torch.Tensor:
    """[B, 3, 64, 64] floats in [0, 1]."""
    arrays = [np.asarray(image.convert("RGB").resize((IMAGE_SIDE, IMAGE_SIDE)), dtype=np.float32) / 255.0
              for image in images]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).contiguous()


class VisualReader(nn.Module):
    """Four strided convolutions (64 px -> a 4 x 4 map), then one linear head per attribute over the flat map."""

    def __init__(self, width: int = 32):
        super().__init__()
        self.width = width
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 5, stride=2, padding=2), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.Flatten(), nn.Dropout(0.2),
        )
        feature_size = 2 * width * (IMAGE_SIDE // 16) ** 2
        self.heads = nn.ModuleDict({a: nn.Linear(feature_size, len(VOCABULARIES[a])) for a in ATTRIBUTES})

    def forward(self, pixels: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.features(pixels)
        return {attribute: head(features) for attribute, head in self.heads.items()}

    @torch.no_grad()
    def read(self, images: list[Image.Image]) -> list[dict[str, str]]:
        """Per image: attribute -> the word it reads (the canonical word of `VOCABULARIES`)."""
        if not images:
            return []
        device = next(self.parameters()).device
        logits = self.eval()(image_tensor(images).to(device))
        best = {a: logits[a].argmax(dim=1).tolist() for a in ATTRIBUTES}
        return [{a: VOCABULARIES[a][best[a][i]] for a in ATTRIBUTES} for i in range(len(images))]

    def describe(self, images: list[Image.Image]) -> list[str]:
        """`seen_description` of what it reads in each image."""
        return [seen_description(reading) for reading in self.read(images)]

    def save(self, directory: Path) -> None:
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(directory / WEIGHTS_FILE))
        (directory / CONFIG_FILE).write_text(json.dumps({"width": self.width}) + "\n")


def seen_description(reading: dict[str, str]) -> str:
    """A reading in the first form of `GENERIC_WORDING`, the wording the v2 retriever and reranker backbone
    (`zoo:tiny-clip-v2`) were fitted on: what the reader sees, in a language their text towers know."""
    return GENERIC_WORDING.descriptions[0].format(**reading)


def load_visual_reader(directory: str | Path) -> VisualReader:
    directory = Path(directory)
    config = json.loads((directory / CONFIG_FILE).read_text())
    # Built on the meta device and given the saved tensors: loading draws nothing from torch's RNG, so a model
    # initialised after it (the reranker's head) is the same with or without a reader.
    with torch.device("meta"):
        model = VisualReader(width=config["width"])
    model.load_state_dict(load_file(str(directory / WEIGHTS_FILE)), assign=True)
    return model.eval().requires_grad_(False)
