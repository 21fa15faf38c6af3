"""The synthetic KB-VQA world, its Parquet files, the dataset readers and the `synth` command."""

from __future__ import annotations

import argparse
import json
import random
import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmrag.data.dataset import (
    KB_SCHEMA,
    QUESTION_SCHEMA,
    SPLITS,
    DatasetError,
    decode_image,
    load_kb,
    load_questions,
)
from mmrag.data.render import BACKGROUND_RGB, render_entity
from mmrag.data.synth import RELATIONS, generate_dataset, make_world
from mmrag.data.world import assign_splits, draw_entities, family_sizes

FILES = ["kb.parquet"] + [f"questions_{split}.parquet" for split in SPLITS]


@pytest.fixture(scope="module")
def world():
    return make_world(24, seed=0)


def test_same_seed_writes_identical_files_and_other_seed_differs(tmp_path):
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        generate_dataset(tmp_path / name, num_entities=6, seed=seed, image_size=32)
    for file in FILES:
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
    kb_a, kb_c = pq.read_table(tmp_path / "a" / "kb.parquet"), pq.read_table(tmp_path / "c" / "kb.parquet")
    assert not kb_a.equals(kb_c)
    assert kb_a.column("text").to_pylist() != kb_c.column("text").to_pylist()


def test_schema_counts_and_manifest(synth_dir):
    assert pq.read_schema(Path(synth_dir) / "kb.parquet").remove_metadata() == KB_SCHEMA
    for split in SPLITS:
        schema = pq.read_schema(Path(synth_dir) / f"questions_{split}.parquet").remove_metadata()
        assert schema == QUESTION_SCHEMA
    manifest = json.loads((Path(synth_dir) / "dataset.json").read_text())
    assert manifest["seed"] == 0 and manifest["schema_version"] == 1
    counts = manifest["counts"]
    # Per entity: caption doc + 4 relation passages + 1 distractor; 4 relations x 2 questions.
    assert counts["entities"] == 24 and counts["kb_docs"] == 24 * 6 and counts["kb_docs_with_image"] == 24
    assert sum(counts[f"questions_{s}"] for s in SPLITS) == 24 * 4 * 2
    assert len(load_kb(synth_dir)) == 144
    questions = load_questions(synth_dir, "val")
    assert len(questions) == counts["questions_val"]
    assert questions[0].image.size == (64, 64) and questions[0].image.mode == "RGB"


def test_splits_disjoint_by_entity_keep_families_and_follow_fractions(synth_dir):
    entity_split = {}
    for split in SPLITS:
        for question in load_questions(synth_dir, split):
            assert entity_split.setdefault(question.entity_id, split) == split
    assert set(entity_split.values()) == set(SPLITS)
    entities = draw_entities(120, random.Random(3))
    split_of = assign_splits(entities, random.Random(3))
    family_splits = defaultdict(set)
    for entity in entities:
        family_splits[entity.family].add(split_of[entity.entity_id])
    assert all(len(splits) == 1 for splits in family_splits.values())
    sizes = {split: sum(s == split for s in split_of.values()) for split in SPLITS}
    assert abs(sizes["train"] - 72) <= 3 and abs(sizes["val"] - 24) <= 3 and abs(sizes["test"] - 24) <= 3


@pytest.mark.parametrize("num_entities", [3, 4, 5, 7])
def test_small_worlds_still_fill_every_split(num_entities):
    rng = random.Random(num_entities)
    assert sum(family_sizes(num_entities, random.Random(0))) == num_entities
    entities = draw_entities(num_entities, rng)
    assert set(assign_splits(entities, rng).values()) == set(SPLITS)


def test_gold_docs_exist_and_state_the_answer_which_the_question_does_not(synth_dir):
    kb = {doc.doc_id: doc for doc in load_kb(synth_dir)}
    checked = 0
    for split in SPLITS:
        for question in load_questions(synth_dir, split):
            (answer,) = question.answers
            (gold,) = question.gold_doc_ids
            assert answer in kb[gold].text and kb[gold].entity_id == question.entity_id
            assert answer.lower() not in question.question.lower()
            checked += 1
    assert checked == 192


def test_each_relation_passage_matches_only_its_own_pattern(world):
    for doc in world.docs:
        matching = [name for name, r in RELATIONS.items() if re.search(r.answer_pattern, doc.text)]
        assert len(matching) <= 1, doc.text
    passages = [doc for doc in world.docs if doc.image is None]
    assert sum(bool(re.search(RELATIONS["year"].answer_pattern, d.text)) for d in passages) == 24


def test_near_duplicate_families_share_look_but_texture_and_facts(world):
    families = defaultdict(list)
    for entity in world.entities:
        families[entity.family].append(entity)
    assert all(2 <= len(members) <= 3 for members in families.values())
    descriptions = [entity.description for entity in world.entities]
    assert len(set(descriptions)) == len(descriptions)
    assert len({entity.name for entity in world.entities}) == len(world.entities)
    for members in families.values():
        assert len({(e.shape, e.colour, e.background) for e in members}) == 1
        assert len({e.texture for e in members}) == len(members)
        for relation in RELATIONS:
            assert len({e.facts[relation] for e in members}) == len(members)


def test_rendering_is_deterministic_and_augmentation_changes_the_view(world):
    entity = world.entities[0]
    canonical = np.asarray(render_entity(entity, 64), dtype=np.int16)
    assert np.array_equal(canonical, np.asarray(render_entity(entity, 64), dtype=np.int16))
    background = np.array(BACKGROUND_RGB[entity.background])
    shape_fraction = np.mean(np.abs(canonical - background).sum(axis=2) > 30)
    assert 0.2 < shape_fraction < 0.8
    view_a = np.asarray(render_entity(entity, 64, np.random.default_rng(1)), dtype=np.int16)
    view_b = np.asarray(render_entity(entity, 64, np.random.default_rng(1)), dtype=np.int16)
    assert np.array_equal(view_a, view_b)
    assert np.abs(view_a - canonical).mean() > 5
    sibling = next(e for e in world.entities[1:] if e.family == entity.family)
    assert np.abs(np.asarray(render_entity(sibling, 64), dtype=np.int16) - canonical).mean() > 5


def test_readers_name_missing_column_bad_image_and_unknown_split(synth_dir, tmp_path):
    questions = pq.read_table(Path(synth_dir) / "questions_test.parquet")
    pq.write_table(questions.drop_columns(["question"]), tmp_path / "questions_test.parquet")
    with pytest.raises(DatasetError, match=r"questions_test\.parquet: missing column 'question'"):
        load_questions(tmp_path, "test")

    images = questions.column("image").to_pylist()
    images[3] = b"not a png"
    broken = questions.set_column(questions.column_names.index("image"), "image", pa.array(images, pa.binary()))
    pq.write_table(broken, tmp_path / "questions_val.parquet")
    bad = load_questions(tmp_path, "val")[3]  # images are decoded where they are used, not at load
    with pytest.raises(DatasetError, match=r"questions_val\.parquet: row 3 column 'image'"):
        bad.image

    kb = pq.read_table(Path(synth_dir) / "kb.parquet")
    pq.write_table(kb.drop_columns(["text"]), tmp_path / "kb.parquet")
    with pytest.raises(DatasetError, match=r"kb\.parquet: missing column 'text'"):
        load_kb(tmp_path)
    doubled = pa.concat_tables([kb.slice(0, 2), kb.slice(1, 1)])
    pq.write_table(doubled, tmp_path / "kb.parquet")
    with pytest.raises(DatasetError, match=r"row 2 column 'doc_id': 'd000001' already used by row 1"):
        load_kb(tmp_path)
    texts = kb.column("text").to_pylist()
    texts[4] = None
    pq.write_table(kb.set_column(kb.column_names.index("text"), "text", pa.array(texts, pa.string())),
                   tmp_path / "kb.parquet")
    with pytest.raises(DatasetError, match=r"row 4 column 'text': null"):
        load_kb(tmp_path)
    with pytest.raises(DatasetError, match=r"split: expected one of train, val, test, got 'dev'"):
        load_questions(synth_dir, "dev")
    with pytest.raises(ValueError, match="not a decodable image"):
        decode_image(b"\x89PNG broken")


def test_readers_accept_a_minimal_foreign_dataset_with_image_paths(synth_dir, tmp_path):
    image = load_questions(synth_dir, "test")[0].image
    image.save(tmp_path / "q0.jpg")
    pq.write_table(pa.table({"id": ["x1"], "image": ["q0.jpg"], "question": ["Who designed this?"],
                             "answers": [["Ada Lovelace", "Lovelace"]]}), tmp_path / "questions_train.parquet")
    pq.write_table(pa.table({"doc_id": ["w1", "w2"], "text": ["A passage.", "Another."]}), tmp_path / "kb.parquet")
    (question,) = load_questions(tmp_path, "train")
    assert question.answers == ["Ada Lovelace", "Lovelace"] and question.gold_doc_ids == []
    assert question.image.size == (64, 64)
    assert [(d.doc_id, d.title, d.image) for d in load_kb(tmp_path)] == [("w1", "", None), ("w2", "", None)]


def test_synth_command_flags_override_config(tmp_path, capsys):
    from mmrag.pipelines import synth
    from mmrag.pipelines.arguments import synth_arguments

    config = tmp_path / "data.yaml"
    config.write_text(f"data:\n  dir: {tmp_path / 'from_config'}\n  entities: 9\n  seed: 1\n  image_size: 48\n")
    parser = argparse.ArgumentParser()
    synth_arguments(parser)
    args = parser.parse_args(["--config", str(config), "--out", str(tmp_path / "out"), "--entities", "4"])
    assert synth.run(args) == 0
    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert manifest["counts"]["entities"] == 4 and manifest["seed"] == 1 and manifest["image_size"] == 48
    assert "questions_train" in capsys.readouterr().out
    assert not (tmp_path / "from_config").exists()
