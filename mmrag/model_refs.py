"""Model references: `zoo:NAME` turned into a local path, building the model once.

Every model reference in a config (`encoder.pretrained`, `translator.model`, ...) goes
through `resolve` before it reaches open_clip or transformers. `zoo:NAME` is built once
into `cache_dir/NAME/` and its local path returned; anything else (an HF id, a path,
an open_clip tag) passes through unchanged. Nothing is ever downloaded.

Sits below `mmrag.models` (which resolves references) and `mmrag.zoo` (the builders,
which load models to fit them): the registry names each builder as a `module:function`
string and imports it only when that model is built, so no import cycle forms.

A build runs in a temporary directory beside the target, writes `zoo.json` (name, seed,
format version, figures such as held-out accuracies) last, and is renamed into place
under a file lock, so a crashed or concurrent build never leaves half a model behind.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mmrag.atomic import atomic_directory

ZOO_PREFIX = "zoo:"
ZOO_FORMAT_VERSION = 2
"""Bumped when every build's layout changes; older builds are rebuilt on next use."""
MANIFEST_FILE = "zoo.json"


class ZooError(ValueError):
    """A `zoo:` reference that cannot be resolved."""


@dataclass(frozen=True)
class ZooModel:
    name: str
    builder: str
    """`module:function` with signature (out_dir: Path, cache_dir: str, seed: int) -> figures dict."""
    artifact: str
    """What `resolve` returns inside the built directory ("" = the directory itself)."""
    summary: str
    revision: int = 1
    """Bumped when this builder's output changes (its fitting data or recipe): only this model is then rebuilt."""
    needs: tuple[str, ...] = ()
    """The zoo models its builder resolves (warm starts): built before it (`mmrag.zoo.parallel_build`)."""


MODELS: dict[str, ZooModel] = {
    model.name: model
    for model in (
        ZooModel("tiny-clip-init", "mmrag.zoo.tiny_clip:build_tiny_clip_init", "open_clip_model.safetensors",
                 "random mmrag-tiny-clip checkpoint (open_clip)"),
        ZooModel("tiny-clip", "mmrag.zoo.fit_clip:build_tiny_clip", "open_clip_model.safetensors",
                 "mmrag-tiny-clip fitted contrastively on a synthetic world", needs=("tiny-clip-init",)),
        ZooModel("tiny-lvlm", "mmrag.zoo.tiny_lvlm:build_tiny_lvlm", "",
                 "random tiny Qwen2-VL with a locally trained tokenizer"),
        ZooModel("tiny-lvlm-captioner", "mmrag.zoo.fit_captioner:build_tiny_lvlm_captioner", "",
                 "tiny-lvlm fitted to describe images as search queries (world v1)", revision=2, needs=("tiny-lvlm",)),
        ZooModel("tiny-clip-v2", "mmrag.zoo.fit_clip:build_tiny_clip_v2", "open_clip_model.safetensors",
                 "tiny-clip refitted on generic caption-passage pairs in world v2's vocabulary, not its KB templates",
                 needs=("tiny-clip",)),
        ZooModel("tiny-lvlm-captioner-v2", "mmrag.zoo.fit_captioner:build_tiny_lvlm_captioner_v2", "",
                 "tiny-lvlm-captioner refitted to describe images in its own style (world v2)", revision=2,
                 needs=("tiny-lvlm-captioner",)),
        ZooModel("visual-reader", "mmrag.zoo.fit_visual_reader:build_visual_reader", "",
                 "CNN reading colour, shape, texture and background off a picture (the grounded generator's eye)",
                 revision=3),
        ZooModel("tiny-lvlm-reader", "mmrag.zoo.fit_reader:build_tiny_lvlm_reader", "",
                 "tiny-lvlm-captioner-v2 fitted to answer from the picture and the passages it is given (the hf "
                 "generator)", needs=("tiny-lvlm-captioner-v2",)),
        ZooModel("reward-classifier", "mmrag.zoo.fit_reward_classifier:build_reward_classifier", "",
                 "tiny Qwen2 sequence classifier judging an answer against its reference, paraphrases accepted "
                 "(the hf_classifier reward)", needs=("tiny-lvlm",)),
    )
}


def models_referenced(refs: Iterable[str]) -> list[str]:
    """The zoo models `refs` name as `zoo:NAME`, with the models each needs, in registry order (`build_models`
    builds each chain of needs in its own worker)."""
    wanted: set[str] = set()
    pending = [ref[len(ZOO_PREFIX):] for ref in refs if isinstance(ref, str) and ref.startswith(ZOO_PREFIX)]
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            pending.extend(_lookup(name).needs)
    return [name for name in MODELS if name in wanted]


@dataclass(frozen=True)
class ZooBuild:
    """Where a zoo model lives and whether this call built it."""

    name: str
    path: str
    built_now: bool
    manifest: dict


def resolve(ref: str, cache_dir: str, seed: int | None = None) -> str:
    """`zoo:NAME` -> local path (built once if missing); any other string unchanged.

    `seed=None` accepts whatever seed the cached model was built with (0 when it is
    built now); an explicit seed must match the cached build.
    """
    if not ref.startswith(ZOO_PREFIX):
        return ref
    return ensure_built(ref[len(ZOO_PREFIX):], cache_dir, seed).path


def ensure_built(name: str, cache_dir: str, seed: int | None = None, rebuild: bool = False) -> ZooBuild:
    """Find `name` in `cache_dir`, or build it (also when `rebuild` or its format is stale)."""
    model = _lookup(name)
    cache = Path(cache_dir).expanduser()
    target = cache / name
    manifest = _current_manifest(model, target)
    if manifest is not None and not rebuild:
        return _found(model, target, manifest, seed)
    cache.mkdir(parents=True, exist_ok=True)
    with _build_lock(cache / f".{name}.lock"):
        manifest = _current_manifest(model, target)
        if manifest is not None and not rebuild:  # another process built it while we waited
            return _found(model, target, manifest, seed)
        manifest = _build(model, cache, 0 if seed is None else seed)
    return ZooBuild(name, _artifact_path(model, target), True, manifest)


def read_manifest(path: str | Path) -> dict | None:
    """The zoo.json of a built model directory, or None when there is none."""
    manifest_path = Path(path) / MANIFEST_FILE
    if not manifest_path.is_file():
        return None
    return json.loads(manifest_path.read_text())


def _lookup(name: str) -> ZooModel:
    if name not in MODELS:
        raise ZooError(f"zoo:{name}: unknown zoo model (valid names: {', '.join(MODELS)})")
    return MODELS[name]


def is_current(model: ZooModel, manifest: dict) -> bool:
    """Whether a build's manifest matches this mmrag's format and this model's revision (builds before
    revisions were recorded count as revision 1)."""
    return (manifest.get("format_version") == ZOO_FORMAT_VERSION
            and manifest.get("revision", 1) == model.revision)


def _current_manifest(model: ZooModel, target: Path) -> dict | None:
    manifest = read_manifest(target)
    if manifest is None or not is_current(model, manifest):
        return None
    return manifest


def _found(model: ZooModel, target: Path, manifest: dict, seed: int | None) -> ZooBuild:
    if seed is not None and manifest["seed"] != seed:
        raise ZooError(
            f"zoo:{model.name}: {target} was built with seed {manifest['seed']}, not {seed}; "
            f"use another zoo.cache_dir or rebuild it (mmrag zoo --only {model.name} --rebuild)"
        )
    return ZooBuild(model.name, _artifact_path(model, target), False, manifest)


def _artifact_path(model: ZooModel, target: Path) -> str:
    return str(target / model.artifact) if model.artifact else str(target)


@contextmanager
def _build_lock(lock_path: Path) -> Iterator[None]:
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(model: ZooModel, cache: Path, seed: int) -> dict:
    module_name, function_name = model.builder.split(":")
    build_fn = getattr(importlib.import_module(module_name), function_name)
    with atomic_directory(cache / model.name) as staging:
        started = time.perf_counter()
        figures = build_fn(staging, str(cache), seed)
        manifest = {
            "name": model.name,
            "seed": seed,
            "format_version": ZOO_FORMAT_VERSION,
            "revision": model.revision,
            "artifact": model.artifact,
            "build_seconds": round(time.perf_counter() - started, 1),
            "figures": figures,
        }
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
