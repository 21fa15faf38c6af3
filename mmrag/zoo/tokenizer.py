"""Byte-level BPE tokenizer for the tiny LVLM, trained locally on synthetic text.

Sits under `mmrag.zoo.tiny_lvlm`: the zoo trains it on the synthetic world's
descriptions, passages and question templates, and the tiny Qwen2-VL's vocabulary
is its size. It uses the same normaliser, pre-tokenizer and decoder as Qwen2's
tokenizer and is wrapped in `Qwen2Tokenizer`, so it saves and loads through
`AutoTokenizer` / `AutoProcessor` exactly like a real Qwen2-VL checkpoint. Every
one of the 256 bytes is in the initial alphabet, so any text tokenizes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, trainers
from tokenizers.models import BPE
from transformers import Qwen2Tokenizer

# Qwen2's pre-tokenization split: contractions, words with one leading non-letter,
# single digits (so years and heights never merge into opaque tokens), punctuation, spaces.
PRETOKENIZE_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

END_OF_TEXT = "<|endoftext|>"
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"
# The control tokens Qwen2-VL's processor, chat template and model config refer to.
SPECIAL_TOKENS = [
    END_OF_TEXT,
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    IMAGE_PAD,
    VIDEO_PAD,
]


def _backend_tokenizer() -> Tokenizer:
    backend = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    backend.decoder = decoders.ByteLevel()
    return backend


def train_tokenizer(corpus: Iterable[str], vocab_size: int) -> Qwen2Tokenizer:
    """Train byte-level BPE on `corpus`; special tokens take the first ids."""
    backend = _backend_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    model_state = json.loads(backend.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model_state["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=model_state["vocab"],
        merges=merges,
        unk_token=END_OF_TEXT,
        eos_token="<|im_end|>",
        pad_token=END_OF_TEXT,
        extra_special_tokens={"image_token": IMAGE_PAD, "video_token": VIDEO_PAD},
        model_max_length=1024,
        # Decoder-only batched generation needs prompts aligned on the right.
        padding_side="left",
    )
    # Registering them as special keeps them whole (never split into bytes) and
    # lets `skip_special_tokens` drop them; they keep the ids the trainer gave them.
    tokenizer.add_special_tokens({"extra_special_tokens": SPECIAL_TOKENS})
    return tokenizer
