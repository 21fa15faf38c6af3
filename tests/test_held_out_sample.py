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
    assert held_out_sample(list("abcdefgh"), 4) == ["a", "c", "e", "g"]
