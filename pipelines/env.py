"""Print the versions a bug report needs: Python, torch and CUDA, Ray, DeepSpeed, the HF stack, FAISS, open_clip, mmrag, the zoo.

Versions are read from the installed distributions' metadata, so nothing heavy is
imported (torch aside: only torch knows its CUDA build and devices) and no Ray is started. The zoo
lines give each model's build in the config's `zoo.cache_dir`: its format version
(against the one this mmrag builds), seed and figures. Paste the output into an issue.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sys
from pathlib import Path

import torch

import mmrag
from mmrag.model_refs import MODELS, ZOO_FORMAT_VERSION, is_current, read_manifest
from mmrag.pipelines.options import config_from_args, run_main

DISTRIBUTIONS = (
    ("ray", ("ray",)), ("deepspeed", ("deepspeed",)), ("transformers", ("transformers",)),
    ("tokenizers", ("tokenizers",)), ("huggingface_hub", ("huggingface_hub",)), ("peft", ("peft",)),
    ("safetensors", ("safetensors",)), ("open_clip", ("open_clip_torch",)), ("faiss", ("faiss-cpu", "faiss-gpu")),
    ("torchvision", ("torchvision",)), ("pyarrow", ("pyarrow",)), ("numpy", ("numpy",)), ("pydantic", ("pydantic",)),
    ("fastapi", ("fastapi",)), ("uvicorn", ("uvicorn",)), ("pillow", ("pillow",)), ("tensorboard", ("tensorboard",)),
    ("wandb", ("wandb",)), ("mlflow", ("mlflow", "mlflow-skinny")),
)
"""(label, the distributions that provide it, first installed wins)."""
NOT_INSTALLED = "not installed"



def installed_version(distributions: tuple[str, ...]) -> str:
    for name in distributions:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        return version if len(distributions) == 1 else f"{version} ({name})"
    return NOT_INSTALLED


def torch_build() -> dict:
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() \
        else []
    return {"torch": torch.__version__, "cuda": torch.version.cuda or "none (CPU build)",
            "cudnn": torch.backends.cudnn.version() if torch.version.cuda else None, "gpus": devices}


def zoo_builds(cache_dir: str) -> dict:
    """{model: its zoo.json's format, revision, seed and figures and whether it is current, or None when not built}
    under `cache_dir`."""
    builds = {}
    for name, model in MODELS.items():
        manifest = read_manifest(Path(cache_dir).expanduser() / name)
        builds[name] = None if manifest is None else {
            "current": is_current(model, manifest), "revision": manifest.get("revision", 1),
            **{key: manifest.get(key) for key in ("format_version", "seed", "build_seconds", "figures")}}
    return builds


def environment(cache_dir: str) -> dict:
    return {
        "mmrag": {"version": mmrag.__version__, "path": str(Path(mmrag.__file__).parent)},
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": platform.platform(),
        **torch_build(),
        "packages": {label: installed_version(names) for label, names in DISTRIBUTIONS},
        "zoo": {"cache_dir": cache_dir, "format_version": ZOO_FORMAT_VERSION, "models": zoo_builds(cache_dir)},
    }


def environment_text(env: dict) -> str:
    width = max(len(label) for label in env["packages"]) + 2
    lines = [f"{'mmrag':<{width}}{env['mmrag']['version']}  ({env['mmrag']['path']})",
             f"{'python':<{width}}{env['python']['version']} {env['python']['implementation']}  "
             f"({env['python']['executable']})",
             f"{'platform':<{width}}{env['platform']}",
             f"{'torch':<{width}}{env['torch']}",
             f"{'cuda':<{width}}{env['cuda']}" + (f", cuDNN {env['cudnn']}" if env["cudnn"] else ""),
             f"{'gpus':<{width}}{', '.join(env['gpus']) if env['gpus'] else 'none visible'}"]
    lines += [f"{label:<{width}}{version}" for label, version in env["packages"].items()]
    zoo = env["zoo"]
    lines.append(f"{'zoo':<{width}}{zoo['cache_dir']}  (this mmrag builds format {zoo['format_version']})")
    for name, build in zoo["models"].items():
        if build is None:
            lines.append(f"  {name}: not built")
            continue
        stale = "" if build["current"] else " (stale: rebuilt on next use)"
        lines.append(f"  {name}: format {build['format_version']} revision {build['revision']}{stale}, seed {build['seed']}, built in "
                     f"{build['build_seconds']} s; figures {json.dumps(build['figures'])}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    env = environment(cfg.zoo.cache_dir)
    print(json.dumps(env, indent=2) if args.json else environment_text(env))
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
