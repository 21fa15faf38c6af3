"""`zoo:tiny-clip`: tiny-clip-init fitted contrastively so the frozen retriever is competent.

The retriever embeds KB docs and translated queries with this model, so it has to
(1) match an entity's picture with its description, and (2) match a query made of a
description plus an aspect ("red striped circle on navy when was this built") with that
entity's passage for that aspect. Both are taught with the symmetric CLIP loss on a
synthetic world of its own (seed + 1000), never the dataset's entities, and measured on
a held-out world (seed + 1500). Batches hold whole near-duplicate families and all four
relations of each entity, so texture and aspect are the in-batch hard negatives.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open_clip
import torch
import torch.nn.functional as F

from mmrag.data.question_kinds import ONE_FACT_TEMPLATES
from mmrag.data.render import render_entity
from mmrag.data.synth import RELATIONS, make_world
from mmrag.data.synth_v2 import draw_entities_v2
from mmrag.data.wording import GENERIC_WORDING
from mmrag.model_refs import resolve
from mmrag.models.clip_architectures import TINY_CLIP_MODEL_NAME
from mmrag.zoo.fitting import fit_report, run_fit
from mmrag.zoo.tiny_clip import CHECKPOINT_FILE, create_tiny_clip, save_checkpoint

FIT_ENTITIES = 200
HELDOUT_ENTITIES = 100
WORLD_SEED_OFFSET = 1000
HELDOUT_SEED_OFFSET = 1500
STEPS = 300
FAMILIES_PER_BATCH = 12
LEARNING_RATE = 1e-3
WARMUP_STEPS = 20
V2_FIT_ENTITIES = 200
V2_HELDOUT_ENTITIES = 100
V2_WORLD_SEED_OFFSET = 1200
V2_HELDOUT_SEED_OFFSET = 1700
V2_VIEWS_PER_ENTITY = 3
V2_STEPS = 60


@dataclass
class ContrastiveWorld:
    """One synthetic world as tensors and texts the CLIP loss pairs up."""

    images: torch.Tensor
    """[views, 3, H, W]: preprocessed augmented views (the question images)."""
    image_entity: list[int]
    """Entity index of each view."""
    captions: list[str]
    """Per entity: "a {description}"."""
    descriptions: list[str]
    families: list[list[int]]
    """Entity indices of each near-duplicate family."""
    passages: dict[tuple[int, str], str]
    """(entity index, relation name) -> that entity's passage text."""
    other_docs: list[str]
    """Texts of the remaining KB docs (captions, distractors): extra candidates at evaluation."""


def aspect_phrases(question_templates: dict[str, tuple[str, ...]] | None = None) -> dict[str, list[str]]:
    """Relation -> phrases a query may append to a description to ask for that aspect (from v1's question
    templates, or from `question_templates`: relation -> its questions)."""
    if question_templates is None:
        question_templates = {name: relation.question_templates for name, relation in RELATIONS.items()}
    return {
        name: [t.lower().rstrip("?") for t in question_templates[name]] + [" ".join(relation.keywords), name]
        for name, relation in RELATIONS.items()
    }


def load_world(num_entities: int, seed: int, preprocess) -> ContrastiveWorld:
    """Render a synthetic world; its question images are the augmented views."""
    world = make_world(num_entities=num_entities, seed=seed)
    index_of = {entity.entity_id: i for i, entity in enumerate(world.entities)}
    relation_of = {t: name for name, relation in RELATIONS.items() for t in relation.question_templates}
    doc_text = {doc.doc_id: doc.text for doc in world.docs}
    views = [q for split in world.questions.values() for q in split]
    families: dict[int, list[int]] = {}
    for i, entity in enumerate(world.entities):
        families.setdefault(entity.family, []).append(i)
    # A question's gold doc is its entity's passage for the question's relation.
    passages = {(index_of[q.entity_id], relation_of[q.question]): doc_text[q.gold_doc_ids[0]] for q in views}
    passage_doc_ids = {doc_id for q in views for doc_id in q.gold_doc_ids}
    return ContrastiveWorld(
        images=torch.stack([preprocess(q.image) for q in views]),
        image_entity=[index_of[q.entity_id] for q in views],
        captions=[f"a {entity.description}" for entity in world.entities],
        descriptions=[entity.description for entity in world.entities],
        families=list(families.values()),
        passages=passages,
        other_docs=[d.text for d in world.docs if d.doc_id not in passage_doc_ids],
    )


def load_generic_world(num_entities: int, seed: int, preprocess) -> ContrastiveWorld:
    """A world of tiny-clip-v2's own: its entities' views, and captions and passages in `GENERIC_WORDING`."""
    rng = random.Random(seed)
    entities = draw_entities_v2(num_entities, rng)
    view_rng = np.random.default_rng(seed)
    images, image_entity = [], []
    for index, entity in enumerate(entities):
        for _ in range(V2_VIEWS_PER_ENTITY):
            images.append(preprocess(render_entity(entity, 64, view_rng)))
            image_entity.append(index)
    families: dict[int, list[int]] = {}
    for index, entity in enumerate(entities):
        families.setdefault(entity.family, []).append(index)
    return ContrastiveWorld(
        images=torch.stack(images),
        image_entity=image_entity,
        captions=[GENERIC_WORDING.caption(entity, rng) for entity in entities],
        descriptions=[GENERIC_WORDING.describe(entity, rng) for entity in entities],
        families=list(families.values()),
        passages={(index, relation): GENERIC_WORDING.fact(entity, relation, rng)
                  for index, entity in enumerate(entities) for relation in RELATIONS},
        other_docs=[],
    )


def clip_loss(a: torch.Tensor, b: torch.Tensor, logit_scale: torch.Tensor) -> torch.Tensor:
    """Symmetric InfoNCE: row i of `a` matches row i of `b`, every other row is a negative."""
    logits = logit_scale.exp() * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
    targets = torch.arange(len(a))
    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2


def encode_texts(model, tokens: torch.Tensor) -> torch.Tensor:
    """Unit text features of `tokens` (rows of `model.encode_text`'s input), computed over the columns up to the
    batch's longest text only: the text tower's attention is causal and it pools at the end-of-text token, so the
    padding after a text changes no feature, and the zoo's texts are mostly shorter than the context."""
    length = int(tokens.ne(0).sum(dim=1).max())
    trimmed = {"positional_embedding": model.positional_embedding[:length],
               "attn_mask": model.attn_mask[:length, :length]}
    _, text_features, _ = torch.func.functional_call(model, trimmed, (None, tokens[:, :length]))
    return text_features


class ContrastiveBatches:
    """Draws (image, caption) and (description + aspect, passage) pairs, whole families at a time."""

    def __init__(self, world: ContrastiveWorld, rng: random.Random, families_per_batch: int,
                 phrases: dict[str, list[str]] | None = None) -> None:
        self.world = world
        self.rng = rng
        self.families_per_batch = families_per_batch
        self.phrases = aspect_phrases() if phrases is None else phrases
        self.views_of: dict[int, list[int]] = {}
        for view, entity in enumerate(world.image_entity):
            self.views_of.setdefault(entity, []).append(view)

    def draw(self) -> tuple[torch.Tensor, list[str], list[str], list[str]]:
        families = self.rng.sample(self.world.families, self.families_per_batch)
        entities = [e for family in families for e in family]
        views = [self.rng.choice(self.views_of[e]) for e in entities]
        queries, passages = [], []
        for entity in entities:
            for relation, phrases in self.phrases.items():
                queries.append(f"{self.world.descriptions[entity]} {self.rng.choice(phrases)}")
                passages.append(self.world.passages[(entity, relation)])
        return self.world.images[views], [self.world.captions[e] for e in entities], queries, passages


def fit(model, tokenizer, world: ContrastiveWorld, steps: int, seed: int,
        families_per_batch: int = FAMILIES_PER_BATCH, phrases: dict[str, list[str]] | None = None,
        name: str = "tiny-clip") -> list[float]:
    """AdamW with warmup + cosine decay on the two contrastive losses; returns per-step losses."""
    torch.manual_seed(seed)
    batches = ContrastiveBatches(world, random.Random(seed), families_per_batch, phrases)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.05)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        (step + 1) / WARMUP_STEPS, 0.5 * (1 + math.cos(math.pi * step / steps))))

    def batch_loss() -> torch.Tensor:
        images, captions, queries, passages = batches.draw()
        image_loss = clip_loss(model.encode_image(images), encode_texts(model, tokenizer(captions)), model.logit_scale)
        text_loss = clip_loss(encode_texts(model, tokenizer(queries)), encode_texts(model, tokenizer(passages)),
                              model.logit_scale)
        return image_loss + text_loss

    return run_fit(model, optimizer, schedule, steps, name, batch_loss)


@torch.no_grad()
def _encode_texts(model, tokenizer, texts: list[str]) -> torch.Tensor:
    return torch.cat([encode_texts(model, tokenizer(texts[i:i + 256])) for i in range(0, len(texts), 256)])


@torch.no_grad()
def evaluate(model, tokenizer, world: ContrastiveWorld, phrases: dict[str, list[str]] | None = None
             ) -> dict[str, float]:
    """Top-1 retrieval accuracies on `world`: image -> own caption, description + aspect -> own passage."""
    model.eval()
    images = F.normalize(model.encode_image(world.images), dim=-1)
    captions = _encode_texts(model, tokenizer, world.captions)
    predicted = (images @ captions.T).argmax(dim=1).numpy()
    image_top1 = float(np.mean(predicted == np.array(world.image_entity)))
    # Queries phrase the aspect as the question templates do (the captioner's form);
    # candidates are every text doc of the KB: all passages, captions and distractors.
    keys = list(world.passages)
    candidates = _encode_texts(model, tokenizer, [world.passages[k] for k in keys] + world.other_docs)
    phrases = aspect_phrases() if phrases is None else phrases
    queries = [f"{world.descriptions[e]} {phrase}" for e, relation in keys for phrase in phrases[relation][:2]]
    targets = np.repeat(np.arange(len(keys)), 2)
    predicted = (_encode_texts(model, tokenizer, queries) @ candidates.T).argmax(dim=1).numpy()
    return {
        "heldout_image_to_caption_top1": round(image_top1, 3),
        "heldout_query_to_passage_top1": round(float(np.mean(predicted == targets)), 3),
    }


def build_tiny_clip(out_dir: Path, cache_dir: str, seed: int, steps: int = STEPS) -> dict:
    """Fit from `zoo:tiny-clip-init`, save the checkpoint, return held-out figures for zoo.json."""
    model, preprocess = create_tiny_clip(resolve("zoo:tiny-clip-init", cache_dir, seed))
    tokenizer = open_clip.get_tokenizer(TINY_CLIP_MODEL_NAME)
    started = time.perf_counter()
    train_world = load_world(FIT_ENTITIES, seed + WORLD_SEED_OFFSET, preprocess)
    heldout_world = load_world(HELDOUT_ENTITIES, seed + HELDOUT_SEED_OFFSET, preprocess)
    before = evaluate(model, tokenizer, heldout_world)
    losses = fit(model, tokenizer, train_world, steps, seed)
    save_checkpoint(model, out_dir / CHECKPOINT_FILE)
    return {
        **evaluate(model, tokenizer, heldout_world),
        "heldout_before_fit": before,
        **fit_report(losses, steps, started, FIT_ENTITIES, HELDOUT_ENTITIES),
    }


def build_tiny_clip_v2(out_dir: Path, cache_dir: str, seed: int, steps: int = V2_STEPS) -> dict:
    """`zoo:tiny-clip` refitted on generic caption-passage pairs (`GENERIC_WORDING`, world v2's vocabulary and
    synonyms, none of its KB templates), queries asking world v2's one-fact questions; held-out figures."""
    model, preprocess = create_tiny_clip(resolve("zoo:tiny-clip", cache_dir, seed))
    tokenizer = open_clip.get_tokenizer(TINY_CLIP_MODEL_NAME)
    started = time.perf_counter()
    phrases = aspect_phrases(ONE_FACT_TEMPLATES)
    train_world = load_generic_world(V2_FIT_ENTITIES, seed + V2_WORLD_SEED_OFFSET, preprocess)
    heldout_world = load_generic_world(V2_HELDOUT_ENTITIES, seed + V2_HELDOUT_SEED_OFFSET, preprocess)
    before = evaluate(model, tokenizer, heldout_world, phrases)
    losses = fit(model, tokenizer, train_world, steps, seed, phrases=phrases, name="tiny-clip-v2")
    save_checkpoint(model, out_dir / CHECKPOINT_FILE)
    return {
        **evaluate(model, tokenizer, heldout_world, phrases),
        "heldout_before_fit": before,
        "warm_start": "zoo:tiny-clip",
        **fit_report(losses, steps, started, V2_FIT_ENTITIES, V2_HELDOUT_ENTITIES),
    }
