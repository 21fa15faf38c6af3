"""The GPU preset's LVLMs at their real sizes on the Ray-free core: translator sampling, one DPO step, generation.

It measures what the tiny CPU models cannot: memory and speed at the real sizes. Nothing is downloaded. Each model is a Qwen2-VL built from its public
configuration (`SIZES`, the numbers of the checkpoints' config.json) with random weights,
initialised in bf16 directly on the target device. Its processor is the tiny zoo's
tokenizer and chat template (`zoo:tiny-lvlm`) with an image processor of the size's
patch geometry, so prompts, chat template and image processing run through the project's
own code. The config's special token ids are that tokenizer's
(`mmrag.zoo.tiny_lvlm.build_model_config`), its vocabulary the real model's: ids beyond
the tokenizer decode to nothing. Model and processor are saved to a temporary directory
and loaded back through the project's own paths, as the GPU preset loads them:
`QueryTranslator.from_config` (the preset's LoRA) and `build_generator` (backend `hf`).

Settings are the GPU preset's (mmrag/configs/gpu_qwen2vl.yaml); images are 448x448 synthetic
ones (`mmrag.data.synth`). Each part runs once on two questions to warm up, then:

* translator sample: `sample` of `translator.num_samples` queries for each of B
  questions (B: one learner rank's share of `train.questions_per_step`);
* translator DPO step: the in-process learner's step for those B questions: policy
  `logprobs`, `reference_logprobs`, `dpo_loss`, backward, AdamW on the LoRA weights,
  over `train.max_pairs_per_question` pairs per question;
* generator answer: `answer` for `generator.batch_size` (image, question, 5 passages).

Reported per part: seconds of the call, tokens/s (sampling and generation: generated
tokens over the seconds inside `generate`; the DPO step: prompt + query tokens of its
sequences over the step's seconds), prompt tokens, and peak memory
(`torch.cuda.max_memory_allocated`, reset before each part; "n/a" on CPU). A part whose
batch runs out of device memory is measured again at half the batch, down to 1; the
batches that did not fit are reported.

Random weights put every measurement at the longest the settings allow. A random model
almost never ends a turn early, so every row generates `max_new_tokens`. Its samples
decode to little text, so the DPO step scores KB passages cut to `max_new_tokens` tokens
in place of the sampled queries. And `sample` rescores (one more forward pass) every
query whose tokens are not its text's canonical tokenization, which here is nearly all;
a trained model's rarely are. That is why sampling tokens/s counts only the time inside
`generate`, and the seconds of the whole call are shown beside it.

Run on a GPU: `python -m benchmarks.gpu_scale` (written without a GPU at hand: expected a few
minutes on one H200, most of it spent building, saving and loading the 7B model). On CPU,
only the `tiny` size:
`python -m benchmarks.gpu_scale --device cpu --translator-size tiny --generator-size tiny --print-only`.
Prints a Markdown table, writes it as its section of benchmarks/RESULTS.md and writes
benchmarks/results/gpu_scale.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import itertools
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from tqdm import tqdm
from transformers import AutoModelForImageTextToText

from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.config import Config, load_config
from mmrag.data.dataset import Question
from mmrag.data.synth import make_world
from mmrag.model_refs import resolve
from mmrag.models.generator import build_generator
from mmrag.models.lvlm import TORCH_DTYPES, chat_inputs, load_processor
from mmrag.models.lvlm_generator import LVLMGenerator
from mmrag.models.translator import QueryTranslator
from mmrag.rl.losses import dpo_loss
from mmrag.zoo.tiny_lvlm import (TINY_LVLM_IMAGE_SIZE, TINY_TEXT, TINY_VISION, build_model_config,
                                 qwen2vl_processor)

ROOT = Path(__file__).resolve().parents[1]
PRESET = ROOT / "mmrag/configs/gpu_qwen2vl.yaml"
RESULTS_JSON = Path(__file__).with_name("results") / "gpu_scale.json"
TOKENIZER_SOURCE = "zoo:tiny-lvlm"
QUESTIONS_PER_ENTITY = 8
"""Questions `make_world` draws per entity (4 relations x 2), all splits together."""
WARM_UP_QUESTIONS = 2


@dataclass(frozen=True)
class ModelSize:
    """A Qwen2-VL's dimensions, as `Qwen2VLTextConfig` / `Qwen2VLVisionConfig` fields."""

    name: str
    text: dict
    vision: dict
    tie_word_embeddings: bool
    image_side: int
    """Side, in pixels, of the square images this size is measured with."""
    checkpoint: str = ""
    """The public checkpoint the dimensions are those of ("" for tiny)."""
    published_parameters: float | None = None
    """Its parameter count as the Hugging Face Hub gives it (from the safetensors files)."""


# Qwen/Qwen2-VL-2B-Instruct and Qwen/Qwen2-VL-7B-Instruct config.json on the Hugging Face Hub
# (as in the Qwen-published Qwen2-VL-2B-Instruct-AWQ and Qwen2-VL-7B-Instruct-GPTQ-Int8 copies):
# both list only vision hidden_size (= the text width), in_chans 3 and spatial_patch_size 14,
# leaving the rest of the vision tower at Qwen2VLVisionConfig's defaults, written out here.
# The Hub gives qwen2_vl checkpoints of these architectures 2.21B and 8.29B parameters.
_QWEN2_VL_VISION = dict(depth=32, embed_dim=1280, num_heads=16, mlp_ratio=4, patch_size=14,
                        spatial_merge_size=2, temporal_patch_size=2)
_QWEN2_VL_ROPE = {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}
GPU_IMAGE_SIDE = 448
"""448 px = 32 x 32 patches of 14 px = 256 visual tokens after the 2 x 2 merge."""

SIZES = {size.name: size for size in (
    ModelSize("tiny", {**TINY_TEXT, "vocab_size": 4096}, TINY_VISION, False, TINY_LVLM_IMAGE_SIZE),
    ModelSize("qwen2-vl-2b",
              dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                   num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                   rms_norm_eps=1e-6, rope_parameters=_QWEN2_VL_ROPE),
              {**_QWEN2_VL_VISION, "hidden_size": 1536}, True, GPU_IMAGE_SIDE,
              "Qwen/Qwen2-VL-2B-Instruct", 2.21e9),
    ModelSize("qwen2-vl-7b",
              dict(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                   num_attention_heads=28, num_key_value_heads=4, max_position_embeddings=32768,
                   rms_norm_eps=1e-6, rope_parameters=_QWEN2_VL_ROPE),
              {**_QWEN2_VL_VISION, "hidden_size": 3584}, False, GPU_IMAGE_SIDE,
              "Qwen/Qwen2-VL-7B-Instruct", 8.29e9),
)}
"""The tiny size keeps tiny-lvlm's widths with a vocabulary larger than its tokenizer, as the real ones have."""


def size_of_checkpoint(checkpoint: str) -> str:
    """The name in `SIZES` of a public checkpoint's dimensions (the GPU preset names its models by HF id)."""
    for size in SIZES.values():
        if size.checkpoint == checkpoint:
            return size.name
    raise ValueError(f"{checkpoint!r}: no size with its dimensions; known: "
                     f"{', '.join(s.checkpoint for s in SIZES.values() if s.checkpoint)}")


def size_processor(size: ModelSize, cache_dir: str):
    """The tiny zoo's tokenizer and chat template with images cut into `size`'s patches at its image side."""
    zoo = load_processor(resolve(TOKENIZER_SOURCE, cache_dir))
    return qwen2vl_processor(zoo.tokenizer, zoo.chat_template, size.vision, size.image_side)


def random_model(size: ModelSize, processor, device: str | torch.device, dtype: torch.dtype = torch.bfloat16):
    """A randomly initialised Qwen2-VL of `size`, created on `device` (`meta`: shapes only, no memory)."""
    config = build_model_config(processor, size.text, size.vision, size.tie_word_embeddings)
    with torch.device(device):
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    model.generation_config.pad_token_id = config.text_config.pad_token_id
    model.generation_config.eos_token_id = config.text_config.eos_token_id
    return model.eval()


def parameter_count(model) -> int:
    """Distinct parameters (tied embeddings once, as the Hub counts them)."""
    return sum(p.numel() for p in model.parameters())


def write_checkpoint(size: ModelSize, out_dir: Path, cache_dir: str, device: str, dtype: str) -> dict:
    """Build `size` with random weights on `device`, save it with its processor to `out_dir`; seconds taken."""
    start = time.perf_counter()
    processor = size_processor(size, cache_dir)
    torch.manual_seed(0)
    model = random_model(size, processor, device, TORCH_DTYPES[dtype])
    built = time.perf_counter()
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    del model
    release_memory(device)
    return {"build_seconds": built - start, "save_seconds": time.perf_counter() - built}


def release_memory(device: str) -> None:
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def synchronize(device: str) -> None:
    """Wait for queued kernels, so that a timer around a call covers its device work."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def reset_peak_memory(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats()


def peak_memory_gb(device: str) -> float | None:
    """Peak device memory allocated by tensors since the last reset, in GiB; None off CUDA."""
    return torch.cuda.max_memory_allocated() / 2**30 if torch.device(device).type == "cuda" else None


@dataclass
class GenerationCount:
    """What the `generate` calls of one measured call did."""

    calls: int = 0
    rows: int = 0
    prompt_tokens: int = 0
    """Non-padding prompt tokens, visual tokens included."""
    generated_tokens: int = 0
    """Positions decoded: each call's rows times its new tokens (a batch decodes until its last row stops)."""
    seconds: float = 0.0
    """Wall seconds inside `generate`, device work included."""


@contextmanager
def counting_generate(model, device: str) -> Iterator[GenerationCount]:
    """Count and time every `model.generate` call (the translator's and generator's own) inside the block."""
    count = GenerationCount()
    generate = model.generate

    def counted(*args, **kwargs):
        synchronize(device)
        start = time.perf_counter()
        outputs = generate(*args, **kwargs)
        synchronize(device)
        count.seconds += time.perf_counter() - start
        prompt = kwargs["input_ids"]
        count.calls += 1
        count.rows += prompt.shape[0]
        count.prompt_tokens += int(kwargs["attention_mask"].sum())
        count.generated_tokens += prompt.shape[0] * (outputs.sequences.shape[1] - prompt.shape[1])
        return outputs

    model.generate = counted
    try:
        yield count
    finally:
        del model.generate


@contextmanager
def timed(device: str) -> Iterator[dict]:
    """{"seconds": wall seconds of the block, device work included}, filled when the block ends."""
    timer = {}
    synchronize(device)
    start = time.perf_counter()
    yield timer
    synchronize(device)
    timer["seconds"] = time.perf_counter() - start


def benchmark_questions(count: int, image_side: int, passages: int) -> tuple[list[Question], list[list[str]]]:
    """`count` synthetic questions with `image_side`-pixel images, and `passages` KB passages of each one's entity."""
    world = make_world(count // QUESTIONS_PER_ENTITY + 1, seed=0, image_size=image_side)
    questions = [q for split in world.questions.values() for q in split][:count]
    docs = {}
    for doc in world.docs:
        docs.setdefault(doc.entity_id, []).append(doc.text)
    return questions, [list(itertools.islice(itertools.cycle(docs[q.entity_id]), passages)) for q in questions]


def query_texts(processor, passages: list[str], max_new_tokens: int) -> list[str]:
    """Passages cut to the longest query a sampler writes: `max_new_tokens` with its end of turn."""
    tokenizer = processor.tokenizer
    ids = tokenizer(passages, add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(row[: max_new_tokens - 1]).strip() for row in ids]


def dpo_pairs(questions: list[Question], evidence: list[list[str]], translator: QueryTranslator, cfg: Config):
    """(question, chosen, rejected): `train.max_pairs_per_question` pairs among N queries per question (responses
    cut from passages, made queries by the translator's `translator.query_template`)."""
    n = cfg.translator.num_samples
    pairs = []
    for question, passages in zip(questions, evidence):
        responses = query_texts(translator.processor, list(itertools.islice(itertools.cycle(passages), n)),
                                cfg.translator.max_new_tokens)
        queries = translator.queries([question.image] * n, [question.question] * n, responses)
        chosen_rejected = itertools.islice(itertools.combinations(range(n), 2), cfg.train.max_pairs_per_question)
        pairs.extend((question, queries[i], queries[j]) for i, j in chosen_rejected)
    return pairs


def dpo_step(translator: QueryTranslator, pairs, optimizer: torch.optim.Optimizer, beta: float) -> float:
    """One optimiser step on the DPO loss of `pairs`, as the in-process learner takes it; the loss."""
    images = [q.image for q, _, _ in pairs] * 2
    questions = [q.question for q, _, _ in pairs] * 2
    queries = [chosen for _, chosen, _ in pairs] + [rejected for _, _, rejected in pairs]
    policy = translator.logprobs(images, questions, queries)
    reference = translator.reference_logprobs(images, questions, queries)
    loss = dpo_loss(policy[: len(pairs)], policy[len(pairs):], reference[: len(pairs)], reference[len(pairs):], beta)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def generation_record(count: GenerationCount, seconds: float, device: str) -> dict:
    """A measured call's record from its `generate` counts and its own wall seconds."""
    return {"generate_calls": count.calls, "rows": count.rows, "prompt_tokens": count.prompt_tokens,
            "generated_tokens": count.generated_tokens,
            "generate_seconds": count.seconds, "step_seconds": seconds,
            "tokens_per_s": count.generated_tokens / count.seconds, "peak_memory_gb": peak_memory_gb(device)}


def measure_sampling(translator: QueryTranslator, questions: list[Question], device: str) -> dict:
    """Time `translator.sample` (the config's N and max_new_tokens) for `questions`, after a warm-up."""
    images, texts = [q.image for q in questions], [q.question for q in questions]
    translator.sample(images[:WARM_UP_QUESTIONS], texts[:WARM_UP_QUESTIONS])
    reset_peak_memory(device)
    with counting_generate(translator.model, device) as count, timed(device) as timer:
        translator.sample(images, texts)
    return generation_record(count, timer["seconds"], device)


def measure_dpo_step(translator: QueryTranslator, pairs, cfg: Config, device: str) -> dict:
    """Time one DPO step on `pairs` (AdamW at `translator.lr`), after a warm-up step on the first question's pairs."""
    optimizer = torch.optim.AdamW(translator.trainable_parameters(), lr=cfg.translator.lr)
    dpo_step(translator, [pair for pair in pairs if pair[0] is pairs[0][0]], optimizer, cfg.train.dpo_beta)
    # Counted once, outside the timer: what the policy's forward pass reads.
    tokens = int(chat_inputs(translator.processor, [q.image for q, _, _ in pairs] * 2,
                             translator.prompts([q.question for q, _, _ in pairs] * 2),
                             [c for _, c, _ in pairs] + [r for _, _, r in pairs])["attention_mask"].sum())
    reset_peak_memory(device)
    with timed(device) as timer:
        loss = dpo_step(translator, pairs, optimizer, cfg.train.dpo_beta)
    return {"pairs": len(pairs), "sequences": 2 * len(pairs),
            "sequence_tokens": tokens, "loss": loss, "step_seconds": timer["seconds"],
            "tokens_per_s": tokens / timer["seconds"], "peak_memory_gb": peak_memory_gb(device)}


def measure_generation(generator: LVLMGenerator, questions: list[Question], evidence: list[list[str]],
                       device: str) -> dict:
    """Time `generator.answer` for `questions` with their evidence, after a warm-up."""
    images, texts = [q.image for q in questions], [q.question for q in questions]
    generator.answer(images[:WARM_UP_QUESTIONS], texts[:WARM_UP_QUESTIONS], evidence[:WARM_UP_QUESTIONS])
    reset_peak_memory(device)
    with counting_generate(generator.model, device) as count, timed(device) as timer:
        generator.answer(images, texts, evidence)
    return generation_record(count, timer["seconds"], device)


@contextmanager
def saved_model(size: ModelSize, cache_dir: str, device: str, dtype: str) -> Iterator[tuple[Path, dict]]:
    """(directory holding a random `size` checkpoint and its processor, build/save seconds); removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"gpu-scale-{size.name}-") as tmp:
        yield Path(tmp), write_checkpoint(size, Path(tmp), cache_dir, device, dtype)


def model_figures(size: ModelSize, model, seconds: dict, load_seconds: float) -> dict:
    return {"model_size": size.name, "image_side": size.image_side, "parameters": parameter_count(model),
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
            **seconds, "load_seconds": load_seconds}


def loaded(size: ModelSize, role: str, cfg: Config, dtype: str, load, device: str, bar: tqdm):
    """(component, figures): `load(path)` of a freshly written random checkpoint of `size`, timed."""
    bar.set_description(f"{role} {size.name}: build and save")
    with saved_model(size, cfg.zoo.cache_dir, device, dtype) as (path, seconds):
        bar.set_description(f"{role} {size.name}: load")
        with timed(device) as timer:
            component = load(str(path))
    bar.update()
    return component, model_figures(size, component.model, seconds, timer["seconds"])


def measured(description: str, measure, batch: int, device: str, bar: tqdm) -> dict:
    """`measure(batch)`'s record; a batch that runs out of device memory is halved until one fits (or 1 does not).

    The batches that did not fit are recorded as `out_of_memory_at`, with their peaks.
    """
    bar.set_description(description)
    too_large = []
    while batch:
        try:
            record = {"batch": batch, **measure(batch)}
            break
        except torch.cuda.OutOfMemoryError:
            too_large.append({"batch": batch, "peak_memory_gb": peak_memory_gb(device)})
        # Freed here, out of the except clause, whose traceback still holds the failed call's tensors.
        release_memory(device)
        batch //= 2
    else:
        record = {"batch": too_large[-1]["batch"], "error": "out of memory",
                  "peak_memory_gb": too_large[-1]["peak_memory_gb"]}
    bar.update()
    return {**record, "out_of_memory_at": too_large}


def run_translator(size: ModelSize, cfg: Config, batch: int, device: str, bar: tqdm) -> dict[str, dict]:
    """The translator's two parts ("translator_sample", "translator_dpo_step") at `size`."""
    questions, evidence = benchmark_questions(batch, size.image_side, cfg.translator.num_samples)
    translator, figures = loaded(
        size, "translator", cfg, cfg.translator.dtype, device=device, bar=bar,
        load=lambda path: QueryTranslator.from_config(dataclasses.replace(cfg.translator, model=path),
                                                      cfg.zoo.cache_dir, device))
    sampling = measured(f"translator {size.name}: sample",
                        lambda count: measure_sampling(translator, questions[:count], device), batch, device, bar)
    step = measured(f"translator {size.name}: DPO step",
                    lambda count: measure_dpo_step(
                        translator, dpo_pairs(questions[:count], evidence[:count], translator, cfg),
                        cfg, device),
                    batch, device, bar)
    del translator
    release_memory(device)
    return {"translator_sample": {**figures, **sampling}, "translator_dpo_step": {**figures, **step}}


def run_generator(size: ModelSize, cfg: Config, batch: int, device: str, bar: tqdm) -> dict[str, dict]:
    """The generator's part ("generator_answer") at `size`, `batch` prompts in one `generate` call."""
    questions, evidence = benchmark_questions(batch, size.image_side, cfg.reranker.max_docs)
    generator, figures = loaded(
        size, "generator", cfg, cfg.generator.dtype, device=device, bar=bar,
        load=lambda path: build_generator(dataclasses.replace(cfg.generator, model=path, batch_size=batch),
                                          cfg.zoo.cache_dir, device))
    answering = measured(f"generator {size.name}: answer",
                         lambda count: measure_generation(generator, questions[:count], evidence[:count], device),
                         batch, device, bar)
    del generator
    release_memory(device)
    return {"generator_answer": {**figures, **answering}}


def report(results: dict, cfg: Config) -> str:
    """The Markdown section for RESULTS.md."""

    def cell(record: dict, key: str, form: str) -> str:
        value = record.get(key)
        return "n/a" if value is None else format(value, form)

    def count(number: int) -> str:
        return f"{number / 1e9:.2f}B" if number >= 1e9 else f"{number / 1e6:.2f}M"

    parts = results["parts"]
    pairs = parts.get("translator_dpo_step", {}).get("pairs", "all")
    rows = []
    for part, what in (("translator_sample", f"sample {cfg.translator.num_samples} queries per question, "
                                             f"<= {cfg.translator.max_new_tokens} new tokens"),
                       ("translator_dpo_step", f"DPO step on {pairs} pairs, LoRA rank {cfg.translator.lora.rank}, "
                                               "AdamW"),
                       ("generator_answer", f"answer with {cfg.reranker.max_docs} passages, "
                                            f"<= {cfg.generator.max_new_tokens} new tokens")):
        if part not in parts:
            continue
        record = parts[part]
        tokens = record.get("sequence_tokens", record.get("generated_tokens"))
        rows.append([part.replace("_", " "), what, record["model_size"], count(record["parameters"]),
                     count(record["trainable_parameters"]), str(record["batch"]),
                     cell(record, "prompt_tokens", ","), "n/a" if tokens is None else f"{tokens:,}",
                     cell(record, "step_seconds", ".2f"), cell(record, "tokens_per_s", ",.0f"),
                     record.get("error") or cell(record, "peak_memory_gb", ".1f"),
                     ", ".join(f"{oom['batch']} ({cell(oom, 'peak_memory_gb', '.1f')} GiB)"
                               for oom in record["out_of_memory_at"]) or "-"])
    sides = " and ".join(sorted({str(record["image_side"]) for record in parts.values()}))
    table = markdown_table(["part", "what", "model", "parameters", "trainable", "batch", "prompt tokens",
                            "tokens", "seconds", "tokens/s", "peak memory GiB", "out of memory at batch"], rows)
    preparation = "; ".join(f"{part.split('_')[0]} {record['model_size']} {record['build_seconds']:.0f} / "
                            f"{record['save_seconds']:.0f} / {record['load_seconds']:.0f}"
                            for part, record in parts.items() if part != "translator_dpo_step")
    return (f"## GPU-scale core: the GPU preset's LVLMs at full size, random weights ({results['date']})\n\n"
            f"Machine: {results['machine']}. Device {results['device']}, torch {results['torch_version']}, "
            f"transformers {results['transformers_version']}, bf16. Settings of mmrag/configs/gpu_qwen2vl.yaml; "
            f"synthetic images of {sides} px; models built from the public Qwen2-VL "
            f"configurations with random weights (`python -m benchmarks.gpu_scale`).\n\n{table}\n\n"
            "Tokens: generated positions (sample, answer; tokens/s over the seconds inside `generate`, "
            "seconds = the whole call, which for sampling includes rescoring the random model's "
            "non-canonical samples), or prompt + query tokens of the step's sequences (DPO). Random weights "
            "generate to `max_new_tokens` on every row; the DPO step scores KB passages cut to "
            "`max_new_tokens` tokens. Peak memory: `torch.cuda.max_memory_allocated` during the measured call. "
            "A batch that ran out of device memory was halved until one fitted. Seconds to build the random "
            f"model / save it / load it through the project's loader: {preparation}.")


def machine_with_accelerator(device: str) -> str:
    """`results.machine()` led by the GPU used (or "no GPU used"), with the Python version."""
    accelerator = torch.cuda.get_device_name(0) if torch.device(device).type == "cuda" else "no GPU used"
    return f"{accelerator}, {machine()}, Python {platform.python_version()}"


def parse_args() -> argparse.Namespace:
    """The options, or an exit naming the one that cannot be run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Settings come from mmrag/configs/gpu_qwen2vl.yaml; see the module docstring.")
    parser.add_argument("--translator-size", choices=[*SIZES, "none"],
                        help="model size of the translator parts (default: the GPU preset's translator.model, "
                             "qwen2-vl-2b); none: skip them")
    parser.add_argument("--generator-size", choices=[*SIZES, "none"],
                        help="model size of the generator part (default: the GPU preset's generator.model, "
                             "qwen2-vl-7b); none: skip it")
    parser.add_argument("--device", default="cuda", help="torch device (default: cuda); on cpu only the tiny size")
    parser.add_argument("--batch", type=int,
                        help="questions per part (default: the translator one learner rank's share of "
                             "train.questions_per_step, 16; the generator generator.batch_size, 32)")
    parser.add_argument("--zoo-cache", help="zoo.cache_dir holding (or receiving) zoo:tiny-lvlm, whose tokenizer "
                                            "the models use (default: the preset's, ~/.cache/mmrag/zoo)")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"gpu_scale: --device {args.device}, but torch sees no CUDA device "
                         "(torch.cuda.is_available() is False); on CPU run the tiny size: "
                         "--device cpu --translator-size tiny --generator-size tiny")
    if args.batch is not None and args.batch < 1:
        raise SystemExit(f"gpu_scale: --batch {args.batch}: expected at least 1")
    return args


def measure(args: argparse.Namespace, cfg: Config) -> dict:
    """The figures of every part the sizes ask for, with the machine and versions they were measured with."""
    device = torch.device(args.device)
    translator_size = args.translator_size or size_of_checkpoint(cfg.translator.model)
    generator_size = args.generator_size or size_of_checkpoint(cfg.generator.model)
    if device.type == "cpu" and {translator_size, generator_size} - {"tiny", "none"}:
        raise SystemExit("gpu_scale: the 2B and 7B sizes take tens of GB and hours on a CPU; "
                         "pass --translator-size tiny --generator-size tiny (or none) with --device cpu")
    translator_batch = args.batch or max(1, cfg.train.questions_per_step // cfg.learner.num_workers)
    generator_batch = args.batch or cfg.generator.batch_size
    results = {"machine": machine_with_accelerator(args.device), "date": datetime.date.today().isoformat(), "device": str(device),
               "torch_version": torch.__version__, "transformers_version": transformers.__version__,
               "parts": {}}
    steps = 3 * (translator_size != "none") + 2 * (generator_size != "none")
    with tqdm(total=steps, unit="stage") as bar:
        if translator_size != "none":
            results["parts"].update(run_translator(SIZES[translator_size], cfg, translator_batch, args.device, bar))
        if generator_size != "none":
            results["parts"].update(run_generator(SIZES[generator_size], cfg, generator_batch, args.device, bar))
    for record in results["parts"].values():
        record.update(device=results["device"], torch_version=results["torch_version"], date=results["date"])
    return results


def main() -> None:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = load_config(PRESET, [f"zoo.cache_dir={args.zoo_cache}"] if args.zoo_cache else [])
    results = measure(args, cfg)
    publish_figures(report(results, cfg), results, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
