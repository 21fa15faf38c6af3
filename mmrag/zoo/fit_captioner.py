"""`zoo:tiny-lvlm-captioner`: tiny-lvlm taught to describe an image as a search query.

This is the query translator's starting point: a pretrained-but-untuned query writer.
It sees the translator's prompt ("{question} Search query:") and answers with a generic
description of the image, drawn from a mix of forms so that its samples are diverse
enough to explore. It never sees entity names, KB passages or rewards; reward
backpropagation is what later teaches it which queries retrieve well. Fitted on a
synthetic world of its own (seed + 2000); description accuracy is measured on a
held-out world (seed + 2500).

Two stages. Fitted by teacher forcing alone, the model learns colour, background and
texture but never shape (held-out shape right 12%, chance). Its vision tower can see
shape: a linear readout of its merged visual tokens, kept in their places, learns it
quickly; what is slow is learning it through the language model. So the vision tower
first fits `AttributeHeads` (the picture's colour, texture, shape and background, read
linearly off its flattened visual tokens), then the whole model fits the descriptions
(loss on the assistant tokens only) with that attribute loss kept on beside. The labels
are the attributes the descriptions already state. tiny-clip is no warm start for this:
its image embedding carries no shape either (a linear probe reads shape 16% right).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from mmrag.config import TranslatorConfig
from mmrag.data.question_kinds import question_texts
from mmrag.data.render import render_entity
from mmrag.data.synth import RELATIONS, make_world
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import CAPTIONER_WORDING
from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES, Entity
from mmrag.model_refs import resolve
from mmrag.models.lvlm import fill_prompt, generate, load_lvlm, response_token_ids, sequence_logprobs
from mmrag.zoo.fitting import fit_report, run_fit

FIT_ENTITIES = 1000
HELDOUT_ENTITIES = 40
WORLD_SEED_OFFSET = 2000
HELDOUT_SEED_OFFSET = 2500
STEPS = 800
BATCH_SIZE = 24
LEARNING_RATE = 2e-3
VISION_STEPS = 600
VISION_BATCH_SIZE = 32
VISION_LEARNING_RATE = 3e-3
ATTRIBUTE_LOSS_WEIGHT = 1.0
"""Weight of the attribute loss beside the description loss in the second stage."""
V2_FIT_ENTITIES = 300
V2_HELDOUT_ENTITIES = 40
V2_WORLD_SEED_OFFSET = 2200
V2_HELDOUT_SEED_OFFSET = 2700
V2_VIEWS_PER_ENTITY = 3
V2_STEPS = 120
V2_LEARNING_RATE = 1e-3


@dataclass
class CaptionExample:
    image: Image.Image
    description: str
    """"{colour} {texture} {shape} on {background}"."""
    attributes: dict[str, str]
    """colour / texture / shape / background -> the entity's word."""


def caption_target_v2(example: CaptionExample, question: str, rng: random.Random) -> str:
    """The v2 captioner's own style (`CAPTIONER_WORDING`), a quarter of the time followed by the question."""
    description = rng.choice(CAPTIONER_WORDING.descriptions).format(**example.attributes)
    return f"{description} {question.lower().rstrip('?.')}" if rng.random() < 0.25 else description


def caption_target(example: CaptionExample, question: str, rng: random.Random) -> str:
    """The assistant text: 50% bare description, 25% "a picture of a ...", 25% description + question."""
    draw = rng.random()
    if draw < 0.5:
        return example.description
    if draw < 0.75:
        a = example.attributes
        return f"a picture of a {a['colour']} {a['texture']} {a['shape']}"
    return f"{example.description} {question.lower().rstrip('?')}"


def attribute_vocabularies() -> dict[str, tuple[str, ...]]:
    """Attribute kind -> the words it may take, as the synthetic world draws them."""
    return {"colour": COLOURS, "texture": TEXTURES, "shape": SHAPES, "background": BACKGROUNDS}


def load_examples(num_entities: int, seed: int) -> list[CaptionExample]:
    """Every image of a synthetic world (canonical KB pictures and augmented question views)."""
    world = make_world(num_entities=num_entities, seed=seed)
    by_id = {entity.entity_id: entity for entity in world.entities}
    pictures = [(doc.image, by_id[doc.entity_id]) for doc in world.docs if doc.image is not None]
    pictures += [(q.image, by_id[q.entity_id]) for split in world.questions.values() for q in split]
    return [_example(image, entity) for image, entity in pictures]


def _example(image: Image.Image, entity: Entity) -> CaptionExample:
    return CaptionExample(image, entity.description, {
        "colour": entity.colour, "texture": entity.texture, "shape": entity.shape, "background": entity.background,
    })


def load_examples_v2(num_entities: int, seed: int, views: int = V2_VIEWS_PER_ENTITY) -> list[CaptionExample]:
    """Canonical pictures and augmented views of a world-v2-like world of the captioner's own (no KB, no text)."""
    entities = draw_entities_v2(num_entities, random.Random(seed))
    view_rng = np.random.default_rng(seed)
    return [_example(render_entity(entity, 64, view), entity)
            for entity in entities for view in [None, *[view_rng] * views]]


def question_templates() -> list[str]:
    return [t for relation in RELATIONS.values() for t in relation.question_templates]


def translator_prompt(question: str) -> str:
    return fill_prompt(TranslatorConfig().prompt_template, "translator.prompt_template", question=question)


def image_features(model, processor, images: list[Image.Image]) -> torch.Tensor:
    """[B, tokens x width]: each image's merged visual tokens (what the language model reads), flattened in order."""
    pixels = processor.image_processor(images=images, return_tensors="pt")
    tokens = model.get_image_features(pixels["pixel_values"], pixels["image_grid_thw"]).pooler_output
    return torch.stack([image_tokens.flatten() for image_tokens in tokens])


@contextmanager
def visual_tokens_read(model) -> Iterator[list[torch.Tensor]]:
    """Inside the block, each forward pass of `model` over images appends what `image_features` would return for
    them ([B, tokens x width]), taken from the pass itself: the attribute loss reads the visual tokens the language
    model read, rather than running the vision tower a second time (a third of a description step)."""
    passes: list[torch.Tensor] = []

    def keep(visual, args, kwargs, output) -> None:
        sizes = (kwargs["grid_thw"].prod(-1) // visual.spatial_merge_size ** 2).tolist()
        passes.append(torch.stack([image_tokens.flatten() for image_tokens in output.pooler_output.split(sizes)]))

    hook = model.model.visual.register_forward_hook(keep, with_kwargs=True)
    try:
        yield passes
    finally:
        hook.remove()


class AttributeHeads(nn.Module):
    """One linear classifier per attribute kind over an image's flattened visual tokens.

    Flattened, not pooled: a token has only to say what is at its place for a linear head to
    tell a star from a hexagon; pooling would ask the vision tower to work out the shape itself.
    """

    def __init__(self, feature_size: int):
        super().__init__()
        self.vocabularies = attribute_vocabularies()
        self.heads = nn.ModuleDict({kind: nn.Linear(feature_size, len(words))
                                    for kind, words in self.vocabularies.items()})

    def loss(self, features: torch.Tensor, examples: list[CaptionExample]) -> torch.Tensor:
        """Mean over attribute kinds of the cross-entropy of each example's attribute."""
        losses = [F.cross_entropy(head(features), torch.tensor([self.vocabularies[kind].index(e.attributes[kind])
                                                                for e in examples]))
                  for kind, head in self.heads.items()]
        return torch.stack(losses).mean()


def attribute_heads_for(model, processor, seed: int) -> AttributeHeads:
    """Heads sized for `model`'s visual tokens of one picture, initialised from `seed` (not from whatever this
    process drew before: the build would then depend on the models built before it in the same process)."""
    with torch.no_grad():
        feature_size = image_features(model, processor, [Image.new("RGB", (8, 8))]).shape[1]
    torch.manual_seed(seed)
    return AttributeHeads(feature_size)


def _one_cycle(optimizer: torch.optim.Optimizer, learning_rate: float, steps: int):
    return torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=learning_rate, total_steps=steps, pct_start=0.1)


def fit_vision(model, processor, heads: AttributeHeads, examples: list[CaptionExample], steps: int, seed: int,
               batch_size: int = VISION_BATCH_SIZE) -> list[float]:
    """Stage one: the vision tower (and `heads`) alone, on the attribute loss; returns per-step losses."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    parameters = [*model.model.visual.parameters(), *heads.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=VISION_LEARNING_RATE, weight_decay=0.01)

    def batch_loss() -> torch.Tensor:
        batch = rng.sample(examples, batch_size)
        return heads.loss(image_features(model, processor, [e.image for e in batch]), batch)

    return run_fit(model, optimizer, _one_cycle(optimizer, VISION_LEARNING_RATE, steps), steps,
                   "tiny-lvlm-captioner vision", batch_loss)


def fit(model, processor, examples: list[CaptionExample], steps: int, seed: int,
        batch_size: int = BATCH_SIZE, heads: AttributeHeads | None = None, target=caption_target,
        templates: list[str] | None = None, name: str = "tiny-lvlm-captioner", vision_frozen: bool = False,
        learning_rate: float = LEARNING_RATE) -> list[float]:
    """Stage two, teacher forcing: mean negative log-likelihood of the assistant tokens (and end of turn),
    plus `ATTRIBUTE_LOSS_WEIGHT` x the attribute loss of `heads` (new heads when None). `target` writes
    the assistant text, prompts ask `templates` (default: v1's question templates). With `vision_frozen`
    the vision tower keeps its weights and there is no attribute loss (a refit that only rewords)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    heads = attribute_heads_for(model, processor, seed) if heads is None else heads
    templates = question_templates() if templates is None else templates
    if vision_frozen:
        model.model.visual.requires_grad_(False)
        trainable = [p for p in model.parameters() if p.requires_grad]
    else:
        trainable = [*model.parameters(), *heads.parameters()]
    optimizer = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.01)

    def batch_loss() -> torch.Tensor:
        batch = rng.sample(examples, batch_size)
        questions = [rng.choice(templates) for _ in batch]
        targets = [target(example, q, rng) for example, q in zip(batch, questions)]
        token_count = sum(len(response_token_ids(processor, t)) for t in targets)
        images = [e.image for e in batch]
        with visual_tokens_read(model) as visual_tokens:
            logprobs = sequence_logprobs(model, processor, images, [translator_prompt(q) for q in questions], targets)
        if vision_frozen:
            return -logprobs.sum() / token_count
        attributes = heads.loss(visual_tokens[0], batch)
        return -logprobs.sum() / token_count + ATTRIBUTE_LOSS_WEIGHT * attributes

    losses = run_fit(model, optimizer, _one_cycle(optimizer, learning_rate, steps), steps, name, batch_loss)
    model.requires_grad_(True)
    return losses


def named_attribute(text: str, kind: str, attributes: dict[str, str]) -> bool:
    """The text names the image's `kind` attribute and no other word of that vocabulary (punctuation aside)."""
    return set(re.findall(r"[a-z]+", text.lower())) & set(attribute_vocabularies()[kind]) == {attributes[kind]}


def describes_correctly(text: str, attributes: dict[str, str]) -> bool:
    """All four attribute words present, and no other word of those vocabularies."""
    return all(named_attribute(text, kind, attributes) for kind in attribute_vocabularies())


def greedy_description_accuracy(model, processor, examples: list[CaptionExample], seed: int,
                                templates: list[str] | None = None) -> dict:
    """Fraction of greedy queries that name the image's colour, texture, shape and background, and of each alone."""
    rng = random.Random(seed)
    templates = question_templates() if templates is None else templates
    prompts = [translator_prompt(rng.choice(templates)) for _ in examples]
    texts: list[str] = []
    for start in range(0, len(examples), 16):
        chunk = examples[start:start + 16]
        texts += generate(model, processor, [e.image for e in chunk], prompts[start:start + 16],
                          max_new_tokens=16, do_sample=False)[0]
    correct = [describes_correctly(t, e.attributes) for t, e in zip(texts, examples)]
    per_attribute = {kind: round(float(np.mean([named_attribute(t, kind, e.attributes)
                                                for t, e in zip(texts, examples)])), 3)
                     for kind in attribute_vocabularies()}
    return {"heldout_greedy_description_accuracy": round(float(np.mean(correct)), 3),
            "heldout_attribute_accuracy": per_attribute, "heldout_images": len(examples),
            "heldout_samples": texts[:4]}


def build_tiny_lvlm_captioner(out_dir: Path, cache_dir: str, seed: int, steps: int = STEPS) -> dict:
    """Fit from `zoo:tiny-lvlm` (vision stage, then descriptions), save model + processor, return held-out figures."""
    model, processor = load_lvlm(resolve("zoo:tiny-lvlm", cache_dir, seed), cache_dir)
    started = time.perf_counter()
    examples = load_examples(FIT_ENTITIES, seed + WORLD_SEED_OFFSET)
    heldout = load_examples(HELDOUT_ENTITIES, seed + HELDOUT_SEED_OFFSET)
    heads = attribute_heads_for(model, processor, seed)
    vision_losses = fit_vision(model, processor, heads, examples, VISION_STEPS, seed)
    losses = fit(model, processor, examples, steps, seed, heads=heads)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {
        **greedy_description_accuracy(model, processor, heldout, seed),
        "vision_steps": VISION_STEPS,
        "vision_final_loss": round(float(np.mean(vision_losses[-10:])), 3),
        **fit_report(losses, steps, started, FIT_ENTITIES, HELDOUT_ENTITIES),
    }


def build_tiny_lvlm_captioner_v2(out_dir: Path, cache_dir: str, seed: int, steps: int = V2_STEPS) -> dict:
    """`zoo:tiny-lvlm-captioner` refitted to describe pictures in its own style (`CAPTIONER_WORDING`), on a
    world of its own, prompted with world v2's questions; no text it sees shares a template with the v2 KB.
    Its vision tower is kept frozen: it already reads the attributes, only the wording is new."""
    model, processor = load_lvlm(resolve("zoo:tiny-lvlm-captioner", cache_dir, seed), cache_dir)
    started = time.perf_counter()
    examples = load_examples_v2(V2_FIT_ENTITIES, seed + V2_WORLD_SEED_OFFSET)
    heldout = load_examples_v2(V2_HELDOUT_ENTITIES, seed + V2_HELDOUT_SEED_OFFSET, views=2)
    templates = question_texts()
    losses = fit(model, processor, examples, steps, seed, target=caption_target_v2, templates=templates,
                 name="tiny-lvlm-captioner-v2", vision_frozen=True, learning_rate=V2_LEARNING_RATE)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {
        **greedy_description_accuracy(model, processor, heldout, seed, templates),
        "warm_start": "zoo:tiny-lvlm-captioner",
        **fit_report(losses, steps, started, V2_FIT_ENTITIES, V2_HELDOUT_ENTITIES),
    }
