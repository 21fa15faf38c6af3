"""The synthetic KB-VQA worlds -> Parquet dataset; world v1 (this module's `make_world`) in full.

`generate_dataset(world=...)` writes world v2 (`synth_v2`, the default: varying knowledge
demand, a KB in its own wording), world v3 (`synth_v3`: knowledge demand that the question's
wording does not reveal, misleading passages, lookalikes; its sweep options in `WorldV3Options`)
or world v1, kept byte-identical for the v1 figures.
World v1 is the last stage of the synthetic data flow (world.py draws entities, render.py their images).
Each entity gets an image+caption doc, one passage per relation, and one distractor passage
without any fact; each (entity, relation) gets two questions with augmented images whose
only gold evidence is that relation's passage. The answer is never in the question or the
image, so the generator is right only when retrieval brings the right passage, and near-
duplicate families (same look but the texture) make that hard.
Everything derives from one `random.Random(seed)`: the same seed gives the same dataset.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np

from mmrag.data.dataset import KINDS, SCHEMA_VERSION, SPLITS, Doc, Question, write_kb, write_questions
from mmrag.data.distractors import add_distractors
from mmrag.data.render import render_entity
from mmrag.data.synth_v2 import make_world_v2
from mmrag.data.synth_v3 import WorldV3Options, make_world_v3
from mmrag.data.world import RELATIONS, Entity, append_entity_doc, Relation, World, build_world, draw_entities

__all__ = ["RELATIONS", "Relation", "World", "WORLDS", "make_world", "generate_dataset"]

WORLDS = ("v1", "v2", "v3")
QUESTIONS_PER_RELATION = 2
DISTRACTOR_TEMPLATES = (
    "{name}, the {description}, is often visited in spring.",
    "{name}, the {description}, appears on many postcards.",
    "{name}, the {description}, is a favourite subject of painters.",
    "{name}, the {description}, is lit up at night during festivals.",
)


def make_world(num_entities: int, seed: int, image_size: int = 64, progress: bool = False) -> World:
    """Entities, KB docs and per-split questions, rendered at `image_size` pixels."""
    return build_world(num_entities, seed, image_size, draw_entities, _add_entity_docs, _entity_questions, progress)


def _add_entity_docs(entity: Entity, image_size: int, rng: random.Random, docs: list[Doc]) -> dict[str, str]:
    """Append the entity's docs (caption, one passage per relation, distractor); returns relation -> doc_id."""

    def add(text: str, image=None) -> str:
        return append_entity_doc(docs, entity, text, image)

    fields = {"name": entity.name, "description": entity.description}
    add(f"{entity.name}: a {entity.description}.", render_entity(entity, image_size))
    passage_ids = {
        relation.name: add(relation.passage_template.format(value=entity.facts[relation.name], **fields))
        for relation in RELATIONS.values()
    }
    add(rng.choice(DISTRACTOR_TEMPLATES).format(**fields))
    return passage_ids


def _entity_questions(
    entity: Entity, passage_ids: dict[str, str], image_size: int, rng: random.Random
) -> list[Question]:
    questions = []
    for relation in RELATIONS.values():
        templates = rng.sample(relation.question_templates, QUESTIONS_PER_RELATION)
        for index, template in enumerate(templates):
            view_rng = np.random.default_rng(rng.getrandbits(64))
            questions.append(Question(
                id=f"{entity.entity_id}-{relation.name}-{index}",
                image_source=render_entity(entity, image_size, view_rng),
                question=template,
                answers=[entity.facts[relation.name]],
                entity_id=entity.entity_id,
                gold_doc_ids=[passage_ids[relation.name]],
            ))
    return questions


def generate_dataset(out_dir: str | Path, num_entities: int, seed: int, image_size: int = 64,
                     kb_docs: int = 0, world: str = "v2", v3_options: WorldV3Options | None = None) -> dict[str, int]:
    """Write kb.parquet, questions_{train,val,test}.parquet and dataset.json of `world`; returns the counts.

    `kb_docs` text distractor passages are appended to the KB (`mmrag.data.distractors`); `v3_options` (world v3
    only) its family sizes and kind mix.
    """
    if world not in WORLDS:
        raise ValueError(f"data.world: expected one of {', '.join(WORLDS)}, got {world!r}")
    if v3_options is not None and world != "v3":
        raise ValueError(f"family_sizes, kind_mix: only world v3 takes them, got world {world!r}")
    if world == "v3":
        v3_options = v3_options or WorldV3Options()
        drawn = make_world_v3(num_entities, seed, image_size, v3_options, progress=True)
    else:
        drawn = (make_world if world == "v1" else make_world_v2)(num_entities, seed, image_size, progress=True)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_kb(drawn.docs, out)
    counts = dataset_counts(drawn)
    if kb_docs:
        add_distractors(out, kb_docs, seed, progress=True)
        counts["kb_docs"] += kb_docs
        counts["kb_distractor_docs"] = kb_docs
    for split in SPLITS:
        write_questions(drawn.questions[split], out, split)
    manifest = {"schema_version": SCHEMA_VERSION, "generator": "mmrag.data.synth", "seed": seed,
                "image_size": image_size, "counts": counts}
    if world != "v1":  # v1's manifest stays as it always was
        manifest = {**manifest, "generator": f"mmrag.data.synth_{world}", "world": world}
    if v3_options is not None:
        manifest = {**manifest, "family_sizes": list(v3_options.family_sizes), "kind_mix": list(v3_options.kind_mix)}
    (out / "dataset.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return counts


def dataset_counts(world: World) -> dict[str, int]:
    counts = {
        "entities": len(world.entities),
        "families": len({entity.family for entity in world.entities}),
        "kb_docs": len(world.docs),
        "kb_docs_with_image": sum(doc.image is not None for doc in world.docs),
    }
    for split in SPLITS:
        counts[f"entities_{split}"] = sum(s == split for s in world.split_of.values())
        counts[f"questions_{split}"] = len(world.questions[split])
        for kind in KINDS:
            count = sum(q.kind == kind for q in world.questions[split])
            if count:
                counts[f"questions_{split}_{kind}"] = count
    return counts
