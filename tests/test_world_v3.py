"""World v3's invariants: no question wording determines its kind, gold evidence answers and is all needed,
superseded passages state wrong values for the pictured entity, entity-disjoint splits, determinism by seed,
and the sweep options of `mmrag synth`."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter, defaultdict

import pytest
import torch

from mmrag.data import wording_v3
from mmrag.data.dataset import KINDS, ONE_FACT, SPLITS, TWO_FACT, VISUAL, load_questions
from mmrag.data.question_kinds import VISUAL_TEMPLATES, demand_of
from mmrag.data.render import render_entity
from mmrag.data.synth import generate_dataset
from mmrag.data.synth_v3 import WorldV3Options, make_world_v3
from mmrag.data.wording import ATTRIBUTES, spellings
from mmrag.data.world import RELATIONS


@pytest.fixture(scope="module")
def world():
    return make_world_v3(320, seed=0, image_size=16)


def _questions(world):
    return [q for split in SPLITS for q in world.questions[split]]


def _bag_of_words_accuracy(train, test) -> float:
    """Test accuracy of a multinomial logistic regression on word counts, fitted on `train`'s kinds."""
    words = sorted({word for q in train for word in re.findall(r"[a-z]+", q.question.lower())})
    vocabulary = {word: i for i, word in enumerate(words)}

    def features(questions):
        x = torch.zeros(len(questions), len(vocabulary) + 1)
        x[:, -1] = 1.0
        for row, question in enumerate(questions):
            for word in re.findall(r"[a-z]+", question.question.lower()):
                if word in vocabulary:
                    x[row, vocabulary[word]] += 1.0
        return x

    x, y = features(train), torch.tensor([KINDS.index(q.kind) for q in train])
    weights = torch.zeros(x.shape[1], len(KINDS), requires_grad=True)
    optimiser = torch.optim.LBFGS([weights], max_iter=200)

    def closure():
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ weights, y)
        loss.backward()
        return loss

    optimiser.step(closure)
    predicted = (features(test) @ weights).argmax(dim=1)
    return float((predicted == torch.tensor([KINDS.index(q.kind) for q in test])).float().mean())


def test_every_look_wording_is_asked_as_all_three_kinds_and_every_fact_wording_as_one_and_two_fact(world):
    kinds_of = defaultdict(set)
    for question in _questions(world):
        kinds_of[question.question].add(question.kind)
    look_wordings = {t for templates in VISUAL_TEMPLATES.values() for t in templates}
    assert {text for text in kinds_of if text in look_wordings} == look_wordings
    for text, kinds in kinds_of.items():
        assert kinds == ({VISUAL, ONE_FACT, TWO_FACT} if text in look_wordings else {ONE_FACT, TWO_FACT}), text


def test_a_bag_of_words_classifier_fitted_on_train_predicts_test_kinds_barely_above_the_majority_rate(world):
    train, test = world.questions["train"], world.questions["test"]
    majority_kind = Counter(q.kind for q in train).most_common(1)[0][0]
    majority_rate = sum(q.kind == majority_kind for q in test) / len(test)
    # The best any text-only classifier fitted on train can do: each wording's most frequent train kind.
    kinds_of_wording = defaultdict(Counter)
    for question in train:
        kinds_of_wording[question.question][question.kind] += 1
    lookup = sum(kinds_of_wording[q.question].most_common(1)[0][0] == q.kind for q in test) / len(test)
    assert 0.35 <= majority_rate <= 0.45
    assert lookup <= majority_rate + 0.08
    assert _bag_of_words_accuracy(train, test) <= majority_rate + 0.08


def test_gold_evidence_gives_the_answer_and_a_two_fact_question_needs_both_passages(world):
    kb = {doc.doc_id: doc.text for doc in world.docs}
    for question in _questions(world):
        demand = demand_of(question.question)
        assert len(question.gold_doc_ids) == {VISUAL: 0, ONE_FACT: 1, TWO_FACT: 2}[question.kind], question.id
        if question.kind == VISUAL:
            continue
        read = (lambda docs: wording_v3.read_attribute(demand.attribute, docs)) if demand.attribute else \
            (lambda docs: wording_v3.read_fact(demand.relations[0], docs))
        gold = [kb[doc_id] for doc_id in question.gold_doc_ids]
        assert read(gold) == question.answers[0], question.id
        if question.kind == TWO_FACT:
            assert read(gold[:1]) is None and read(gold[1:]) is None, question.id


def test_an_anchors_passage_names_the_linking_entitys_look_so_one_query_can_reach_it(world):
    kb = {doc.doc_id: doc for doc in world.docs}
    entities = {entity.entity_id: entity for entity in world.entities}
    anchors = 0
    for question in (q for q in _questions(world) if q.kind == TWO_FACT):
        anchor = next(kb[d] for d in question.gold_doc_ids if not kb[d].entity_id)
        words = set(re.findall(r"[a-z]+", anchor.text.lower()))
        entity = entities[question.entity_id]
        named = [a for a in ATTRIBUTES if words & set(spellings(a, getattr(entity, a)))]
        assert len(named) >= len(ATTRIBUTES) - 1, anchor.text
        anchors += 1
    assert anchors > 500


def test_the_picture_shows_another_value_exactly_where_a_look_question_needs_the_kb(world):
    kinds = defaultdict(dict)
    for question in _questions(world):
        attribute = demand_of(question.question).attribute
        if attribute:
            kinds[question.entity_id][attribute] = question.kind
    picture = {doc.entity_id: doc.image for doc in world.docs if doc.image is not None}
    entities = {entity.entity_id: entity for entity in world.entities}
    hides, shows = 0, 0
    for entity_id, asked in kinds.items():
        true_look = render_entity(entities[entity_id], 16).tobytes()
        if any(kind != VISUAL for kind in asked.values()):
            assert picture[entity_id].tobytes() != true_look, entity_id
            hides += 1
        elif len(asked) == len(ATTRIBUTES):  # every attribute asked, all visible: the picture is the true look
            assert picture[entity_id].tobytes() == true_look, entity_id
            shows += 1
    assert hides > 100 and shows > 0


def test_superseded_passages_state_a_wrong_value_for_the_pictured_entity_and_mislead_when_ranked_first(world):
    entities = {entity.entity_id: entity for entity in world.entities}
    by_entity = defaultdict(list)
    for doc in world.docs:
        by_entity[doc.entity_id].append(doc.text)
    superseded = 0
    for entity_id, texts in by_entity.items():
        if not entity_id:
            continue
        entity = entities[entity_id]
        for text in texts:
            for relation in RELATIONS:
                stated = wording_v3.stated_fact(relation, text)
                if stated is not None and stated != entity.facts[relation]:
                    superseded += 1
                    others = [t for t in texts if t != text]
                    assert wording_v3.read_fact(relation, [text, *others]) == stated
    assert superseded >= 0.2 * len(RELATIONS) * len(entities)


def test_keeping_every_passage_of_the_entity_answers_worse_than_its_gold_evidence(world):
    kb = {doc.doc_id: doc.text for doc in world.docs}
    texts_of = defaultdict(list)
    for doc in world.docs:
        texts_of[doc.entity_id].append(doc.text)
    right = Counter()
    for question in (q for q in _questions(world) if q.kind == ONE_FACT):
        demand = demand_of(question.question)
        for name, docs in (("gold", [kb[d] for d in question.gold_doc_ids]), ("entity", texts_of[question.entity_id])):
            answer = wording_v3.read_attribute(demand.attribute, docs) if demand.attribute else \
                wording_v3.read_fact(demand.relations[0], docs)
            right[name] += answer == question.answers[0]
    assert right["entity"] < 0.95 * right["gold"]


def test_lookalike_landmarks_differ_from_an_entity_in_exactly_one_attribute(world):
    looks = {tuple(getattr(e, a) for a in ATTRIBUTES) for e in world.entities}
    lookalikes = 0
    for doc in world.docs:
        words, linked, _ = wording_v3.described_look(doc.text)
        if doc.entity_id or linked or len(words) != len(ATTRIBUTES):
            continue
        lookalikes += 1
        look = tuple(words[a] for a in ATTRIBUTES)
        assert any(sum(x != y for x, y in zip(look, other)) == 1 for other in looks)
    assert lookalikes >= len(world.entities)


def test_no_entity_or_family_is_in_two_splits_and_no_test_name_is_in_another_split(world):
    split_of = {}
    for split in SPLITS:
        for question in world.questions[split]:
            assert split_of.setdefault(question.entity_id, split) == split
    families = defaultdict(set)
    for entity in world.entities:
        families[entity.family].add(world.split_of[entity.entity_id])
    assert all(len(splits) == 1 for splits in families.values())
    test_names = {e.name for e in world.entities if world.split_of[e.entity_id] == "test"}
    other_text = " ".join(q.question for split in ("train", "val") for q in world.questions[split])
    assert test_names and not any(name in other_text for name in test_names)


def _digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_the_same_seed_writes_the_same_files_and_another_seed_other_ones(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        generate_dataset(tmp_path / name, num_entities=12, seed=seed, image_size=16, world="v3")
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    assert _digests(tmp_path / "a")["kb.parquet"] != _digests(tmp_path / "c")["kb.parquet"]


def test_the_sweep_options_set_family_sizes_and_kind_proportions(tmp_path):
    from mmrag.pipelines import synth
    from mmrag.pipelines.arguments import synth_arguments

    parser = argparse.ArgumentParser()
    synth_arguments(parser)
    out = tmp_path / "sweep"
    args = parser.parse_args(["--world", "v3", "--out", str(out), "--entities", "200", "--seed", "2",
                              "--image-size", "16", "--family-sizes", "2,2", "--kind-mix", "0.1,0.3,0.6"])
    assert synth.run(args) == 0
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["world"] == "v3" and manifest["family_sizes"] == [2, 2] and manifest["kind_mix"] == [0.1, 0.3, 0.6]
    assert manifest["counts"]["families"] == 100
    questions = [q for split in SPLITS for q in load_questions(out, split)]
    shares = Counter(q.kind for q in questions)
    for kind, expected in zip(KINDS, (0.1, 0.3, 0.6)):
        assert abs(shares[kind] / len(questions) - expected) < 0.03, kind


@pytest.mark.parametrize("flags, message", [
    (["--family-sizes", "2,5"], "family_sizes: expected smallest,largest with 1 <= smallest <= largest <= 4"),
    (["--family-sizes", "3"], "--family-sizes: expected 2 comma-separated int values, got '3'"),
    (["--kind-mix", "0.5,0.4,0.3"], "kind_mix: expected three fractions >= 0"),
    (["--kind-mix", "0.5,0.5"], "--kind-mix: expected 3 comma-separated float values"),
    (["--world", "v2", "--kind-mix", "0.3,0.4,0.3"], "only world v3 takes them"),
])
def test_bad_sweep_options_exit_2_with_one_line_naming_the_option(tmp_path, capsys, flags, message):
    from mmrag.pipelines import synth
    from mmrag.pipelines.arguments import synth_arguments

    parser = argparse.ArgumentParser()
    synth_arguments(parser)
    args = parser.parse_args(["--world", "v3", "--out", str(tmp_path / "out"), "--entities", "6", *flags])
    assert synth.run(args) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert not (tmp_path / "out").exists()
