"""Vision-language model plumbing shared by the query translator, the `hf` generator and the LVLM judge.

Every LVLM in the pipeline is an HF image-text-to-text model (Qwen2-VL style) with a
processor carrying a chat template. This module turns batches of (image, prompt[,
response]) into model inputs, generates, and scores responses:

* `generate` samples (or decodes greedily) and reports each response's log-prob;
* `sequence_logprobs` recomputes that log-prob differentiably (the DPO loss uses it).

The two agree by construction: a response's log-prob is always the sum, over its
tokens and the closing end-of-turn token, of log softmax(logits / temperature); the
tokens are the response text's own (canonical) tokenization. Generation forces the
end-of-turn token at the last step, so a response cut by `max_new_tokens` is still a
complete turn. That forced token has probability 1 under the sampling process, whatever
the model says: it contributes nothing, in sampling and in recomputation alike (pass
`max_new_tokens` to `sequence_logprobs` to score a response as the sampler drew it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor, BatchFeature, GenerationConfig

from mmrag.model_refs import resolve
from mmrag.models.batches import check_batch_lengths

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class SampledTokens:
    """Generated responses as token ids (each ending with its stop token) and their summed log-probs."""

    token_ids: list[list[int]]
    logprobs: torch.Tensor


def load_lvlm(ref: str, cache_dir: str, dtype: str = "float32", device: str = "cpu"):
    """(model, processor) for `ref` (`zoo:NAME`, a local path or an HF id), in eval mode, left padding."""
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {sorted(TORCH_DTYPES)}")
    path = resolve(ref, cache_dir)
    processor = load_processor(path)
    model = AutoModelForImageTextToText.from_pretrained(path, dtype=TORCH_DTYPES[dtype]).to(device).eval()
    # Sampling settings come from the caller only: a checkpoint's generation_config.json
    # (top_k, top_p, repetition penalty, ...) would silently change the sampling
    # distribution away from the one the reported log-probs describe.
    # Only the checkpoint's special token ids are kept.
    tokenizer, shipped = processor.tokenizer, model.generation_config
    model.generation_config = GenerationConfig(
        eos_token_id=shipped.eos_token_id if shipped.eos_token_id is not None else tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return model, processor


def load_processor(path: str):
    """The processor saved at `path`, padding on the left as batched generation needs."""
    processor = AutoProcessor.from_pretrained(path)
    processor.tokenizer.padding_side = "left"
    return processor


def fill_prompt(template: str, field_name: str, **values: str) -> str:
    """Replace `{name}` placeholders in one pass; `field_name` is the config key named in errors."""
    found = set(_PLACEHOLDER.findall(template))
    missing = [name for name in values if name not in found]
    if missing:
        raise ValueError(f"{field_name}: template {template!r} lacks the placeholder {{{missing[0]}}}")
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _prompt_texts(processor, images: list[Image.Image | None], prompts: list[str]) -> list[str]:
    conversations = []
    for image, prompt in zip(images, prompts):
        content = ([{"type": "image"}] if image is not None else []) + [{"type": "text", "text": prompt}]
        conversations.append([{"role": "user", "content": content}])
    return processor.apply_chat_template(conversations, tokenize=False, add_generation_prompt=True)


def end_of_turn_id(processor) -> int:
    """The token that closes an assistant turn (the tokenizer's eos, `<|im_end|>` for Qwen)."""
    return processor.tokenizer.eos_token_id


def response_token_ids(processor, response: str) -> list[int]:
    """Canonical tokens of a response: its text (special-token strings kept as plain text) + end of turn."""
    tokens = processor.tokenizer(response, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    return list(tokens) + [end_of_turn_id(processor)]


def decode_response(processor, token_ids: list[int]) -> str:
    """Response text of generated ids, without special tokens and surrounding whitespace."""
    return processor.tokenizer.decode(token_ids, skip_special_tokens=True).strip()


def _append_responses(inputs: BatchFeature, response_ids: list[list[int]], pad_id: int) -> BatchFeature:
    """Right-append each row's response ids after its (left-padded) prompt; mark them in `response_mask`."""
    width = max(len(ids) for ids in response_ids)
    rows = len(response_ids)
    block = torch.full((rows, width), pad_id, dtype=inputs["input_ids"].dtype)
    mask = torch.zeros((rows, width), dtype=inputs["attention_mask"].dtype)
    for row, ids in enumerate(response_ids):
        block[row, : len(ids)] = torch.tensor(ids, dtype=block.dtype)
        mask[row, : len(ids)] = 1
    prompt_zeros = torch.zeros_like(inputs["attention_mask"])
    inputs["input_ids"] = torch.cat([inputs["input_ids"], block], dim=1)
    inputs["attention_mask"] = torch.cat([inputs["attention_mask"], mask], dim=1)
    if "mm_token_type_ids" in inputs:
        text_type = torch.zeros((rows, width), dtype=inputs["mm_token_type_ids"].dtype)
        inputs["mm_token_type_ids"] = torch.cat([inputs["mm_token_type_ids"], text_type], dim=1)
    inputs["response_mask"] = torch.cat([prompt_zeros, mask], dim=1)
    return inputs


def chat_inputs(
    processor,
    images: list[Image.Image | None],
    prompts: list[str],
    responses: list[str] | list[list[int]] | None = None,
) -> BatchFeature:
    """Model inputs for a batch of one-turn chats (image optional per row), prompts left-padded.

    With `responses` each is appended as the assistant turn (a text as its canonical tokens
    plus end of turn, a list of token ids exactly as given) and the batch also holds `response_mask` (1 on response
    tokens, 0 elsewhere); pop it before calling the model.
    """
    check_batch_lengths(images=images, prompts=prompts, responses=responses)
    present = [image for image in images if image is not None]
    inputs = processor(
        text=_prompt_texts(processor, images, prompts), images=present or None, padding=True, return_tensors="pt"
    )
    if responses is None:
        return inputs
    response_ids = [response_token_ids(processor, r) if isinstance(r, str) else list(r) for r in responses]
    return _append_responses(inputs, response_ids, processor.tokenizer.pad_token_id)


def sequence_logprobs(
    model,
    processor,
    images: list[Image.Image | None],
    prompts: list[str],
    responses: list[str] | list[list[int]],
    temperature: float = 1.0,
    max_new_tokens: int | None = None,
) -> torch.Tensor:
    """Summed log-prob of each response given (image, prompt); differentiable.

    A text response is scored with its end-of-turn token, a token-id list as given
    (e.g. ids from `generate_token_ids`, or the first tokens of a reply).

    Log-probs are under softmax(logits / temperature), the distribution `generate` samples
    from. With `max_new_tokens`, under `generate`'s sampling process exactly: a response whose
    end of turn falls at or beyond that many tokens was cut there, its end of turn forced
    (probability 1), so that token adds nothing.
    """
    if not prompts:
        return torch.zeros(0, device=model.device)
    inputs = chat_inputs(processor, images, prompts, responses)
    response_mask = inputs.pop("response_mask")
    # Responses occupy the last `width` columns (every response has at least its end token).
    width = response_mask.shape[1] - int(response_mask.any(dim=0).nonzero().min())
    outputs = model(**inputs.to(model.device), logits_to_keep=width + 1)
    # logits at position t predict the token at t + 1: the last `width + 1` positions
    # cover every response token.
    logits = outputs.logits[:, :-1].float() / temperature
    targets = inputs["input_ids"][:, -width:]
    token_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    scored = response_mask[:, -width:].clone()
    if max_new_tokens is not None:
        # Each response fills the first `length` columns of the block; its last token is at length - 1.
        lengths = scored.sum(dim=1)
        last = targets.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)
        forced = (lengths >= max_new_tokens) & (last == end_of_turn_id(processor))
        scored[forced, lengths[forced] - 1] = 0
    return (token_logprobs * scored.to(token_logprobs.device)).sum(dim=-1)


def _generation_config(processor, model, max_new_tokens: int, do_sample: bool, temperature: float) -> GenerationConfig:
    """Plain sampling (no top-k/top-p/penalties), stopping at end of turn, which is forced at the last step."""
    configured = model.generation_config.eos_token_id
    configured = [] if configured is None else [configured] if isinstance(configured, int) else list(configured)
    sampling = dict(temperature=temperature, top_k=0, top_p=1.0, typical_p=1.0) if do_sample else {}
    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=do_sample,
        num_beams=1,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        eos_token_id=sorted({end_of_turn_id(processor), *configured}),
        pad_token_id=processor.tokenizer.pad_token_id,
        forced_eos_token_id=end_of_turn_id(processor),
        output_logits=True,
        return_dict_in_generate=True,
        **sampling,
    )


def generate_token_ids(
    model,
    processor,
    images: list[Image.Image | None],
    prompts: list[str],
    max_new_tokens: int,
    do_sample: bool,
    temperature: float = 1.0,
) -> SampledTokens:
    """Generate one response per row; token ids up to and including the stop token, log-probs as sampled."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens: expected >= 1, got {max_new_tokens}")
    if do_sample and temperature <= 0:
        raise ValueError(f"temperature: expected > 0 when sampling, got {temperature}")
    if not prompts:
        return SampledTokens(token_ids=[], logprobs=torch.zeros(0))
    inputs = chat_inputs(processor, images, prompts).to(model.device)
    config = _generation_config(processor, model, max_new_tokens, do_sample, temperature)
    with torch.no_grad():
        outputs = model.generate(**inputs, generation_config=config)
    new_tokens = outputs.sequences[:, inputs["input_ids"].shape[1] :]
    # Raw logits, not the processed scores: the model's own distribution at `temperature`,
    # which `sequence_logprobs` recomputes (the forced end of turn is dropped below, as there).
    logits = torch.stack(outputs.logits, dim=1).float() / temperature
    token_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
    is_stop = torch.isin(new_tokens, torch.tensor(config.eos_token_id, device=new_tokens.device))
    lengths = is_stop.int().argmax(dim=1) + 1
    keep = torch.arange(new_tokens.shape[1], device=new_tokens.device)[None, :] < lengths[:, None]
    # A row that reached max_new_tokens ends with the forced end of turn: probability 1, no term.
    truncated = lengths == max_new_tokens
    keep[truncated, lengths[truncated] - 1] = False
    token_ids = [row[:length].tolist() for row, length in zip(new_tokens, lengths.tolist())]
    return SampledTokens(token_ids=token_ids, logprobs=(token_logprobs * keep).sum(dim=1).cpu())


def generate(
    model,
    processor,
    images: list[Image.Image | None],
    prompts: list[str],
    max_new_tokens: int,
    do_sample: bool,
    temperature: float = 1.0,
    num_return_sequences: int = 1,
) -> tuple[list[str], torch.Tensor]:
    """Responses (row-major: the `num_return_sequences` of prompt 0 first) and their summed log-probs.

    A sampled token path that is not the canonical tokenization of its decoded text
    (e.g. two tokens that BPE would merge, a stray special token) is rescored on the
    canonical path, so the reported log-prob is always the one `sequence_logprobs`
    gives for the returned text at this temperature.
    """
    images = [image for image in images for _ in range(num_return_sequences)]
    prompts = [prompt for prompt in prompts for _ in range(num_return_sequences)]
    sampled = generate_token_ids(model, processor, images, prompts, max_new_tokens, do_sample, temperature)
    texts = [decode_response(processor, ids) for ids in sampled.token_ids]
    logprobs = sampled.logprobs.clone()
    rescore = [i for i, (text, ids) in enumerate(zip(texts, sampled.token_ids)) if response_token_ids(processor, text) != ids]
    if rescore:
        with torch.no_grad():
            logprobs[rescore] = sequence_logprobs(
                model,
                processor,
                [images[i] for i in rescore],
                [prompts[i] for i in rescore],
                [texts[i] for i in rescore],
                temperature,
                max_new_tokens,
            ).cpu()
    return texts, logprobs
