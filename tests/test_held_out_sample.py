"""The held-out questions a training run evaluates on: spread over the val split, not its first entities."""

from mmrag.data.dataset import load_questions
from mmrag.training.evaluate import held_out_sample


def test_held_out_sample_takes_questions_from_as_many_entities_as_it_has_questions(synth_dir):
    val = load_questions(synth_dir, "val")
    entities = {q.entity_id for q in val}
    assert len(val) > len(entities) > 2, "the split groups several questions under each entity"
    sample = held_out_sample(val, len(entities))
    assert len(sample) == len(entities)
    assert {q.entity_id for q in sample} == entities
    assert [q.id for q in sample] == sorted({q.id for q in sample}, key=[q.id for q in val].index)


def test_held_out_sample_is_the_whole_split_when_asked_for_more():
    assert held_out_sample(["a", "b", "c"], 3) == ["a", "b", "c"]
    assert held_out_sample(["a", "b", "c"], 10) == ["a", "b", "c"]
    # Strides ab, cd, ef, gh; the pick moves 7 positions (mod 2: 1) each stride.
    assert held_out_sample(list("abcdefgh"), 4) == ["a", "d", "e", "h"]


def test_held_out_sample_reaches_every_position_of_an_entitys_questions():
    # 64 entities of ten questions, kinds in a fixed order (world v2): one per stride of 10 must not be
    # always the first (a visual one). Offsets 0, 7, 4, 1, 8, 5, 2, 9, 6, 3 cycle through all ten.
    kinds = ["visual"] * 3 + ["one-fact"] * 5 + ["two-fact"] * 2
    split = [(entity, kind) for entity in range(64) for kind in kinds]
    sample = held_out_sample(split, 64)
    assert len({entity for entity, _ in sample}) == 64
    assert [kind for _, kind in sample].count("visual") < 64 * 0.4
    assert {kind for _, kind in sample} == set(kinds)
