"""`zoo:visual-reader`: the grounded generator's frozen eye, fitted on a synthetic world of its own.

Cross-entropy on the colour, shape, texture and background of augmented views of things whose
four attributes are drawn independently (seed + 4000), measured on a held-out world v2
(seed + 4500, near-duplicate families and all). It is fitted on images and attribute labels
only, no text, so it shares nothing with the KB's wording.

Why independent attributes: fitted on a world v2 of its own, whose families share shape, colour
and background, the CNN read shape off its correlates and got 0.52 of held-out shapes right
(colour, texture, background 1.0); on 6000 independent draws it gets 0.95. An LVLM sees shapes.

Why four views of each and 4000 steps: with one view each and 1500 steps it fitted its views
(final loss 0.007) and read 0.94-0.95 of held-out shapes, mistaking hexagons for circles on 5-6
of world v2's 195 visual test questions, so evidence paid on questions the image should answer
alone. Four views and 4000 steps read 0.996 of held-out shapes and every visual question of
world v2's val and test splits right (2026-12-05, docs/LEARNING.md).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from mmrag.data.render import render_entity
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import ATTRIBUTES, VOCABULARIES
from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES, Entity
from mmrag.models.visual_reader import VisualReader, image_tensor
from mmrag.zoo.fitting import fit_report, run_fit

FIT_THINGS = 6000
"""Independently drawn things the eye is fitted on."""
VIEWS_PER_THING = 4
"""Augmented views of each."""
HELDOUT_ENTITIES = 60
WORLD_SEED_OFFSET = 4000
HELDOUT_SEED_OFFSET = 4500
STEPS = 4000
BATCH_SIZE = 64
LEARNING_RATE = 3e-3


def independent_things(count: int, seed: int) -> list[Entity]:
    """`count` things whose shape, colour, texture and background are drawn independently and uniformly."""
    rng = random.Random(seed)
    return [Entity(f"thing-{i}", f"Thing {i}", rng.choice(SHAPES), rng.choice(COLOURS), rng.choice(TEXTURES),
                   rng.choice(BACKGROUNDS)) for i in range(count)]


def labelled_views(entities: list[Entity], seed: int, views: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """`views` augmented views of each entity and, per attribute, each view's label index."""
    view_rng = np.random.default_rng(seed)
    owners = [entity for entity in entities for _ in range(views)]
    images = [render_entity(entity, 64, view_rng) for entity in owners]
    labels = {a: torch.tensor([VOCABULARIES[a].index(getattr(e, a)) for e in owners]) for a in ATTRIBUTES}
    return image_tensor(images), labels


def fit(model: VisualReader, pixels: torch.Tensor, labels: dict[str, torch.Tensor], steps: int,
        seed: int) -> list[float]:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    # Channels-last convolutions are a ninth faster on CPU; `VisualReader.save` stores the weights contiguous.
    model.to(memory_format=torch.channels_last)
    pixels = pixels.contiguous(memory_format=torch.channels_last)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LEARNING_RATE, total_steps=steps,
                                                   pct_start=0.1)

    def batch_loss() -> torch.Tensor:
        batch = torch.randint(0, len(pixels), (BATCH_SIZE,), generator=generator)
        logits = model(pixels[batch])
        return torch.stack([F.cross_entropy(logits[a], labels[a][batch]) for a in ATTRIBUTES]).mean()

    return run_fit(model, optimizer, schedule, steps, "visual-reader", batch_loss)


@torch.no_grad()
def accuracy(model: VisualReader, pixels: torch.Tensor, labels: dict[str, torch.Tensor]) -> dict[str, float]:
    logits = model.eval()(pixels)
    return {a: round(float((logits[a].argmax(dim=1) == labels[a]).float().mean()), 3) for a in ATTRIBUTES}


def build_visual_reader(out_dir: Path, cache_dir: str, seed: int, steps: int = STEPS) -> dict:
    """Fit a fresh `VisualReader`, save it, return its held-out accuracy per attribute."""
    started = time.perf_counter()
    torch.manual_seed(seed)
    model = VisualReader()
    pixels, labels = labelled_views(independent_things(FIT_THINGS, seed + WORLD_SEED_OFFSET), seed + WORLD_SEED_OFFSET,
                                    VIEWS_PER_THING)
    heldout_world = draw_entities_v2(HELDOUT_ENTITIES, random.Random(seed + HELDOUT_SEED_OFFSET))
    heldout_pixels, heldout_labels = labelled_views(heldout_world, seed + HELDOUT_SEED_OFFSET, 4)
    losses = fit(model, pixels, labels, steps, seed)
    model.save(out_dir)
    return {
        "heldout_attribute_accuracy": accuracy(model, heldout_pixels, heldout_labels),
        "heldout_images": len(heldout_pixels),
        **fit_report(losses, steps, started, FIT_THINGS, HELDOUT_ENTITIES),
        "views_per_thing": VIEWS_PER_THING,
    }
