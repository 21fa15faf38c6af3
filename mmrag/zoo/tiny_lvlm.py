"""`zoo:tiny-lvlm`: a randomly initialised, few-hundred-kilobyte Qwen2-VL built offline.

The translator, the `hf` generator backend and the LVLM judge all load their model
with `AutoModelForImageTextToText.from_pretrained` + `AutoProcessor.from_pretrained`.
This module writes a directory those two calls load exactly as they would load
`Qwen/Qwen2-VL-2B-Instruct`: a real `Qwen2VLForConditionalGeneration` (tiny widths),
a byte-level BPE tokenizer trained here on synthetic text, a `Qwen2VLImageProcessor`
that turns a 64x64 image into 16 visual tokens, and a Qwen-style chat template.
`mmrag.zoo.fit_captioner` then fits it into `zoo:tiny-lvlm-captioner`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import (
    Qwen2VLConfig,
    Qwen2VLForConditionalGeneration,
    Qwen2VLImageProcessor,
    Qwen2VLProcessor,
    Qwen2VLVideoProcessor,
)

from mmrag.config import GeneratorConfig, TranslatorConfig
from mmrag.data.synth import RELATIONS, make_world
from mmrag.zoo.tokenizer import IMAGE_PAD, VIDEO_PAD, train_tokenizer

TINY_LVLM_IMAGE_SIZE = 64
"""Side, in pixels, every image is resized to (min_pixels = max_pixels = its square)."""
PATCH_SIZE = 8
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
TOKENIZER_VOCAB_SIZE = 2000
IMAGE_TOKENS_PER_IMAGE = (TINY_LVLM_IMAGE_SIZE // (PATCH_SIZE * MERGE_SIZE)) ** 2
CORPUS_ENTITIES = 200
"""Entities of the tokenizer's text world: enough for every template and most name syllables."""
SCAFFOLDING_REPEATS = 50
CORPUS_SEED_OFFSET = 3000

# Qwen's chat layout (<|im_start|>role ... <|im_end|>, images as
# <|vision_start|><|image_pad|><|vision_end|>), without the default system prompt a
# tiny model would only spend context on. Assistant text sits in a generation block
# so `return_assistant_tokens_mask=True` marks exactly the tokens to train on.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['role'] == 'assistant' %}{% generation %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>{% endgeneration %}\n"
    "{% else %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


TINY_TEXT = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    # head_dim 32 -> 16 rotary frequencies, split over (time, height, width).
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]},
)
"""Text-model widths of tiny-lvlm (`Qwen2VLTextConfig` fields; the vocabulary is the tokenizer's)."""
TINY_VISION = dict(
    depth=2,
    embed_dim=64,
    hidden_size=128,
    num_heads=4,
    mlp_ratio=2,
    patch_size=PATCH_SIZE,
    spatial_merge_size=MERGE_SIZE,
    temporal_patch_size=TEMPORAL_PATCH_SIZE,
)
"""Vision-tower widths and patch geometry of tiny-lvlm (`Qwen2VLVisionConfig` fields)."""


def build_processor(corpus: list[str]) -> Qwen2VLProcessor:
    """Tokenizer trained on `corpus`, image/video processors sized for 64x64 images."""
    return qwen2vl_processor(train_tokenizer(corpus, TOKENIZER_VOCAB_SIZE), CHAT_TEMPLATE, TINY_VISION,
                             TINY_LVLM_IMAGE_SIZE)


def qwen2vl_processor(tokenizer, chat_template: str, vision: dict, image_side: int) -> Qwen2VLProcessor:
    """A processor resizing every image to `image_side` squared pixels, cut into the patches of `vision`."""
    pixels = image_side * image_side
    geometry = dict(patch_size=vision["patch_size"], merge_size=vision["spatial_merge_size"],
                    temporal_patch_size=vision["temporal_patch_size"],
                    size={"shortest_edge": pixels, "longest_edge": pixels})
    return Qwen2VLProcessor(
        image_processor=Qwen2VLImageProcessor(**geometry),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(**geometry),
        chat_template=chat_template,
    )


def build_model_config(processor: Qwen2VLProcessor, text: dict = TINY_TEXT, vision: dict = TINY_VISION,
                       tie_word_embeddings: bool = False) -> Qwen2VLConfig:
    """A Qwen2-VL config of the given widths (tiny-lvlm's by default) whose token ids match `processor`'s tokenizer.

    `text` may name a `vocab_size` (a real model's embedding table, at least the tokenizer's
    length); without one the vocabulary is exactly the tokenizer's.
    """
    tokenizer = processor.tokenizer
    token_id = tokenizer.convert_tokens_to_ids
    # A deep copy: the config classes fill in the nested rope dict they are given.
    text_config = {"vocab_size": len(tokenizer), **copy.deepcopy(text)}
    if text_config["vocab_size"] < len(tokenizer):
        raise ValueError(f"text vocab_size {text_config['vocab_size']}: smaller than the tokenizer's "
                         f"{len(tokenizer)} tokens")
    text_config.update(bos_token_id=token_id("<|endoftext|>"), eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)
    return Qwen2VLConfig(
        text_config=text_config,
        vision_config=copy.deepcopy(vision),
        image_token_id=token_id(IMAGE_PAD),
        video_token_id=token_id(VIDEO_PAD),
        vision_start_token_id=token_id("<|vision_start|>"),
        vision_end_token_id=token_id("<|vision_end|>"),
        tie_word_embeddings=tie_word_embeddings,
    )


def tokenizer_corpus(seed: int, num_entities: int = CORPUS_ENTITIES) -> list[str]:
    """Text the tokenizer learns merges from: a synthetic world's KB text, questions and prompts."""
    world = make_world(num_entities=num_entities, seed=seed)
    templates = [t for relation in RELATIONS.values() for t in relation.question_templates]
    descriptions = [entity.description for entity in world.entities]
    prompts = [TranslatorConfig().prompt_template, GeneratorConfig().prompt_template, "unknown", "(none)"]
    scaffolding = templates + [" " + t.lower().rstrip("?") for t in templates] + prompts
    scaffolding += [f"<|im_start|>{role}\n" for role in ("system", "user", "assistant")]
    # Prompts and templates occur in almost every model input: weigh them like it,
    # so they become a few whole-word tokens rather than letters.
    lines = [doc.text for doc in world.docs] + descriptions + [f"a picture of a {d}" for d in descriptions]
    return lines + scaffolding * SCAFFOLDING_REPEATS


def build_tiny_lvlm(out_dir: Path, cache_dir: str, seed: int) -> dict:
    """Write model + processor into `out_dir`; returns figures for zoo.json."""
    processor = build_processor(tokenizer_corpus(seed + CORPUS_SEED_OFFSET))
    config = build_model_config(processor)
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).eval()
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": len(processor.tokenizer),
        "image_tokens_per_64px_image": IMAGE_TOKENS_PER_IMAGE,
    }
