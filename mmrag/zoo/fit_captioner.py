"""`zoo:tiny-lvlm-captioner`: tiny-lvlm taught to describe an image as a search query.

This is the query translator's starting point: a pretrained-but-untuned query writer.
It sees the translator's prompt ("{question} Search query:") and answers with a generic
description of the image, drawn from a mix of forms so that its samples are diverse
enough to explore. It never sees entity names, KB passages or rewards; reward
backpropagation is what later teaches it which queries retrieve well. Fitted by teacher
forcing (loss on the assistant tokens only) on a synthetic world of its own
(seed + 2000); description accuracy is measured on a held-out world (seed + 2500).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mmrag.config import TranslatorConfig
from mmrag.data.synth import RELATIONS, make_world
from mmrag.data.world import BACKGROUNDS, COLOURS, SHAPES, TEXTURES
from mmrag.model_refs import resolve
from mmrag.models.lvlm import fill_prompt, generate, load_lvlm, response_token_ids, sequence_logprobs
from mmrag.zoo.fitting import run_fit

FIT_ENTITIES = 1000
HELDOUT_ENTITIES = 40
WORLD_SEED_OFFSET = 2000
HELDOUT_SEED_OFFSET = 2500
STEPS = 800
BATCH_SIZE = 24
LEARNING_RATE = 2e-3
EVAL_IMAGES = 80


@dataclass
class CaptionExample:
    image: Image.Image
    description: str
    """"{colour} {texture} {shape} on {background}"."""
    attributes: dict[str, str]
    """colour / texture / shape / background -> the entity's word."""


def caption_target(example: CaptionExample, question: str, rng: random.Random) -> str:
    """The assistant text: 50% bare description, 25% "a picture of a ...", 25% description + question."""
    draw = rng.random()
    if draw < 0.5:
        return example.description
    if draw < 0.75:
        a = example.attributes
        return f"a picture of a {a['colour']} {a['texture']} {a['shape']}"
    return f"{example.description} {question.lower().rstrip('?')}"


def load_examples(num_entities: int, seed: int) -> list[CaptionExample]:
    """Every image of a synthetic world (canonical KB pictures and augmented question views)."""
    world = make_world(num_entities=num_entities, seed=seed)
    by_id = {entity.entity_id: entity for entity in world.entities}
    pictures = [(doc.image, by_id[doc.entity_id]) for doc in world.docs if doc.image is not None]
    pictures += [(q.image, by_id[q.entity_id]) for split in world.questions.values() for q in split]
    return [
        CaptionExample(image, entity.description, {
            "colour": entity.colour, "texture": entity.texture, "shape": entity.shape, "background": entity.background,
        })
        for image, entity in pictures
    ]


def question_templates() -> list[str]:
    return [t for relation in RELATIONS.values() for t in relation.question_templates]


def translator_prompt(question: str) -> str:
    return fill_prompt(TranslatorConfig().prompt_template, "translator.prompt_template", question=question)


def fit(model, processor, examples: list[CaptionExample], steps: int, seed: int,
        batch_size: int = BATCH_SIZE) -> list[float]:
    """Teacher forcing: mean negative log-likelihood of the assistant tokens (and end of turn)."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    templates = question_templates()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LEARNING_RATE, total_steps=steps, pct_start=0.1)

    def batch_loss() -> torch.Tensor:
        batch = rng.sample(examples, batch_size)
        questions = [rng.choice(templates) for _ in batch]
        targets = [caption_target(example, q, rng) for example, q in zip(batch, questions)]
        token_count = sum(len(response_token_ids(processor, t)) for t in targets)
        logprobs = sequence_logprobs(model, processor, [e.image for e in batch],
                                     [translator_prompt(q) for q in questions], targets)
        return -logprobs.sum() / token_count

    return run_fit(model, optimizer, schedule, steps, "tiny-lvlm-captioner", batch_loss)


def describes_correctly(text: str, attributes: dict[str, str]) -> bool:
    """All four attribute words present, and no other word of those vocabularies."""
    words = set(text.lower().split())
    vocabularies = {"colour": COLOURS, "texture": TEXTURES, "shape": SHAPES, "background": BACKGROUNDS}
    return all(words & set(vocabulary) == {attributes[kind]} for kind, vocabulary in vocabularies.items())


def greedy_description_accuracy(model, processor, examples: list[CaptionExample], seed: int) -> dict:
    """Fraction of greedy queries that name the image's colour, texture, shape and background."""
    rng = random.Random(seed)
    templates = question_templates()
    prompts = [translator_prompt(rng.choice(templates)) for _ in examples]
    texts: list[str] = []
    for start in range(0, len(examples), 16):
        chunk = examples[start:start + 16]
        texts += generate(model, processor, [e.image for e in chunk], prompts[start:start + 16],
                          max_new_tokens=16, do_sample=False)[0]
    correct = [describes_correctly(t, e.attributes) for t, e in zip(texts, examples)]
    return {"heldout_greedy_description_accuracy": round(float(np.mean(correct)), 3), "heldout_samples": texts[:4]}


def build_tiny_lvlm_captioner(out_dir: Path, cache_dir: str, seed: int, steps: int = STEPS) -> dict:
    """Fit from `zoo:tiny-lvlm`, save model + processor, return held-out figures for zoo.json."""
    model, processor = load_lvlm(resolve("zoo:tiny-lvlm", cache_dir, seed), cache_dir)
    started = time.perf_counter()
    examples = load_examples(FIT_ENTITIES, seed + WORLD_SEED_OFFSET)
    heldout = random.Random(seed).sample(load_examples(HELDOUT_ENTITIES, seed + HELDOUT_SEED_OFFSET), EVAL_IMAGES)
    losses = fit(model, processor, examples, steps, seed)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {
        **greedy_description_accuracy(model, processor, heldout, seed),
        "steps": steps,
        "first_loss": round(losses[0], 3),
        "final_loss": round(float(np.mean(losses[-10:])), 3),
        "fit_seconds": round(time.perf_counter() - started, 1),
        "train_entities": FIT_ENTITIES,
    }
