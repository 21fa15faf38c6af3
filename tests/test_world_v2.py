"""World v2's invariants: kinds in proportion, entity-disjoint splits, gold evidence that states the answer,
a KB whose templates no zoo fitting text uses, the kind column on disk, and world v1 still byte for byte."""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from mmrag.data.dataset import KINDS, ONE_FACT, SPLITS, TWO_FACT, UNKNOWN_KIND, VISUAL, DatasetError, load_kb, load_questions
from mmrag.data.question_kinds import demand_of, question_texts
from mmrag.data.synth import generate_dataset, make_world
from mmrag.data.synth_v2 import make_world_v2
from mmrag.data.wording import ATTRIBUTES, KB_WORDING
from mmrag.data.world import RELATIONS
from mmrag.zoo.fit_captioner import caption_target, caption_target_v2, load_examples_v2, question_templates
from mmrag.zoo.fit_clip import aspect_phrases, load_generic_world
from mmrag.zoo.tiny_lvlm import tokenizer_corpus


@pytest.fixture(scope="module")
def world():
    return make_world_v2(24, seed=0, image_size=16)


def test_every_entity_asks_three_visual_five_one_fact_and_two_two_fact_questions(world):
    for split in SPLITS:
        per_entity = defaultdict(Counter)
        for question in world.questions[split]:
            per_entity[question.entity_id][question.kind] += 1
        assert per_entity, split
        assert all(counts == {VISUAL: 3, ONE_FACT: 5, TWO_FACT: 2} for counts in per_entity.values())


def test_no_entity_or_family_is_in_two_splits(world):
    split_of_entity = {}
    for split in SPLITS:
        for question in world.questions[split]:
            assert split_of_entity.setdefault(question.entity_id, split) == split
    family_splits = defaultdict(set)
    for entity in world.entities:
        family_splits[entity.family].add(world.split_of[entity.entity_id])
    assert all(len(splits) == 1 for splits in family_splits.values())
    assert all(3 <= sum(e.family == f for e in world.entities) <= 4 for f in family_splits)


def test_gold_evidence_states_the_answer_in_the_kbs_own_wording(world):
    kb = {doc.doc_id: doc.text for doc in world.docs}
    entities = {entity.entity_id: entity for entity in world.entities}
    for question in (q for split in SPLITS for q in world.questions[split]):
        demand = demand_of(question.question)
        assert demand.kind == question.kind, question.question
        (answer,) = question.answers
        if question.kind == VISUAL:
            assert question.gold_doc_ids == [] and answer == getattr(entities[question.entity_id], demand.attribute)
            continue
        values = [KB_WORDING.parse_fact(relation, kb[doc_id])
                  for relation, doc_id in zip(demand.relations, question.gold_doc_ids, strict=True)]
        assert " and ".join(values) == answer
        assert not any(value.lower() in question.question.lower() for value in values)


def test_kb_docs_describe_their_entity_and_use_several_paraphrases(world):
    entities = {entity.entity_id: entity for entity in world.entities}
    used = Counter()
    for doc in world.docs:
        stated = KB_WORDING.parse_description(doc.text)
        assert stated == {a: getattr(entities[doc.entity_id], a) for a in ATTRIBUTES}, doc.text
        for relation in KB_WORDING.facts:
            if KB_WORDING.parse_fact(relation, doc.text) is not None:
                used[relation] += 1
    assert used == {relation: len(world.entities) for relation in RELATIONS}
    starts = {doc.text.split(" ")[0] for doc in world.docs}
    assert {"Construction", "The", "In", "At"} <= starts


def zoo_fitting_texts() -> list[str]:
    """Every text a zoo model is fitted on, drawn as the builders draw them (small worlds, same templates)."""
    rng = random.Random(0)
    texts = tokenizer_corpus(seed=3, num_entities=20)  # tiny-lvlm's tokenizer: world v1's texts and the prompts
    texts += [caption_target(e, rng.choice(question_templates()), rng) for e in _v1_caption_examples() for _ in range(4)]
    texts += [f"{d} {p}" for d in ("red plain circle on grey",) for ps in aspect_phrases().values() for p in ps]
    examples = load_examples_v2(12, seed=5, views=0)  # tiny-lvlm-captioner-v2
    texts += [caption_target_v2(e, q, rng) for e in examples for q in question_texts()]
    generic = load_generic_world(12, seed=6, preprocess=lambda image: torch.zeros(1))  # tiny-clip-v2
    texts += generic.captions + list(generic.passages.values())
    texts += [f"{d} {p}" for d in generic.descriptions for ps in aspect_phrases(None).values() for p in ps]
    return texts


def _v1_caption_examples():
    from mmrag.zoo.fit_captioner import _example

    return [_example(None, entity) for entity in make_world(12, seed=2, image_size=16).entities]  # no image needed


def test_no_zoo_fitting_text_uses_any_kb_template():
    texts = zoo_fitting_texts()
    assert len(texts) > 1500
    fragments = set()
    for template in KB_WORDING.templates():
        for part in re.split(r"\{\w+\}", template):
            words = re.findall(r"[A-Za-z-]+", part)
            if len(words) >= 2:
                fragments.add(" ".join(words).lower())
    assert len(fragments) >= 20
    flat = [" ".join(re.findall(r"[A-Za-z-]+", text)).lower() for text in texts]
    for fragment in fragments:
        hits = [text for text in flat if re.search(rf"\b{re.escape(fragment)}\b", text)]
        assert not hits, f"KB fragment {fragment!r} in zoo text {hits[0]!r}"
    for text in texts:
        assert not KB_WORDING.parse_description(text), text
        assert not any(KB_WORDING.parse_fact(relation, text) for relation in RELATIONS), text


def test_kind_column_round_trips_and_v1_files_keep_their_schema(tmp_path, synth_dir):
    counts = generate_dataset(tmp_path / "v2", num_entities=12, seed=0, image_size=32)
    assert counts["questions_test"] == 10 * counts["entities_test"]
    table = pq.read_table(tmp_path / "v2" / "questions_test.parquet")
    assert set(table.column("kind").to_pylist()) == set(KINDS)
    assert {q.kind for q in load_questions(tmp_path / "v2", "test")} == set(KINDS)
    assert json.loads((tmp_path / "v2" / "dataset.json").read_text())["world"] == "v2"
    assert "kind" not in pq.read_schema(Path(synth_dir) / "questions_val.parquet").names
    assert {q.kind for q in load_questions(synth_dir, "val")} == {UNKNOWN_KIND}
    bad = table.set_column(table.schema.get_field_index("kind"), "kind", [["two-facts"] * table.num_rows])
    pq.write_table(bad, tmp_path / "v2" / "questions_test.parquet")
    with pytest.raises(DatasetError, match=r"row 0 column 'kind': expected one of visual, one-fact, two-fact"):
        load_questions(tmp_path / "v2", "test")


V1_CONTENT_SHA256 = "bac2ec8fe0f5f66e9c3b1dadd6539ef1b4c5b4d401ae87b13cfcf22933aa6446"
"""Digest of world v1 (24 entities, seed 0, 64 px) as main wrote it before world v2 existed."""


def dataset_content_digest(data_dir) -> str:
    """SHA-256 over every doc's and question's fields and every image's pixels (independent of PNG encoding)."""
    digest = hashlib.sha256()
    for doc in load_kb(data_dir):
        digest.update(json.dumps([doc.doc_id, doc.title, doc.text, doc.entity_id]).encode())
        if doc.image is not None:
            digest.update(np.asarray(doc.image).tobytes())
    for split in SPLITS:
        for q in load_questions(data_dir, split):
            digest.update(json.dumps([q.id, q.question, q.answers, q.entity_id, q.gold_doc_ids]).encode())
            digest.update(np.asarray(q.image).tobytes())
    return digest.hexdigest()


def test_world_v1_is_what_it_was_before_world_v2(synth_dir):
    assert dataset_content_digest(synth_dir) == V1_CONTENT_SHA256
