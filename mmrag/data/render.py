"""Draws an entity's picture: a textured, coloured shape on a solid background.

Second stage of the synthetic data flow: synth.py calls `render_entity` once per entity
for the knowledge base's canonical image (rng=None) and once per question for an
augmented view (scale, shift, rotation, brightness, noise) that retrieval must still match.
Shapes are drawn at 4x and downsampled so that shape, colour and texture stay legible at 64 px.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageEnhance

from mmrag.data.world import Entity

SUPERSAMPLE = 4
SHAPE_RADIUS = 0.42
"""Shape radius at scale 1, as a fraction of the image side."""
TEXTURE_PERIOD = 1 / 8
"""Stripe / dot / checker period at scale 1, as a fraction of the image side."""

FILL_RGB = {
    "red": (220, 30, 30),
    "green": (30, 170, 50),
    "blue": (40, 80, 230),
    "yellow": (240, 220, 40),
    "purple": (140, 50, 180),
    "orange": (245, 140, 20),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
}
BACKGROUND_RGB = {
    "grey": (128, 128, 128),
    "navy": (20, 30, 90),
    "olive": (110, 110, 30),
    "pink": (240, 170, 200),
    "teal": (20, 130, 130),
    "brown": (110, 70, 30),
}


@dataclass(frozen=True)
class Pose:
    scale: float = 1.0
    shift: tuple[float, float] = (0.0, 0.0)
    """Offset of the centre, as fractions of the image side."""
    angle: float = 0.0
    """Counter-clockwise rotation in degrees."""


def render_entity(entity: Entity, image_size: int = 64, rng: np.random.Generator | None = None) -> Image.Image:
    """The entity's canonical picture when `rng` is None, else a randomly augmented view of it."""
    pose = Pose() if rng is None else random_pose(rng)
    side = image_size * SUPERSAMPLE
    shape_layer = _textured_shape(entity, side, pose.scale)
    if pose != Pose():
        offset = (pose.shift[0] * side, pose.shift[1] * side)
        # Nearest is enough: the 4x box downsample below smooths its jagged edges, at 1/20 the cost of bilinear.
        shape_layer = shape_layer.rotate(pose.angle, resample=Image.Resampling.NEAREST, translate=offset)
    canvas = Image.new("RGB", (side, side), BACKGROUND_RGB[entity.background])
    canvas.paste(shape_layer, (0, 0), shape_layer)
    image = canvas.resize((image_size, image_size), Image.Resampling.BOX)
    return image if rng is None else _photometric_jitter(image, rng)


def random_pose(rng: np.random.Generator) -> Pose:
    scale = float(rng.uniform(0.7, 1.0))
    max_shift = (1.0 - scale) * SHAPE_RADIUS + 0.04
    shift = (float(rng.uniform(-max_shift, max_shift)), float(rng.uniform(-max_shift, max_shift)))
    return Pose(scale=scale, shift=shift, angle=float(rng.uniform(-20.0, 20.0)))


def _photometric_jitter(image: Image.Image, rng: np.random.Generator) -> Image.Image:
    image = ImageEnhance.Brightness(image).enhance(float(rng.uniform(0.8, 1.2)))
    pixels = np.asarray(image, dtype=np.float32) + rng.normal(0.0, 6.0, size=(image.height, image.width, 3))
    return Image.fromarray(np.clip(np.rint(pixels), 0, 255).astype(np.uint8), "RGB")


def _textured_shape(entity: Entity, side: int, scale: float) -> Image.Image:
    """RGBA layer: the filled, textured shape centred on a transparent square of `side` pixels."""
    radius = SHAPE_RADIUS * side * scale
    mask = Image.new("L", (side, side), 0)
    _draw_shape(ImageDraw.Draw(mask), entity.shape, side / 2, radius)
    fill = FILL_RGB[entity.colour]
    layer = Image.new("RGB", (side, side), fill)
    period = max(2, round(TEXTURE_PERIOD * side * scale))
    _draw_texture(ImageDraw.Draw(layer), entity.texture, side, period, contrasting_shade(fill))
    layer.putalpha(mask)
    return layer


def contrasting_shade(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """A darker shade of a light colour, a lighter one of a dark colour."""
    luminance = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]
    if luminance > 110:
        return tuple(round(c * 0.4) for c in rgb)
    return tuple(round(c + (255 - c) * 0.6) for c in rgb)


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, centre: float, radius: float) -> None:
    if shape == "circle":
        draw.ellipse([centre - radius, centre - radius, centre + radius, centre + radius], fill=255)
        return
    points = [(centre + x * radius, centre + y * radius) for x, y in _UNIT_OUTLINES[shape]]
    draw.polygon(points, fill=255)


def _draw_texture(draw: ImageDraw.ImageDraw, texture: str, side: int, period: int, colour) -> None:
    half = period / 2
    if texture == "striped":
        for start in range(-side, side, period):
            draw.polygon([(start, 0), (start + half, 0), (start + half + side, side), (start + side, side)], fill=colour)
    elif texture == "dotted":
        dot = period * 0.3
        for y in np.arange(half, side, period):
            for x in np.arange(half, side, period):
                draw.ellipse([x - dot, y - dot, x + dot, y + dot], fill=colour)
    elif texture == "checkered":
        for row, y in enumerate(range(0, side, period)):
            for x in range(period * (row % 2), side, 2 * period):
                draw.rectangle([x, y, x + period - 1, y + period - 1], fill=colour)
    elif texture != "plain":
        raise ValueError(f"texture: expected plain, striped, dotted or checkered, got {texture!r}")


def _regular_polygon(corners: int, start_degrees: float, radii: tuple[float, ...] = (1.0,)) -> list[tuple[float, float]]:
    """Points around the unit circle (y down), alternating between `radii` (a star uses two)."""
    angles = [math.radians(start_degrees) + i * 2 * math.pi / corners for i in range(corners)]
    return [(radii[i % len(radii)] * math.cos(a), radii[i % len(radii)] * math.sin(a)) for i, a in enumerate(angles)]


def _heart_outline(points: int = 64) -> list[tuple[float, float]]:
    outline = []
    for i in range(points):
        t = 2 * math.pi * i / points
        x = 16 * math.sin(t) ** 3
        y = 13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)
        outline.append((x / 17, -(y + 2.5) / 17))
    return outline


_ARM = 0.34
_UNIT_OUTLINES: dict[str, list[tuple[float, float]]] = {
    "square": [(-0.8, -0.8), (0.8, -0.8), (0.8, 0.8), (-0.8, 0.8)],
    "triangle": [(0.0, -0.9), (0.95, 0.75), (-0.95, 0.75)],
    "star": _regular_polygon(10, -90.0, radii=(1.0, 0.45)),
    "hexagon": _regular_polygon(6, 0.0),
    "diamond": [(0.0, -1.0), (0.72, 0.0), (0.0, 1.0), (-0.72, 0.0)],
    "cross": [(-_ARM, -1), (_ARM, -1), (_ARM, -_ARM), (1, -_ARM), (1, _ARM), (_ARM, _ARM),
              (_ARM, 1), (-_ARM, 1), (-_ARM, _ARM), (-1, _ARM), (-1, -_ARM), (-_ARM, -_ARM)],
    "heart": _heart_outline(),
}
