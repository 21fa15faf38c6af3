"""The `hf` generator with its zoo reader (`zoo:tiny-lvlm-reader`): its evidence bound, its behaviour on hand-built
cases of a world v3 it was not fitted on, and a short training job with it and the classifier reward."""

from __future__ import annotations

import random

import pytest

from mmrag.config import GeneratorConfig
from mmrag.metrics.answers import exact_match
from mmrag.models.generator import build_generator
from mmrag.models.lvlm_generator import bounded_evidence
from mmrag.zoo.reader_behaviour import DIRECT_FACT, MISLEADABLE_FACT, VISUAL_LOOK, Condition
from mmrag.zoo.reader_cases import copy_drill_case, reader_world

CASES = 24
WORLD_SEED = 9300
"""A world v3 neither the reader's fit nor its build's held-out table used."""


@pytest.fixture(scope="module")
def reader(zoo_dir):
    return build_generator(GeneratorConfig(backend="hf", model="zoo:tiny-lvlm-reader"), zoo_dir)


@pytest.fixture(scope="module")
def world():
    return reader_world(24, WORLD_SEED)


def answered(reader, world, sort: str, **options) -> list[tuple[str, object]]:
    rng = random.Random(0)
    cases = [Condition("", "", sort, options).make(world, rng) for _ in range(CASES)]
    answers = reader.answer([c.image for c in cases], [c.question.question for c in cases],
                            [c.documents for c in cases])
    return list(zip(answers, cases))


def accuracy(pairs) -> float:
    return sum(exact_match(answer, [case.truth]) for answer, case in pairs) / len(pairs)


def test_passages_past_the_evidence_bound_are_left_out_whole(zoo_dir):
    from mmrag.model_refs import resolve
    from mmrag.models.lvlm import load_processor

    tokenizer = load_processor(resolve("zoo:tiny-lvlm", zoo_dir)).tokenizer
    documents = ["Vel Narok, a red circle, dates from 1843.", "Vel Narok sits in Talo.", "An aside about Vel Narok."]
    first_two = len(tokenizer("1. Vel Narok, a red circle, dates from 1843.\n2. Vel Narok sits in Talo.\n",
                              add_special_tokens=False)["input_ids"])
    assert bounded_evidence(tokenizer, documents, first_two) == documents[:2]
    assert bounded_evidence(tokenizer, documents, first_two - 1) == documents[:1]
    assert bounded_evidence(tokenizer, documents, 0) == documents
    assert bounded_evidence(tokenizer, documents, 1) == []


def test_a_copy_drill_states_a_fresh_value_in_its_gold_passage_and_asks_for_it(world):
    rng = random.Random(0)
    drills = [copy_drill_case(world, rng) for _ in range(50)]
    true_answers = {q.id: q.answers[0] for q in world.questions}
    for drill in drills:
        assert drill.stated_answer(len(drill.passages)) == drill.truth, drill
        assert sum(drill.truth in text for text in drill.documents) == 1, drill.documents
    # Freshly drawn: a height of 10..400 may meet the entity's own now and then, never most of the time.
    assert sum(drill.truth != true_answers[drill.question.id] for drill in drills) >= 45


NOT_READING = ("measured: the fitted reader answers a fact in the asked form (a number for a year or height, a name "
               "for an architect or city) but copies no value from its passages (0 of 40 held-out direct facts with "
               "the gold passage alone: zoo.json); a reader that reads turns this into a strict XPASS")


@pytest.mark.xfail(strict=True, reason=NOT_READING)
def test_the_reader_answers_a_fact_from_its_gold_passage_and_not_without_it(reader, world):
    with_gold = accuracy(answered(reader, world, DIRECT_FACT, distractors=1))
    without = accuracy(answered(reader, world, DIRECT_FACT, distractors=1, gold=False))
    assert with_gold >= 0.6, with_gold
    assert without <= 0.2, without


@pytest.mark.xfail(strict=True, reason=NOT_READING)
def test_a_superseded_statement_before_the_gold_passage_misleads_the_reader_more_often_than_not(reader, world):
    pairs = answered(reader, world, MISLEADABLE_FACT, distractors=1, misleading=True, misleading_first=True)
    misled = sum(exact_match(answer, [case.misleading_value]) for answer, case in pairs) / len(pairs)
    assert misled > 0.5, misled


def test_the_reader_answers_a_fact_question_in_the_asked_form(reader, world):
    pairs = answered(reader, world, DIRECT_FACT, distractors=1)
    numeric = [(answer, case) for answer, case in pairs if case.truth.isdigit()]
    assert numeric and sum(answer.isdigit() for answer, _ in numeric) >= 0.8 * len(numeric), numeric
    named = [(answer, case) for answer, case in pairs if not case.truth.isdigit()]
    # Measured: 7 of 11 answers to a name question are a capitalised name (the others a number or a fragment).
    assert named and sum(answer[:1].isupper() and not any(ch.isdigit() for ch in answer)
                         for answer, _ in named) >= 0.5 * len(named), named


def test_with_no_evidence_the_reader_names_the_visible_attribute_more_often_than_chance(reader, world):
    # Chance is at most 1/4 (texture, 4 values; colour and shape 8, background 6).
    assert accuracy(answered(reader, world, VISUAL_LOOK, distractors=0)) > 0.25


@pytest.mark.slow  # two training steps with an LVLM answering every leaf
def test_a_short_training_job_runs_with_the_lvlm_generator_and_the_classifier_reward(tiny_config, tmp_path):
    from mmrag.training.local import train_local

    cfg = tiny_config(tmp_path / "run", "generator.backend=hf", "generator.model=zoo:tiny-lvlm-reader",
                      "generator.batch_size=8", "reward.backend=hf_classifier", "reward.model=zoo:reward-classifier",
                      "train.steps=2", "train.eval_every=2")
    summary = train_local(cfg, progress=False)
    for evaluation in (summary["initial"], summary["final"]):
        assert 0.0 <= evaluation["reward_mean"] <= 1.0, evaluation
