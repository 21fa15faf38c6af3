"""Where `--config` reads from: a YAML file by path, or a preset shipped in the `mmrag.configs` package by name.

The presets travel inside the wheel, so `--config gpu_qwen2vl` (or `mmrag/configs/gpu_qwen2vl.yaml`,
as written in a checkout) works from any directory; no `--config` means the embedded
defaults of `mmrag.config`, which the `local` preset restates.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from mmrag.config import ConfigError

PRESETS_PACKAGE = "mmrag.configs"
SUFFIXES = (".yaml", ".yml")


def presets_dir() -> Path:
    return Path(str(files(PRESETS_PACKAGE)))


def preset_names() -> list[str]:
    """The presets `--config NAME` accepts: the YAML files directly in the `mmrag.configs` package."""
    return sorted(path.stem for path in presets_dir().iterdir() if path.suffix == ".yaml")


def resolve_config(value: str | None) -> Path | None:
    """The file `--config VALUE` names: VALUE itself when it is a file, else the preset VALUE names
    (`gpu_qwen2vl`, `gpu_qwen2vl.yaml` or `mmrag/configs/gpu_qwen2vl.yaml`); None stays None (the defaults)."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if path.is_file():
        return path
    name = value.removeprefix("mmrag/").removeprefix("configs/")
    for suffix in SUFFIXES:
        name = name.removesuffix(suffix)
    if name in preset_names():
        return presets_dir() / f"{name}.yaml"
    raise ConfigError(f"--config {value}: no such file, and not a preset name "
                      f"(presets: {', '.join(preset_names())})")
