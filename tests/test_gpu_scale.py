"""benchmarks/gpu_scale.py at the tiny size on CPU: its counts are real and its DPO step trains only the adapter.

The 2B and 7B sizes are only built on the `meta` device here (shapes, no memory), to check that
they are the published Qwen2-VL models; the GPU run itself needs a CUDA device.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tqdm import tqdm

from benchmarks import gpu_scale
from mmrag.config import load_config
from mmrag.models.generator import build_generator
from mmrag.models.lvlm import chat_inputs, load_processor
from mmrag.models.translator import QueryTranslator

ROOT = Path(__file__).resolve().parents[1]
TINY = gpu_scale.SIZES["tiny"]
ABSENT_ON_THE_GPU_IMAGE = ("ray", "deepspeed", "faiss", "open_clip")
VISUAL_TOKENS = (TINY.image_side // (TINY.vision["patch_size"] * TINY.vision["spatial_merge_size"])) ** 2
"""Tokens of one image at the tiny size."""


@pytest.fixture(scope="module")
def preset(zoo_dir):
    return load_config(gpu_scale.PRESET, [f"zoo.cache_dir={zoo_dir}"])


@pytest.fixture(scope="module")
def tiny_checkpoint(preset, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpu-scale-tiny")
    gpu_scale.write_checkpoint(TINY, path, preset.zoo.cache_dir, "cpu", "bfloat16")
    return path


@pytest.fixture(scope="module")
def questions():
    return gpu_scale.benchmark_questions(3, TINY.image_side, 5)


@pytest.mark.parametrize("name", ["qwen2-vl-2b", "qwen2-vl-7b"])
def test_the_preset_sizes_have_the_published_parameter_counts_and_the_tokenizers_token_ids(name, zoo_dir):
    size = gpu_scale.SIZES[name]
    processor = gpu_scale.size_processor(size, zoo_dir)
    model = gpu_scale.random_model(size, processor, "meta")
    assert gpu_scale.parameter_count(model) == pytest.approx(size.published_parameters, rel=0.01)
    tokenizer = processor.tokenizer
    assert model.config.text_config.vocab_size == size.text["vocab_size"] > len(tokenizer)
    assert model.config.image_token_id == tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert model.config.text_config.eos_token_id == tokenizer.eos_token_id
    assert processor.image_processor.patch_size == model.config.vision_config.patch_size == 14


def test_the_gpu_presets_models_map_to_the_2b_and_7b_sizes(preset):
    assert gpu_scale.size_of_checkpoint(preset.translator.model) == "qwen2-vl-2b"
    assert gpu_scale.size_of_checkpoint(preset.generator.model) == "qwen2-vl-7b"


def test_sampling_counts_every_generated_position_and_reports_no_device_memory_on_cpu(preset, tiny_checkpoint,
                                                                                        questions):
    translator = QueryTranslator.from_config(
        dataclasses.replace(preset.translator, model=str(tiny_checkpoint)), preset.zoo.cache_dir, "cpu")
    record = gpu_scale.measure_sampling(translator, questions[0], "cpu")
    rows = len(questions[0]) * preset.translator.num_samples
    assert record["rows"] == rows
    # A random model almost never ends a turn, so every row runs to max_new_tokens (as the docstring says).
    assert record["generated_tokens"] == rows * preset.translator.max_new_tokens
    assert record["prompt_tokens"] > rows * VISUAL_TOKENS
    assert 0 < record["generate_seconds"] <= record["step_seconds"]
    assert record["tokens_per_s"] == record["generated_tokens"] / record["generate_seconds"]
    assert record["peak_memory_gb"] is None
    assert "generate" not in vars(translator.model)  # the counter is gone after the measurement


def test_the_dpo_step_changes_every_lora_weight_and_nothing_else(preset, tiny_checkpoint, questions):
    translator = QueryTranslator.from_config(
        dataclasses.replace(preset.translator, model=str(tiny_checkpoint)), preset.zoo.cache_dir, "cpu")
    before = {name: p.detach().clone() for name, p in translator.model.named_parameters()}
    trainable = {name for name, p in translator.model.named_parameters() if p.requires_grad}
    pairs = gpu_scale.dpo_pairs(*questions, translator, preset)
    record = gpu_scale.measure_dpo_step(translator, pairs, preset, "cpu")
    assert trainable and all("lora_" in name for name in trainable)
    for name, p in translator.model.named_parameters():
        assert torch.equal(p, before[name]) != (name in trainable), name
    assert record["pairs"] == len(questions[0]) * preset.train.max_pairs_per_question
    assert record["sequences"] == 2 * record["pairs"]
    assert record["sequence_tokens"] > record["sequences"] * VISUAL_TOKENS
    assert record["step_seconds"] > 0 and record["tokens_per_s"] > 0
    assert record["peak_memory_gb"] is None


def test_dpo_queries_are_passages_cut_to_the_longest_sampled_query(preset, tiny_checkpoint, questions):
    processor = load_processor(str(tiny_checkpoint))
    queries = gpu_scale.query_texts(processor, questions[1][0], preset.translator.max_new_tokens)
    lengths = [len(processor.tokenizer(q, add_special_tokens=False)["input_ids"]) for q in queries]
    assert all(0 < n <= preset.translator.max_new_tokens for n in lengths)


def test_generation_counts_prompt_and_answer_tokens_of_one_batched_call(preset, tiny_checkpoint, questions):
    generator = build_generator(dataclasses.replace(preset.generator, model=str(tiny_checkpoint)),
                                preset.zoo.cache_dir, "cpu")
    record = gpu_scale.measure_generation(generator, *questions, "cpu")
    assert record["generate_calls"] == 1 and record["rows"] == len(questions[0])
    assert record["generated_tokens"] == len(questions[0]) * preset.generator.max_new_tokens
    with_evidence = chat_inputs(generator.processor, [q.image for q in questions[0]],
                                          [generator.prompt(q.question, docs) for q, docs in zip(*questions)])
    assert record["prompt_tokens"] == int(with_evidence["attention_mask"].sum())
    assert record["peak_memory_gb"] is None


@pytest.mark.slow  # runs the benchmark in a subprocess (11 s)
def test_the_benchmark_runs_on_cpu_without_the_packages_the_gpu_image_lacks(zoo_dir):
    hide = "; ".join(f"sys.modules[{name!r}] = None" for name in ABSENT_ON_THE_GPU_IMAGE)
    argv = ["gpu_scale", "--device", "cpu", "--translator-size", "tiny", "--generator-size", "tiny", "--batch", "2",
            "--zoo-cache", zoo_dir, "--print-only"]
    code = f"import sys; {hide}; sys.argv = {argv!r}; from benchmarks.gpu_scale import main; main()"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line for line in run.stdout.splitlines() if line.startswith(("| translator", "| generator"))]
    assert len(rows) == 3 and all("| tiny |" in row and row.endswith("| n/a | - |") for row in rows), run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where torch sees no CUDA device")
def test_cuda_without_a_cuda_device_is_refused_in_one_clear_line(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_scale", "--device", "cuda"])
    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_scale.main()


def test_the_large_sizes_are_refused_on_cpu(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["gpu_scale", "--device", "cpu", "--translator-size", "tiny"])
    with pytest.raises(SystemExit, match="tiny"):
        gpu_scale.main()


@pytest.mark.parametrize("fits_up_to, expected", [(3, {"batch": 2, "out_of_memory_at": [4]}),
                                                  (0, {"batch": 1, "error": "out of memory",
                                                       "out_of_memory_at": [4, 2, 1]})])
def test_a_batch_that_runs_out_of_device_memory_is_halved_until_one_fits(fits_up_to, expected):
    def measure(batch: int) -> dict:
        if batch > fits_up_to:
            raise torch.cuda.OutOfMemoryError(f"{batch} questions do not fit")
        return {"tokens_per_s": 1.0}

    record = gpu_scale.measured("part", measure, 4, "cpu", tqdm(total=1, disable=True))
    assert {key: record[key] for key in expected if key != "out_of_memory_at"} == {
        key: value for key, value in expected.items() if key != "out_of_memory_at"}
    assert [oom["batch"] for oom in record["out_of_memory_at"]] == expected["out_of_memory_at"]
    assert ("tokens_per_s" in record) == ("error" not in expected)
