"""The captioner's first stage: its vision tower learns the pictures' attributes from its visual tokens."""

from __future__ import annotations

import torch

from mmrag.models.lvlm import load_lvlm, sequence_logprobs
from mmrag.zoo.fit_captioner import (
    attribute_heads_for,
    fit_vision,
    image_features,
    load_examples,
    named_attribute,
    translator_prompt,
    visual_tokens_read,
)


def test_vision_stage_lowers_the_attribute_loss_of_linear_heads_over_flattened_visual_tokens(zoo_dir):
    model, processor = load_lvlm("zoo:tiny-lvlm", zoo_dir)
    examples = load_examples(num_entities=6, seed=11)
    heads = attribute_heads_for(model, processor, seed=0)
    # 16 merged tokens of 128 values for a 64 x 64 picture, read by one linear head per attribute kind.
    assert {kind: head.weight.shape for kind, head in heads.heads.items()} == {
        "colour": (8, 16 * 128), "texture": (4, 16 * 128), "shape": (8, 16 * 128), "background": (6, 16 * 128)}
    vision = {name: p.detach().clone() for name, p in model.model.visual.named_parameters()}
    losses = fit_vision(model, processor, heads, examples, steps=12, seed=0, batch_size=8)
    assert sum(losses[-3:]) / 3 < 0.7 * losses[0]
    moved = dict(model.model.visual.named_parameters())
    assert sum(not torch.equal(moved[name], before) for name, before in vision.items()) > len(vision) // 2


def test_named_attribute_wants_exactly_the_right_word_of_its_kind():
    attributes = {"colour": "red", "texture": "striped", "shape": "circle", "background": "navy"}
    assert named_attribute("red striped circle on navy", "shape", attributes)
    assert not named_attribute("red striped square on navy", "shape", attributes)
    assert not named_attribute("red striped circle square on navy", "shape", attributes)
    assert named_attribute("a picture of a red striped circle", "colour", attributes)
    assert not named_attribute("a picture of a red striped circle", "background", attributes)


def test_attribute_heads_start_from_the_seed_whatever_the_process_drew_before(zoo_dir):
    model, processor = load_lvlm("zoo:tiny-lvlm", zoo_dir)
    first = attribute_heads_for(model, processor, seed=3).state_dict()
    torch.rand(1000)  # what an earlier build in the same process would have drawn
    again = attribute_heads_for(model, processor, seed=3).state_dict()
    assert all(torch.equal(first[name], again[name]) for name in first)
    other = attribute_heads_for(model, processor, seed=4).state_dict()
    assert not torch.equal(first["heads.colour.weight"], other["heads.colour.weight"])



def test_the_visual_tokens_read_in_a_description_pass_are_those_a_vision_pass_alone_gives(zoo_dir):
    """Stage two's attribute loss reads the visual tokens of the description pass instead of a second pass."""
    model, processor = load_lvlm("zoo:tiny-lvlm", zoo_dir)
    images = [example.image for example in load_examples(num_entities=3, seed=11)[:3]]
    with visual_tokens_read(model) as passes:
        sequence_logprobs(model, processor, images, [translator_prompt("What is it?")] * 3, ["a red circle"] * 3)
    assert len(passes) == 1
    assert torch.allclose(passes[0], image_features(model, processor, images))
    sequence_logprobs(model, processor, images[:1], [translator_prompt("What is it?")], ["a red circle"])
    assert len(passes) == 1, "a pass after the block is not collected"
