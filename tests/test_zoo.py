"""The offline zoo: resolve semantics, cache reuse, atomic builds, reloadable tiny models, cheap fits."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import open_clip
import pytest
import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor, Qwen2VLForConditionalGeneration

from mmrag.model_refs import (MANIFEST_FILE, MODELS, ZooError, ZooModel, ensure_built, models_referenced, read_manifest,
                              resolve)
from mmrag.models.clip_architectures import TINY_CLIP_MODEL_NAME, register_tiny_clip_config
from mmrag.models.lvlm import load_lvlm
from mmrag.zoo import fit_captioner, fit_clip
from mmrag.zoo.fit_captioner import CaptionExample, caption_target, describes_correctly
from mmrag.zoo.tiny_clip import create_tiny_clip, random_tiny_clip
from mmrag.zoo.tiny_lvlm import IMAGE_TOKENS_PER_IMAGE, build_model_config


def _solid(rgb: tuple[int, int, int], size: tuple[int, int] = (64, 64)) -> Image.Image:
    return Image.new("RGB", size, rgb)


@pytest.mark.parametrize("ref", ["ViT-L-14", "openai", "/models/clip.pt", "Qwen/Qwen2-VL-2B-Instruct", ""])
def test_resolve_passes_non_zoo_references_through(ref, tmp_path):
    assert resolve(ref, str(tmp_path)) == ref
    assert list(tmp_path.iterdir()) == []


def test_resolve_rejects_unknown_name_listing_valid_ones(tmp_path):
    with pytest.raises(ZooError) as excinfo:
        resolve("zoo:tiny-gpt", str(tmp_path))
    message = str(excinfo.value)
    assert "zoo:tiny-gpt" in message
    assert all(name in message for name in MODELS)


@pytest.fixture(scope="module")
def clip_init_cache(tmp_path_factory) -> Path:
    cache = tmp_path_factory.mktemp("zoo")
    resolve("zoo:tiny-clip-init", str(cache), seed=3)
    return cache


def test_building_and_loading_tiny_clip_logs_no_warning(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        path = resolve("zoo:tiny-clip-init", str(tmp_path))
        create_tiny_clip(path)
    assert [record.getMessage() for record in caplog.records] == []


def test_tiny_clip_init_reloads_identical_weights_through_open_clip(clip_init_cache):
    path = resolve("zoo:tiny-clip-init", str(clip_init_cache))
    assert path == str(clip_init_cache / "tiny-clip-init" / "open_clip_model.safetensors")
    loaded, preprocess = create_tiny_clip(path)
    torch.manual_seed(3)
    rebuilt = random_tiny_clip()
    loaded_state, rebuilt_state = loaded.state_dict(), rebuilt.state_dict()
    assert loaded_state.keys() == rebuilt_state.keys()
    assert all(torch.equal(loaded_state[k], rebuilt_state[k]) for k in loaded_state)
    torch.manual_seed(4)
    other = random_tiny_clip()
    assert not torch.equal(other.state_dict()["text_projection"], loaded_state["text_projection"])
    with torch.no_grad():
        features = loaded.encode_image(preprocess(_solid((200, 30, 30))).unsqueeze(0))
    assert features.shape == (1, 64)


def test_second_resolve_reuses_cache_without_rebuilding(clip_init_cache):
    manifest_path = clip_init_cache / "tiny-clip-init" / MANIFEST_FILE
    before = manifest_path.stat().st_mtime_ns
    build = ensure_built("tiny-clip-init", str(clip_init_cache))
    assert not build.built_now
    assert manifest_path.stat().st_mtime_ns == before
    assert build.manifest["seed"] == 3 and build.manifest["name"] == "tiny-clip-init"
    assert build.manifest["figures"]["parameters"] > 100_000


def test_explicit_seed_must_match_the_cached_build(clip_init_cache):
    assert resolve("zoo:tiny-clip-init", str(clip_init_cache), seed=3).endswith(".safetensors")
    with pytest.raises(ZooError, match="built with seed 3, not 5"):
        resolve("zoo:tiny-clip-init", str(clip_init_cache), seed=5)


def test_resolve_expands_home(monkeypatch, tmp_path, clip_init_cache):
    monkeypatch.setenv("HOME", str(clip_init_cache.parent))
    path = resolve("zoo:tiny-clip-init", f"~/{clip_init_cache.name}")
    assert path == str(clip_init_cache / "tiny-clip-init" / "open_clip_model.safetensors")


def failing_builder(out_dir: Path, cache_dir: str, seed: int) -> dict:
    (out_dir / "half-written.bin").write_bytes(b"\0" * 16)
    raise RuntimeError("interrupted")


def counting_builder(out_dir: Path, cache_dir: str, seed: int) -> dict:
    (out_dir / "weights.bin").write_bytes(b"\1")
    return {"built": 1}


def test_a_revision_bump_rebuilds_that_model_and_leaves_the_others_cached(monkeypatch, tmp_path):
    for name in ("eye", "ear"):
        monkeypatch.setitem(MODELS, name, ZooModel(name, f"{__name__}:counting_builder", "", "a test model"))
        assert ensure_built(name, str(tmp_path)).built_now
    monkeypatch.setitem(MODELS, "eye", ZooModel("eye", f"{__name__}:counting_builder", "", "refitted", revision=2))
    rebuilt = ensure_built("eye", str(tmp_path))
    assert rebuilt.built_now and rebuilt.manifest["revision"] == 2
    assert not ensure_built("eye", str(tmp_path)).built_now
    assert not ensure_built("ear", str(tmp_path)).built_now


def test_failed_build_leaves_nothing_behind(monkeypatch, tmp_path):
    broken = ZooModel("broken", f"{__name__}:failing_builder", "", "a build that crashes half way")
    monkeypatch.setitem(MODELS, "broken", broken)
    with pytest.raises(RuntimeError, match="interrupted"):
        resolve("zoo:broken", str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == [".broken.lock"]


def test_tiny_lvlm_reloads_identical_weights_and_generates(zoo_dir):
    path = resolve("zoo:tiny-lvlm", zoo_dir)
    seed = read_manifest(path)["seed"]
    model = AutoModelForImageTextToText.from_pretrained(path).eval()
    processor = AutoProcessor.from_pretrained(path)
    assert isinstance(model, Qwen2VLForConditionalGeneration)
    torch.manual_seed(seed)
    rebuilt = Qwen2VLForConditionalGeneration(build_model_config(processor))
    loaded_state, rebuilt_state = model.state_dict(), rebuilt.state_dict()
    assert loaded_state.keys() == rebuilt_state.keys()
    assert all(torch.equal(loaded_state[k], rebuilt_state[k]) for k in loaded_state)

    assert processor.tokenizer.padding_side == "left"
    conversations = [
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "When was this built?"}]}],
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Who designed this? Search query:"}]}],
    ]
    texts = processor.apply_chat_template(conversations, tokenize=False, add_generation_prompt=True)
    inputs = processor(text=texts, images=[_solid((220, 30, 30)), _solid((40, 80, 230))],
                       padding=True, return_tensors="pt")
    assert inputs["attention_mask"][0, 0] == 0 and inputs["attention_mask"][:, -1].all()  # left padding
    runs = [model.generate(**inputs, max_new_tokens=6, do_sample=False) for _ in range(2)]
    prompt_length = inputs["input_ids"].shape[1]
    assert runs[0].shape == (2, prompt_length + 6)
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(runs[0][:, :prompt_length], inputs["input_ids"])


def test_processor_gives_sixteen_image_tokens_for_a_64px_image(zoo_dir):
    processor = AutoProcessor.from_pretrained(resolve("zoo:tiny-lvlm", zoo_dir))
    image_pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    conversation = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}]
    text = processor.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    for side in (64, 128):  # larger images are scaled down to the same 64x64 budget
        inputs = processor(text=[text], images=[_solid((10, 10, 10), (side, side))], return_tensors="pt")
        assert int((inputs["input_ids"] == image_pad).sum()) == IMAGE_TOKENS_PER_IMAGE == 16
        assert inputs["image_grid_thw"].tolist() == [[1, 8, 8]]
    # Any text tokenizes (byte fallback) and round-trips.
    unusual = "Zürich ☃ 1843 m"
    assert processor.tokenizer.decode(processor.tokenizer(unusual)["input_ids"]) == unusual


@pytest.mark.slow  # fits CLIP (13 s)
def test_clip_fit_lowers_contrastive_loss_on_a_small_world(clip_init_cache):
    model, preprocess = create_tiny_clip(resolve("zoo:tiny-clip-init", str(clip_init_cache)))
    world = fit_clip.load_world(num_entities=12, seed=7, preprocess=preprocess)
    assert len(world.images) == 12 * 8 and len(world.passages) == 12 * 4
    losses = fit_clip.fit(model, open_clip.get_tokenizer(TINY_CLIP_MODEL_NAME), world, steps=10, seed=0, families_per_batch=2)
    assert sum(losses[-3:]) / 3 < 0.8 * losses[0]



def test_clip_fit_encodes_texts_without_their_padding_to_the_features_of_the_whole_context():
    register_tiny_clip_config()
    torch.manual_seed(0)
    model = random_tiny_clip()
    tokens = open_clip.get_tokenizer(TINY_CLIP_MODEL_NAME)(["a red striped circle", "when was this tall tower built"])
    assert int(tokens.ne(0).sum(dim=1).max()) < tokens.shape[1] - 20
    whole = torch.nn.functional.normalize(model.encode_text(tokens), dim=-1)
    assert torch.allclose(fit_clip.encode_texts(model, tokens), whole, atol=1e-6)

def test_caption_targets_follow_the_mix_and_describe_checks_every_attribute():
    attributes = {"colour": "red", "texture": "striped", "shape": "circle", "background": "navy"}
    example = CaptionExample(_solid((0, 0, 0)), "red striped circle on navy", attributes)
    rng = random.Random(0)
    targets = [caption_target(example, "When was this built?", rng) for _ in range(2000)]
    share = {form: sum(t == form for t in targets) / len(targets) for form in (
        "red striped circle on navy", "a picture of a red striped circle", "red striped circle on navy when was this built")}
    assert abs(share["red striped circle on navy"] - 0.5) < 0.04
    assert abs(share["a picture of a red striped circle"] - 0.25) < 0.04
    assert abs(share["red striped circle on navy when was this built"] - 0.25) < 0.04
    assert describes_correctly("red striped circle on navy when was this built", attributes)
    assert not describes_correctly("red dotted circle on navy", attributes)
    assert not describes_correctly("red striped circle on navy blue", attributes)
    assert not describes_correctly("a picture of a red striped circle", attributes)


def test_captioner_fit_lowers_assistant_loss(zoo_dir):
    model, processor = load_lvlm("zoo:tiny-lvlm", zoo_dir)
    examples = fit_captioner.load_examples(num_entities=6, seed=11)
    assert len(examples) == 6 * (1 + 8)
    losses = fit_captioner.fit(model, processor, examples, steps=12, seed=0, batch_size=8)
    assert sum(losses[-3:]) / 3 < 0.8 * losses[0]


def test_mmrag_zoo_builds_the_models_a_config_names_with_what_they_start_from():
    assert models_referenced(["zoo:tiny-lvlm-captioner-v2", "open_clip:ViT-B-32", "", "zoo:visual-reader"]) == [
        "tiny-lvlm", "tiny-lvlm-captioner", "tiny-lvlm-captioner-v2", "visual-reader"]
    assert models_referenced(["zoo:reward-classifier"]) == ["tiny-lvlm", "reward-classifier"]
    with pytest.raises(ZooError, match="nope"):
        models_referenced(["zoo:nope"])
